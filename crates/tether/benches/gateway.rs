//! Gateway benchmark, run with `cargo bench -p tether --bench gateway` (or scripts/bench.sh).
//!
//! The same upstream (the built-in server, `tether builtin-server`, tool `add`) five ways:
//! direct (Tether's client over stdio), through the floor of an HTTP-to-stdio proxy on this
//! machine (`floor.rs`: a hand-rolled HTTP/1.1 reader that swaps ids and passes lines, the
//! least any proxy does), through `tether serve --http --no-prefix`,
//! through the Rust `mcp-proxy` 0.6.0 (crates.io, on tower-mcp; built by
//! scripts/install-peers.sh) and through `mcp-proxy` 0.13.0 (PyPI, the common Python
//! stdio-to-HTTP proxy), over Streamable HTTP. At 1, 8, 32 and 64 concurrent clients (each its
//! own session, or stateless 2026-07-28 requests where both ends speak them; 2,000 calls per
//! cell after a warm-up) it prints
//! calls/s and p50/p99 latency per target, median and spread over interleaved rounds, the
//! gateway's overhead per call over direct, the CPU the gateway process itself spends per call
//! (schedstat over its threads: what the gateway costs, apart from the HTTP client driving it),
//! and its throughput against mcp-proxy's. Then the
//! gateway's peak RSS with 10 upstream servers. `TETHER_BENCH_QUICK=1` runs fewer rounds;
//! `TETHER_BENCH_ERA=2025-11-25` (or `2026-07-28`) pins the protocol era the client speaks to
//! the gateway (by default it negotiates, which gives 2026-07-28).

// Benchmarks and tests report to their runner: the binary's terminal sink is not theirs.
#![allow(clippy::disallowed_macros)]
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

mod floor;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use test_support::workspace_root;
use tether_mcp::{HeadlessHost, ServerConfig, ServerConnection};

fn tether() -> &'static str {
    env!("CARGO_BIN_EXE_tether")
}

/// A process serving the built-in tools over HTTP, killed on drop.
struct Endpoint {
    child: Child,
    url: String,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gateway(upstreams: usize) -> Endpoint {
    let mut command = Command::new(tether());
    command.args(["serve", "--http", "127.0.0.1:0", "--max-in-flight", "1024"]);
    // For trying the gateway's runtime with another number of worker threads.
    if let Ok(workers) = std::env::var("TETHER_BENCH_GATEWAY_WORKERS") {
        command.env("TOKIO_WORKER_THREADS", workers);
    }
    if upstreams == 1 {
        command.arg("--no-prefix");
    }
    for i in 0..upstreams {
        command
            .arg("--stdio")
            .arg(format!("b{i}={} builtin-server", tether()));
    }
    let (child, url) = test_support::spawn_http_gateway(&mut command);
    Endpoint { child, url }
}

fn mcp_proxy() -> Endpoint {
    let program = workspace_root().join("peers/.venv-proxy/bin/mcp-proxy");
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let child = Command::new(&program)
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--log-level",
            "WARNING",
            tether(),
            "builtin-server",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}; run scripts/bench.sh", program.display()));
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "mcp-proxy did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Endpoint {
        child,
        url: format!("http://127.0.0.1:{port}/mcp"),
    }
}

/// Latencies of `clients` concurrent clients making `calls` sequential calls each to `add`
/// (named `tool` by the target), and the wall time of the whole batch.
async fn load(
    connect: impl Fn() -> ServerConfig,
    tool: &'static str,
    shared: bool,
    clients: usize,
    calls: usize,
) -> (Vec<Duration>, Duration) {
    let host = Arc::new(HeadlessHost);
    let mut connections = Vec::new();
    for _ in 0..(if shared { 1 } else { clients }) {
        connections.push(Arc::new(
            ServerConnection::connect(&connect(), host.clone())
                .await
                .expect("connects"),
        ));
    }
    // Warm-up: every connection makes a few calls first.
    for connection in &connections {
        for i in 0..5 {
            connection
                .call_tool(tool, json!({"a": i, "b": 1}).as_object().cloned(), None)
                .await
                .unwrap();
        }
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let connection = connections[if shared { 0 } else { c }].clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(calls);
                for i in 0..calls {
                    let sent = Instant::now();
                    let result = connection
                        .call_tool(tool, json!({"a": i, "b": c}).as_object().cloned(), None)
                        .await
                        .unwrap();
                    latencies.push(sent.elapsed());
                    assert!(!result.is_error);
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let wall = started.elapsed();
    for connection in connections {
        if let Ok(connection) = Arc::try_unwrap(connection) {
            connection.close().await;
        }
    }
    (latencies, wall)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1e6
}

#[derive(Default)]
struct Samples {
    rate: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
}

impl Samples {
    fn add(&mut self, (mut latencies, wall): (Vec<Duration>, Duration)) {
        latencies.sort();
        self.rate.push(latencies.len() as f64 / wall.as_secs_f64());
        self.p50.push(percentile(&latencies, 0.50));
        self.p99.push(percentile(&latencies, 0.99));
    }
}

/// Median, min and max.
fn spread(values: &[f64]) -> (f64, f64, f64) {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    (
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1],
    )
}

/// CPU time the process has used, over all its threads (ns, from schedstat).
fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|text| text.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let quick = std::env::var_os("TETHER_BENCH_QUICK").is_some();
    let rounds = if quick { 3 } else { 5 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let gateway_one = gateway(1);
    let proxy = mcp_proxy();
    let rust_proxy = test_support::HttpServer::rust_mcp_proxy(
        std::path::Path::new(tether()),
        &["builtin-server"],
    );
    let direct = || ServerConfig::stdio("b", tether(), vec!["builtin-server".into()]);
    // Stateless 2026-07-28 requests (what the client negotiates) and 2025-11-25 sessions.
    let through_gateway = || {
        let mut config = ServerConfig::http("gateway", gateway_one.url.clone());
        config.protocol_version = std::env::var("TETHER_BENCH_ERA").ok();
        config
    };
    let through_gateway_sessions = || {
        let mut config = ServerConfig::http("gateway", gateway_one.url.clone());
        config.protocol_version = Some("2025-11-25".into());
        config
    };
    let through_proxy = || ServerConfig::http("proxy", proxy.url.clone());
    let floor_url = floor::start(tether(), &["builtin-server"]);
    let through_floor = || ServerConfig::http("floor", floor_url.clone());
    let through_rust_proxy = || ServerConfig::http("rust-proxy", rust_proxy.url.clone());
    println!(
        "gateway: tools/call add on the built-in server, {rounds} interleaved rounds, median (min–max)"
    );
    println!(
        "machine load before: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut overhead_p50 = (0.0, 0.0, 0.0);
    let gateway_pid = gateway_one.child.id();
    let mut floor_p50 = 0.0;
    let cells: &[(usize, usize)] = if quick {
        &[(1, 500), (8, 63), (32, 16), (64, 8)]
    } else {
        &[(1, 2000), (8, 250), (32, 63), (64, 32)]
    };
    for &(clients, calls) in cells {
        let (mut d, mut f, mut g, mut gs, mut r, mut p) = (
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
        );
        let (mut gateway_cpu, mut session_cpu) = (Vec::new(), Vec::new());
        // Connecting and warming up are in the window too, so this is an upper bound.
        let per_call = |before: u64| {
            (cpu_ns(gateway_pid) - before) as f64 / ((clients * (calls + 5)) as f64) / 1000.0
        };
        for _ in 0..rounds {
            runtime.block_on(async {
                d.add(load(direct, "add", true, clients, calls).await);
                f.add(load(through_floor, "add", false, clients, calls).await);
                let before = cpu_ns(gateway_pid);
                g.add(load(through_gateway, "add", false, clients, calls).await);
                gateway_cpu.push(per_call(before));
                let before = cpu_ns(gateway_pid);
                gs.add(load(through_gateway_sessions, "add", false, clients, calls).await);
                session_cpu.push(per_call(before));
                r.add(load(through_rust_proxy, "b/add", false, clients, calls).await);
                p.add(load(through_proxy, "add", false, clients, calls).await);
            });
        }
        println!("  {clients} client(s), {calls} calls each:");
        for (name, s) in [
            ("direct (stdio)", &d),
            ("floor (HTTP to stdio)", &f),
            ("tether serve", &g),
            ("tether serve, sessions", &gs),
            ("mcp-proxy 0.6.0 (Rust)", &r),
            ("mcp-proxy 0.13.0 (Py)", &p),
        ] {
            let (rate, rate_lo, rate_hi) = spread(&s.rate);
            let (p50, ..) = spread(&s.p50);
            let (p99, ..) = spread(&s.p99);
            println!(
                "    {name:<23} {rate:8.0} calls/s ({rate_lo:.0}–{rate_hi:.0})  p50 {p50:7.0} µs  p99 {p99:7.0} µs"
            );
        }
        let ratio = spread(&g.rate).0 / spread(&r.rate).0;
        let session_ratio = spread(&gs.rate).0 / spread(&r.rate).0;
        let py_ratio = spread(&g.rate).0 / spread(&p.rate).0;
        println!(
            "    tether serve throughput: {ratio:.2}x the Rust mcp-proxy's, {session_ratio:.2}x with sessions (goal ≥ 1.5x at 8 and 32), {py_ratio:.2}x the Python one's"
        );
        let (cpu, cpu_lo, cpu_hi) = spread(&gateway_cpu);
        let (scpu, scpu_lo, scpu_hi) = spread(&session_cpu);
        println!(
            "    gateway CPU per call (its own threads, not the client's or upstream's): {cpu:.0} µs ({cpu_lo:.0}–{cpu_hi:.0}); with sessions {scpu:.0} µs ({scpu_lo:.0}–{scpu_hi:.0})"
        );
        if clients == 1 {
            floor_p50 = spread(&f.p50).0 - spread(&d.p50).0;
            overhead_p50 = (
                spread(&g.p50).0 - spread(&d.p50).0,
                spread(&r.p50).0 - spread(&d.p50).0,
                spread(&gs.p50).0 - spread(&d.p50).0,
            );
        }
    }
    println!(
        "added latency over direct at 1 client, p50 per call (HTTP and the proxy together): tether serve {:.0} µs ({:.0} µs with sessions), Rust mcp-proxy {:.0} µs (goals: at most the Rust proxy's, and under 100 µs)",
        overhead_p50.0, overhead_p50.2, overhead_p50.1
    );
    println!(
        "the floor (one HTTP request in and out on loopback, one line to the child and back) adds {floor_p50:.0} µs over direct: tether serve is {:.0} µs above it",
        overhead_p50.0 - floor_p50
    );
    drop(gateway_one);
    drop(proxy);
    drop(rust_proxy);

    // Peak memory with 10 upstream servers, after every one has answered calls.
    let ten = gateway(10);
    runtime.block_on(async {
        let connection = ServerConnection::connect(
            &ServerConfig::http("gateway", ten.url.clone()),
            Arc::new(HeadlessHost),
        )
        .await
        .unwrap();
        for i in 0..10 {
            for n in 0..20 {
                connection
                    .call_tool(
                        &format!("b{i}__add"),
                        json!({"a": n, "b": 1}).as_object().cloned(),
                        None,
                    )
                    .await
                    .unwrap();
            }
        }
        connection.close().await;
    });
    let rss = test_support::peak_rss_kib(ten.child.id()).unwrap_or(0);
    println!(
        "gateway peak RSS with 10 upstream servers: {:.1} MiB (the gateway process alone)",
        rss as f64 / 1024.0
    );
    println!(
        "machine load after: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}
