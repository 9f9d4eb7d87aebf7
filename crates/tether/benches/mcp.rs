//! The client performance suite, run with `cargo bench -p tether --bench mcp` (or
//! scripts/bench.sh). Every figure is taken in this one run, in rounds interleaved so machine
//! noise hits every contender alike, and printed as the median with the spread (min–max) of
//! the rounds, next to its ratio:
//!
//! 1. **the floor**: this benchmark's own binary as a stdio echo server, and a blocking client
//!    writing one JSON-RPC line and reading one back: the fastest a round trip over pipes goes;
//! 2. **round trips**: `tools/call` sequentially and with 16 and 64 calls in flight, against
//!    the fast Rust server (`tether builtin-server`, `add`) and server-everything (`get-sum`),
//!    from Tether's client, the TypeScript SDK client and the Python SDK client;
//! 3. **the agent loop**: what a tool call costs the host beyond its round trip, with a model
//!    that answers instantly in-process;
//! 4. **start-up**: `tether servers` with 1, 10 and 50 fast servers and 10 server-everything;
//!    the first model request of `tether run` with 10 servers, one of them 3 s slow;
//! 5. **memory**: peak RSS of `tether run` and `tether chat` with 10 servers connected.
//!
//! `TETHER_BENCH_QUICK=1` makes fewer calls per round (still 5 rounds);
//! `TETHER_BENCH_ONLY=profile` only makes 100,000 sequential calls to the fast server, to run
//! under a profiler.

// Benchmarks and tests report to their runner: the binary's terminal sink is not theirs.
#![allow(clippy::disallowed_macros)]
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, join_all};
use serde_json::{Value, json};
use test_support::model::{Gate, Reply, ScriptedModel, Wire};
use test_support::{npm_bin, venv_bin, workspace_root};
use tether_agent::{Agent, AgentOptions, NonInteractive, SelectionMode, SelectionOptions};
use tether_catalog::{ToolCatalog, selection_for};
use tether_llm::{ChatRequest, EventStream, LlmError, Provider, StopReason, StreamEvent};
use tether_mcp::{HeadlessHost, ServerConfig, ServerConnection, ServerRegistry};
use tether_protocol::chat::Message;

const ROUNDS: usize = 5;
/// The environment variable that makes this binary the floor's echo server.
const ECHO_ROLE: &str = "TETHER_BENCH_ECHO_SERVER";

fn tether() -> &'static str {
    env!("CARGO_BIN_EXE_tether")
}

fn quick() -> bool {
    std::env::var_os("TETHER_BENCH_QUICK").is_some()
}

/// Median and spread of one figure over the rounds.
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(samples: &[f64]) -> Spread {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Spread {
            median: sorted[sorted.len() / 2],
            min: sorted[0],
            max: sorted[sorted.len() - 1],
        }
    }

    fn rate(&self) -> String {
        format!("{:>7.0}/s ({:.0}–{:.0})", self.median, self.min, self.max)
    }

    fn ratio(&self) -> String {
        format!("{:.2}× ({:.2}–{:.2})", self.median, self.min, self.max)
    }

    fn millis(&self) -> String {
        format!("{:.0} ms ({:.0}–{:.0})", self.median, self.min, self.max)
    }
}

/// Per-round ratios `a[i] / b[i]`: interleaved rounds make each pair share the machine's mood.
fn ratios(a: &[f64], b: &[f64]) -> Spread {
    let per_round: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
    Spread::of(&per_round)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

// ---------------------------------------------------------------------------------------
// 1. The floor.

/// The echo server: every line back, unchanged, flushed at once.
fn echo_server() {
    let stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    for line in stdin.lines() {
        let Ok(line) = line else { return };
        if out.write_all(line.as_bytes()).is_err()
            || out.write_all(b"\n").is_err()
            || out.flush().is_err()
        {
            return;
        }
    }
}

fn floor_calls_per_second(calls: usize) -> f64 {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ECHO_ROLE, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to = BufWriter::new(child.stdin.take().unwrap());
    let mut from = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut round_trip = |i: usize| {
        writeln!(
            to,
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"add","arguments":{{"a":{i},"b":1}}}}}}"#
        )
        .unwrap();
        to.flush().unwrap();
        line.clear();
        from.read_line(&mut line).unwrap();
        assert!(line.contains("tools/call"));
    };
    for i in 0..50 {
        round_trip(i);
    }
    let started = Instant::now();
    for i in 0..calls {
        round_trip(i);
    }
    let rate = calls as f64 / started.elapsed().as_secs_f64();
    drop(to);
    let _ = child.wait();
    rate
}

// ---------------------------------------------------------------------------------------
// 2. Round trips.

#[derive(Clone, Copy)]
struct Target {
    label: &'static str,
    tool: &'static str,
    calls: usize,
}

fn target_command(target: &Target) -> (String, Vec<String>) {
    match target.tool {
        "add" => (tether().to_string(), vec!["builtin-server".into()]),
        _ => (
            npm_bin("mcp-server-everything").display().to_string(),
            vec!["stdio".into()],
        ),
    }
}

async fn tether_calls_per_second(target: &Target, in_flight: usize) -> f64 {
    let (command, args) = target_command(target);
    let server = ServerConfig::stdio("bench", command, args);
    let connection = ServerConnection::connect(&server, Arc::new(HeadlessHost))
        .await
        .expect("server starts");
    let args = |i: usize| json!({"a": i, "b": 1}).as_object().cloned();
    for i in 0..50 {
        connection
            .call_tool(target.tool, args(i), None)
            .await
            .unwrap();
    }
    let next = AtomicUsize::new(0);
    let calls = target.calls;
    let started = Instant::now();
    join_all((0..in_flight).map(|_| async {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= calls {
                return;
            }
            let result = connection.call_tool(target.tool, args(i), None).await;
            assert!(!result.unwrap().is_error);
        }
    }))
    .await;
    let rate = calls as f64 / started.elapsed().as_secs_f64();
    connection.close().await;
    rate
}

fn peer_calls_per_second(program: &str, script: &str, target: &Target, in_flight: usize) -> f64 {
    let (command, args) = target_command(target);
    let output = Command::new(program)
        .arg(workspace_root().join("peers/bench").join(script))
        .arg(target.calls.to_string())
        .arg(in_flight.to_string())
        .arg(target.tool)
        .arg(command)
        .args(args)
        .output()
        .expect("peer client runs");
    assert!(
        output.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line: Value = serde_json::from_slice(&output.stdout).expect("peer prints JSON");
    line["calls"].as_f64().unwrap() / line["seconds"].as_f64().unwrap()
}

// ---------------------------------------------------------------------------------------
// 3. The agent loop.

/// A model that answers at once, in-process: `calls` sequential calls of `tool`, then text.
struct InstantModel {
    tool: String,
    calls: usize,
}

impl Provider for InstantModel {
    fn name(&self) -> &str {
        "bench:instant"
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, LlmError>> {
        let made = request
            .messages
            .iter()
            .rev()
            .take_while(|m| !matches!(m, Message::User { .. }))
            .filter(|m| matches!(m, Message::Tool { .. }))
            .count();
        let events = if made < self.calls {
            vec![
                Ok(StreamEvent::ToolCallDelta {
                    index: 0,
                    id: Some(format!("call_{made}")),
                    name: Some(self.tool.clone()),
                    arguments: format!(r#"{{"a": {made}, "b": 1}}"#),
                }),
                Ok(StreamEvent::Stop(StopReason::ToolCalls)),
            ]
        } else {
            vec![
                Ok(StreamEvent::TextDelta("done".into())),
                Ok(StreamEvent::Stop(StopReason::EndTurn)),
            ]
        };
        Box::pin(async move { Ok(Box::pin(futures::stream::iter(events)) as EventStream) })
    }
}

/// Microseconds per call: a turn of `CALLS_PER_TURN` calls through the loop, and the same
/// number of direct calls on the same connection.
async fn agent_loop_micros(turns: usize) -> (f64, f64) {
    const CALLS_PER_TURN: usize = 10;
    let server = ServerConfig::stdio("fast", tether(), vec!["builtin-server".into()]);
    let registry = ServerRegistry::start([server], Arc::new(HeadlessHost)).await;
    let (catalog, errors) = ToolCatalog::load(&registry).await;
    assert!(errors.is_empty());
    let model = InstantModel {
        tool: "fast__add".into(),
        calls: CALLS_PER_TURN,
    };
    let selection = selection_for(&SelectionOptions {
        mode: SelectionMode::All,
        ..SelectionOptions::default()
    });
    let options = AgentOptions {
        max_steps: CALLS_PER_TURN + 2,
        ..AgentOptions::default()
    };
    let mut agent = Agent::new(
        &model,
        &registry,
        catalog,
        selection,
        &NonInteractive,
        options,
    );
    let (events, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let cancel = tokio_util::sync::CancellationToken::new();
    // The first turn warms up and is not timed.
    let mut started = Instant::now();
    for turn in 0..=turns {
        if turn == 1 {
            started = Instant::now();
        }
        let mut conversation = vec![Message::user("add them".to_string())];
        let outcome = agent
            .run_turn(&mut conversation, &events, &cancel)
            .await
            .unwrap();
        assert_eq!(outcome.text, "done");
        while seen.try_recv().is_ok() {}
    }
    let looped = started.elapsed().as_secs_f64() * 1e6 / (turns * CALLS_PER_TURN) as f64;
    drop(agent);
    let connection = registry.connection("fast").unwrap();
    let direct_calls = turns * CALLS_PER_TURN;
    let started = Instant::now();
    for i in 0..direct_calls {
        let args = json!({"a": i, "b": 1}).as_object().cloned();
        connection.call_tool("add", args, None).await.unwrap();
    }
    let direct = started.elapsed().as_secs_f64() * 1e6 / direct_calls as f64;
    registry.shutdown().await;
    (looped, direct)
}

// ---------------------------------------------------------------------------------------
// 4. Start-up.

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tether-bench-suite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A config of `fast` built-in servers, `everything` server-everything and, when `slow`, one
/// built-in server that first sleeps 3 s.
fn write_config(name: &str, fast: usize, everything: usize, slow: bool) -> PathBuf {
    let mut servers = serde_json::Map::new();
    for i in 0..fast {
        servers.insert(
            format!("fast{i}"),
            json!({"command": tether(), "args": ["builtin-server"]}),
        );
    }
    for i in 0..everything {
        servers.insert(
            format!("everything{i}"),
            json!({"command": npm_bin("mcp-server-everything"), "args": ["stdio"]}),
        );
    }
    if slow {
        servers.insert(
            "slow".into(),
            json!({"command": "sh", "args": ["-c", format!("sleep 3; exec '{}' builtin-server", tether())]}),
        );
    }
    let path = scratch().join(format!("{name}.json"));
    std::fs::write(&path, json!({"mcpServers": servers}).to_string()).unwrap();
    path
}

/// A `tether` command isolated from the user's config, data and credentials.
fn isolated(args: &[&str]) -> Command {
    let home = scratch().join("home");
    let mut command = Command::new(tether());
    command
        .args(args)
        .current_dir(scratch())
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env("TETHER_CREDENTIALS", home.join("credentials.json"))
        .env("OPENAI_API_KEY", "bench")
        .env("NO_COLOR", "1");
    command
}

/// `tether COMMAND` against the scripted model at `base` with the servers of `config`.
fn with_model(command: &str, base: &str, config: &Path) -> Command {
    let mut tether = isolated(&[
        command,
        "--model",
        "openai:scripted-model",
        "--base-url",
        base,
    ]);
    tether.arg("--config").arg(config);
    tether
}

fn servers_millis(config: &Path) -> f64 {
    let started = Instant::now();
    let output = isolated(&["servers", "--json", "--config"])
        .arg(config)
        .output()
        .unwrap();
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

/// Milliseconds from starting `tether run` to its first model request.
fn first_request_millis(config: &Path) -> f64 {
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("ok")]);
    let base = model.base_url();
    let started = Instant::now();
    let output = with_model("run", &base, config)
        .arg("hello")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let first = model.requests().first().unwrap().received;
    first.duration_since(started).as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------
// 5. Memory.

fn peak_rss_mib(pid: u32) -> f64 {
    test_support::peak_rss_kib(pid).expect("the process is alive") as f64 / 1024.0
}

/// Peak RSS of `tether run` with the servers of `config`, taken while the model's answer
/// after one tool call is held, so the process is alive and has done a whole step.
fn run_rss(config: &Path) -> f64 {
    let gate = Gate::new();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("call_1", "fast0__add", r#"{"a": 1, "b": 2}"#),
            Reply::Held {
                gate: gate.clone(),
                reply: Box::new(Reply::text("3")),
            },
        ],
    );
    let base = model.base_url();
    let mut child = with_model("run", &base, config)
        .arg("what is 1 + 2?")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "tether run never asked twice");
        std::thread::sleep(Duration::from_millis(5));
    }
    let rss = peak_rss_mib(child.id());
    gate.open();
    assert!(child.wait().unwrap().success());
    rss
}

/// Peak RSS of `tether chat` over a pipe after one turn with a tool call.
fn chat_rss(config: &Path) -> f64 {
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("call_1", "fast0__add", r#"{"a": 1, "b": 2}"#),
            Reply::text("three"),
        ],
    );
    let base = model.base_url();
    let mut child = with_model("chat", &base, config)
        .env("TETHER_DATA_DIR", scratch().join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "what is 1 + 2?").unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("three") {
        line.clear();
        assert!(stdout.read_line(&mut line).unwrap() > 0, "chat ended early");
    }
    let rss = peak_rss_mib(child.id());
    drop(stdin);
    assert!(child.wait().unwrap().success());
    rss
}

// ---------------------------------------------------------------------------------------

fn goal(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn main() {
    if std::env::var_os(ECHO_ROLE).is_some() {
        echo_server();
        return;
    }
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing. Only run when benched.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // The binary's runtime flavour (see main.rs) unless asked for the other, to compare.
    let runtime = if std::env::var_os("TETHER_BENCH_CURRENT_THREAD").is_some() {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build()
    .unwrap();
    // For a profiler: only Tether's sequential calls to the fast server, for a while.
    if std::env::var("TETHER_BENCH_ONLY").as_deref() == Ok("profile") {
        let target = Target {
            label: "fast",
            tool: "add",
            calls: 100_000,
        };
        let rate = runtime.block_on(tether_calls_per_second(&target, 1));
        println!("{rate:.0} calls/s");
        return;
    }
    let scale = if quick() { 4 } else { 1 };
    let python = venv_bin("python").display().to_string();
    let load_before = load_average();
    println!(
        "client suite: {ROUNDS} interleaved rounds, median (min–max); load average {load_before} at the start, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // 1 and 2: the floor and the round trips, interleaved.
    let targets = [
        Target {
            label: "fast Rust server (tether builtin-server, add)",
            tool: "add",
            calls: 2000 / scale,
        },
        Target {
            label: "server-everything 2026.8.31 (Node, get-sum)",
            tool: "get-sum",
            calls: 1000 / scale,
        },
    ];
    let in_flight = [1, 16, 64];
    let mut floor = Vec::new();
    // [target][in_flight][client] -> samples
    let mut rates = vec![vec![vec![Vec::new(); 3]; in_flight.len()]; targets.len()];
    for round in 0..ROUNDS {
        eprintln!("  round {}/{ROUNDS}: round trips", round + 1);
        floor.push(floor_calls_per_second(4000 / scale));
        for (t, target) in targets.iter().enumerate() {
            for (f, &n) in in_flight.iter().enumerate() {
                let mut target = *target;
                target.calls *= if n == 1 { 1 } else { 2 };
                rates[t][f][0].push(runtime.block_on(tether_calls_per_second(&target, n)));
                rates[t][f][1].push(peer_calls_per_second("node", "ts_client.mjs", &target, n));
                rates[t][f][2].push(peer_calls_per_second(&python, "py_client.py", &target, n));
            }
        }
    }
    println!();
    println!(
        "the floor: stdio echo, one JSON-RPC line each way, blocking Rust client  {}",
        Spread::of(&floor).rate()
    );
    for (t, target) in targets.iter().enumerate() {
        println!();
        println!("tools/call round trips against the {}", target.label);
        println!(
            "  {:<10} {:<26} {:<26} {:<26} {:<20} {:<20}",
            "in flight",
            "Tether",
            "TypeScript SDK 1.32.2",
            "Python SDK 2.3.0",
            "Tether / TS",
            "Tether / Python"
        );
        for (f, n) in in_flight.iter().enumerate() {
            let [tether, ts, py] = [&rates[t][f][0], &rates[t][f][1], &rates[t][f][2]];
            println!(
                "  {:<10} {:<26} {:<26} {:<26} {:<20} {:<20}",
                n,
                Spread::of(tether).rate(),
                Spread::of(ts).rate(),
                Spread::of(py).rate(),
                ratios(tether, ts).ratio(),
                ratios(tether, py).ratio()
            );
        }
    }
    let fast_seq = &rates[0][0][0];
    let of_floor = ratios(fast_seq, &floor);
    let vs_ts = ratios(fast_seq, &rates[0][0][1]);
    let vs_py = ratios(fast_seq, &rates[0][0][2]);
    let scaling = ratios(&rates[0][2][0], fast_seq);
    println!();
    println!("goals (fast server):");
    println!(
        "  sequential Tether / floor           {}  goal ≥ 0.70: {}",
        of_floor.ratio(),
        goal(of_floor.median >= 0.70)
    );
    println!(
        "  sequential Tether / TypeScript SDK  {}  goal ≥ 4: {}",
        vs_ts.ratio(),
        goal(vs_ts.median >= 4.0)
    );
    println!(
        "  sequential Tether / Python SDK      {}  goal ≥ 4: {}",
        vs_py.ratio(),
        goal(vs_py.median >= 4.0)
    );
    println!(
        "  64 in flight / sequential (Tether)  {}  goal ≥ 3: {}",
        scaling.ratio(),
        goal(scaling.median >= 3.0)
    );

    // 3. The agent loop.
    let mut looped = Vec::new();
    let mut direct = Vec::new();
    let mut overhead = Vec::new();
    for _ in 0..ROUNDS {
        let (l, d) = runtime.block_on(agent_loop_micros(100 / scale));
        looped.push(l);
        direct.push(d);
        overhead.push(l - d);
    }
    let overhead = Spread::of(&overhead);
    println!();
    println!(
        "agent loop, instant in-process model, 10 sequential calls per turn to the fast server:"
    );
    println!(
        "  per call through the loop {:.0} µs ({:.0}–{:.0}); direct round trip {:.0} µs ({:.0}–{:.0})",
        Spread::of(&looped).median,
        Spread::of(&looped).min,
        Spread::of(&looped).max,
        Spread::of(&direct).median,
        Spread::of(&direct).min,
        Spread::of(&direct).max
    );
    println!(
        "  host overhead per call    {:.0} µs ({:.0}–{:.0})  goal < 50 µs: {}",
        overhead.median,
        overhead.min,
        overhead.max,
        goal(overhead.median < 50.0)
    );

    // 4. Start-up.
    eprintln!("  start-up");
    let configs = [
        ("1 fast server", write_config("fast1", 1, 0, false)),
        ("10 fast servers", write_config("fast10", 10, 0, false)),
        ("50 fast servers", write_config("fast50", 50, 0, false)),
        (
            "10 server-everything",
            write_config("everything10", 0, 10, false),
        ),
    ];
    let mut startup = vec![Vec::new(); configs.len()];
    let nine = write_config("fast9", 9, 0, false);
    let nine_and_slow = write_config("fast9slow", 9, 0, true);
    let mut first_fast = Vec::new();
    let mut first_slow = Vec::new();
    for _ in 0..ROUNDS {
        for (i, (_, config)) in configs.iter().enumerate() {
            startup[i].push(servers_millis(config));
        }
        first_fast.push(first_request_millis(&nine));
        first_slow.push(first_request_millis(&nine_and_slow));
    }
    println!();
    println!("start-up: `tether servers --json` wall time");
    for (i, (label, _)) in configs.iter().enumerate() {
        println!(
            "  {:<22} {:<22} {} of one fast server's",
            label,
            Spread::of(&startup[i]).millis(),
            ratios(&startup[i], &startup[0]).ratio()
        );
    }
    let delay: Vec<f64> = first_slow
        .iter()
        .zip(&first_fast)
        .map(|(s, f)| s - f)
        .collect();
    let delay = Spread::of(&delay);
    println!("`tether run`: from start to the first model request");
    println!(
        "  9 fast servers                  {}",
        Spread::of(&first_fast).millis()
    );
    println!(
        "  9 fast + 1 server 3 s slow      {}",
        Spread::of(&first_slow).millis()
    );
    println!(
        "  what the slow server costs      {}  goal < 100 ms: {}",
        delay.millis(),
        goal(delay.median < 100.0)
    );

    // 5. Memory.
    eprintln!("  memory");
    let ten = write_config("fast10", 10, 0, false);
    let mut run = Vec::new();
    let mut chat = Vec::new();
    for _ in 0..ROUNDS {
        run.push(run_rss(&ten));
        chat.push(chat_rss(&ten));
    }
    println!();
    println!("peak RSS with 10 servers connected (the tether process alone)");
    let (run, chat) = (Spread::of(&run), Spread::of(&chat));
    println!(
        "  tether run   {:.1} MiB ({:.1}–{:.1})",
        run.median, run.min, run.max
    );
    println!(
        "  tether chat  {:.1} MiB ({:.1}–{:.1})",
        chat.median, chat.min, chat.max
    );
    println!();
    println!("load average {} at the end", load_average());
    let _ = std::fs::remove_dir_all(scratch());
}
