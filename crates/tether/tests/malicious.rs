//! The malicious-server suite: one stdio server per way a server can misbehave (fixture modes
//! of `misbehaving_server.py`), each run through the real binary and held to a clear outcome:
//! the exit code and the line that explains it, within a time bound, with no panic. It is one
//! test on purpose: the cases run one after another, so the peak memory of Tether's processes
//! (`getrusage` of the waited-for children) is known case by case and printed as a table. The
//! fixtures write their large outputs in pieces, so the peak is Tether's, not theirs.
//! `hostile.rs` holds the cases that need more than one command.

// Benchmarks and tests report to their runner: the binary's terminal sink is not theirs.
#![allow(clippy::disallowed_macros)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use test_support::misbehaving_stdio;

/// One misbehaviour and what Tether must make of it.
struct Case {
    mode: &'static str,
    /// The tester command after `--stdio SERVER`.
    args: &'static [&'static str],
    /// `--timeout` in seconds (the per-request limit).
    timeout: &'static str,
    code: i32,
    /// Said on stdout or stderr.
    says: &'static str,
}

const fn case(
    mode: &'static str,
    args: &'static [&'static str],
    timeout: &'static str,
    code: i32,
    says: &'static str,
) -> Case {
    Case {
        mode,
        args,
        timeout,
        code,
        says,
    }
}

const CALL: &[&str] = &["call", "misbehaving_server", "boom"];
const TOOLS: &[&str] = &["tools"];

const CASES: &[Case] = &[
    // Dies, hangs or never talks.
    case(
        "exit",
        TOOLS,
        "5",
        2,
        "failed during startup: the server exited with status 3; last stderr line: fatal: cannot open database",
    ),
    case("silent", TOOLS, "2", 2, "never answered the handshake"),
    case(
        "garbage",
        TOOLS,
        "2",
        2,
        "an MCP stdio server must write only JSON-RPC to stdout",
    ),
    case(
        "init-error",
        TOOLS,
        "5",
        2,
        "it refused the handshake: licence expired (code -32000)",
    ),
    case(
        "crash-on-call",
        CALL,
        "5",
        2,
        "the server exited with status 70; last stderr line: panic: simulated crash",
    ),
    case(
        "hang-on-call",
        CALL,
        "2",
        2,
        "tool \"boom\" timed out after 2s",
    ),
    case("half", CALL, "2", 2, "tool \"boom\" timed out after 2s"),
    case("stdout-closed", CALL, "5", 2, "tools/list failed"),
    // Answers that cannot be read fail the call at once (the timeout is far away).
    case(
        "huge-result",
        CALL,
        "600",
        2,
        "over the 16 MiB a message may have",
    ),
    case(
        "garbage-line",
        CALL,
        "600",
        2,
        "its message was 50.0 MB, over the 16 MiB a message may have",
    ),
    case("bad-utf8", CALL, "600", 2, "not valid UTF-8"),
    case("no-jsonrpc", CALL, "600", 2, "lacks \"jsonrpc\": \"2.0\""),
    case("deep", CALL, "600", 2, "nested more than 127 levels deep"),
    case(
        "odd-error",
        CALL,
        "600",
        2,
        "its error object has no integer \"code\"",
    ),
    case(
        "null-result",
        CALL,
        "600",
        2,
        "does not match the MCP schema",
    ),
    case(
        "string-result",
        CALL,
        "600",
        2,
        "does not match the MCP schema",
    ),
    case("bad-tools-list", TOOLS, "600", 2, "tools/list failed"),
    // Lists that never end are stopped, not followed until memory runs out.
    case(
        "endless-pages",
        TOOLS,
        "600",
        2,
        "pagination that never ends: the server sent the cursor \"again\" twice",
    ),
    case(
        "growing-pages",
        TOOLS,
        "600",
        2,
        "pagination that never ends: the listing did not end after 1000 pages",
    ),
    // Catalogues past a server's caps are refused at the cap, before they cost gigabytes.
    case(
        "huge-catalogue",
        TOOLS,
        "600",
        2,
        "listing refused: the server listed more than 20000 items",
    ),
    case(
        "fat-catalogue",
        TOOLS,
        "600",
        2,
        "listing refused: the listing is over 16 MiB",
    ),
    // Wrong ids: a stray answer is ignored, a repeated one too.
    case("wrong-id", CALL, "2", 2, "tool \"boom\" timed out after 2s"),
    case("duplicate-id", CALL, "30", 0, "ok"),
    // Floods and sizes that must work, in bounded memory.
    case("flood", CALL, "300", 0, "ok"),
    case("stderr-flood", CALL, "60", 0, "ok"),
    case(
        "many-tools",
        TOOLS,
        "60",
        0,
        "misbehaving_server__tool_4999",
    ),
    case("long-description", TOOLS, "60", 0, "Long. blah blah"),
    case("odd-names", TOOLS, "30", 0, "misbehaving_server__boom"),
    // Lenient where it costs nothing.
    case("bom", CALL, "30", 0, "ok"),
    case("wrong-version", CALL, "30", 0, "ok"),
    case(
        "asks-sampling",
        CALL,
        "30",
        0,
        "asked for sampling, but this command has no model",
    ),
    case("escapes", CALL, "30", 0, "result visiblehidden"),
];

/// Peak resident memory of the largest child waited for so far, in MiB.
fn children_peak_mib() -> f64 {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage");
    // Linux reports kibibytes.
    usage.max_rss() as f64 / 1024.0
}

/// No Tether process may need more than this, whatever a server sends.
const MEMORY_LIMIT_MIB: f64 = 128.0;

#[test]
fn every_misbehaving_server_gets_a_clear_outcome_in_bounded_memory() {
    let dir = test_support::scratch_dir("malicious", "suite");
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for case in CASES {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args([
                "--timeout",
                case.timeout,
                "--stdio",
                &misbehaving_stdio(case.mode),
            ])
            .args(case.args)
            .current_dir(&dir)
            .env("NO_COLOR", "1")
            .env("TETHER_DATA_DIR", dir.join("data"))
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let took = started.elapsed();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let code = output.status.code().unwrap_or(-1);
        let peak = children_peak_mib();
        table.push(format!(
            "{:<18} exit {code}  {:>6.2}s  peak so far {peak:>6.1} MiB",
            case.mode,
            took.as_secs_f64()
        ));
        if code != case.code || !text.contains(case.says) || text.contains("panicked") {
            failures.push(format!(
                "{}: exit {code} (want {}), want \"{}\" in:\n{}",
                case.mode,
                case.code,
                case.says,
                text.chars().take(2000).collect::<String>()
            ));
        }
        // Nothing here may take long: the slowest legitimate case is the 100,000-notification
        // flood, about 16 s in a debug build on two cores.
        if took > Duration::from_secs(120) {
            failures.push(format!("{}: took {took:?}", case.mode));
        }
    }
    eprintln!("{}", table.join("\n"));
    let peak = children_peak_mib();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        peak < MEMORY_LIMIT_MIB,
        "a Tether process peaked at {peak:.1} MiB (limit {MEMORY_LIMIT_MIB} MiB)\n{}",
        table.join("\n")
    );
    assert!(CASES.len() >= 30);
}
