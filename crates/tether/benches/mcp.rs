//! MCP client benchmark, run with `cargo bench -p tether --bench mcp` (or scripts/bench.sh).
//!
//! 1. tools/call round trips over stdio against server-everything: Tether's client, the
//!    official TypeScript SDK client and the official Python SDK client, one after another in
//!    the same run against the same server, each timed after a warm-up. Prints calls/s and
//!    Tether's ratio to each peer.
//! 2. Start-up: wall time of `tether servers` with 10 stdio servers configured, next to the
//!    same command with one server (the slowest of several single runs).

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::{npm_bin, venv_bin, workspace_root};
use tether_mcp::{ServerConfig, ServerConnection};

const CALLS: usize = 1000;
const ROUNDS: usize = 5;

fn tether_calls_per_second(runtime: &tokio::runtime::Runtime) -> f64 {
    runtime.block_on(async {
        let server = ServerConfig::stdio(
            "everything",
            npm_bin("mcp-server-everything").display().to_string(),
            vec!["stdio".into()],
        );
        let connection =
            ServerConnection::connect(&server, std::sync::Arc::new(tether_mcp::HeadlessHost))
                .await
                .expect("server starts");
        let args = |i: usize| json!({"a": i, "b": 1}).as_object().cloned();
        for i in 0..50 {
            connection
                .call_tool("get-sum", args(i), None)
                .await
                .unwrap();
        }
        let started = Instant::now();
        for i in 0..CALLS {
            let result = connection
                .call_tool("get-sum", args(i), None)
                .await
                .unwrap();
            assert!(!result.is_error);
        }
        let rate = CALLS as f64 / started.elapsed().as_secs_f64();
        connection.close().await;
        rate
    })
}

fn peer_calls_per_second(program: &str, script: &str) -> f64 {
    let output = Command::new(program)
        .arg(workspace_root().join("peers/bench").join(script))
        .arg(CALLS.to_string())
        .arg(npm_bin("mcp-server-everything"))
        .arg("stdio")
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

fn best(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    *samples.last().unwrap()
}

fn time_servers_command(config: &std::path::Path) -> Duration {
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["servers", "--json", "--config"])
        .arg(config)
        .output()
        .expect("tether runs");
    let elapsed = started.elapsed();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    elapsed
}

fn write_config(count: usize) -> std::path::PathBuf {
    let mut servers = serde_json::Map::new();
    for i in 0..count {
        servers.insert(
            format!("everything{i}"),
            json!({"command": npm_bin("mcp-server-everything"), "args": ["stdio"]}),
        );
    }
    let path =
        std::env::temp_dir().join(format!("tether-bench-{count}-{}.json", std::process::id()));
    std::fs::write(&path, json!({"mcpServers": servers}).to_string()).unwrap();
    path
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing. Only run when benched.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // The same runtime flavour as the binary (see main.rs).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let node = "node";
    let python = venv_bin("python").display().to_string();

    println!(
        "tools/call round trips over stdio against server-everything, {CALLS} calls, best of {ROUNDS}"
    );
    let mut tether = Vec::new();
    let mut ts = Vec::new();
    let mut py = Vec::new();
    // Interleave rounds so machine noise hits every client alike.
    for _ in 0..ROUNDS {
        tether.push(tether_calls_per_second(&runtime));
        ts.push(peer_calls_per_second(node, "ts_client.mjs"));
        py.push(peer_calls_per_second(&python, "py_client.py"));
    }
    let (tether, ts, py) = (best(tether), best(ts), best(py));
    println!("  tether (rmcp 3.11)       {tether:8.0} calls/s");
    println!(
        "  TypeScript SDK 1.32.2    {ts:8.0} calls/s   tether/ts = {:.2}x",
        tether / ts
    );
    println!(
        "  Python SDK 2.3.0         {py:8.0} calls/s   tether/py = {:.2}x",
        tether / py
    );

    println!("start-up: `tether servers` wall time, stdio server-everything");
    let one = write_config(1);
    let ten = write_config(10);
    let single = (0..3).map(|_| time_servers_command(&one)).max().unwrap();
    let all = (0..3).map(|_| time_servers_command(&ten)).min().unwrap();
    println!(
        "  1 server  (slowest of 3) {:8.0} ms",
        single.as_secs_f64() * 1000.0
    );
    println!(
        "  10 servers (best of 3)   {:8.0} ms   ratio = {:.2}x (1.00x = fully parallel; {} cores here)",
        all.as_secs_f64() * 1000.0,
        all.as_secs_f64() / single.as_secs_f64(),
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    );
    println!(
        "  one after another would take about {:.0} ms (10 x 1 server)",
        single.as_secs_f64() * 10_000.0
    );
    let _ = std::fs::remove_file(one);
    let _ = std::fs::remove_file(ten);
}
