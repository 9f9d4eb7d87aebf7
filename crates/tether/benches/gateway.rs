//! Gateway benchmark, run with `cargo bench -p tether --bench gateway` (or scripts/bench.sh).
//!
//! The same upstream (the built-in server, `tether builtin-server`, tool `add`) five ways:
//! direct (over its pipes), through the floor of an HTTP-to-stdio proxy on this
//! machine (`floor.rs`: a hand-rolled HTTP/1.1 reader that swaps ids and passes lines, the
//! least any proxy does), through `tether serve --http --no-prefix` (2026-07-28 stateless
//! requests, and 2025-11-25 sessions), through the Rust `mcp-proxy` 0.6.0 (crates.io, on
//! tower-mcp; built by scripts/install-peers.sh) and through `mcp-proxy` 0.13.0 (PyPI, the
//! common Python stdio-to-HTTP proxy), over Streamable HTTP. The clients are
//! `raw_client.rs`'s: one keep-alive connection each, so the proxies, not a client, are
//! measured. At 1, 8, 32 and 64 concurrent clients (2,000 calls per cell after a warm-up) it
//! prints calls/s and p50/p99 latency per target, median and spread over interleaved rounds,
//! the overhead per call over direct, the CPU the gateway process itself spends per call
//! (schedstat over its threads: what the gateway costs, apart from the clients driving it)
//! beside the floor's and the Rust proxy's, and its throughput against mcp-proxy's. Then the
//! gateway's peak RSS with 10 upstream servers. `TETHER_BENCH_QUICK=1` runs fewer rounds;
//! `TETHER_BENCH_CLIENTS=1,8` only those cells.

// Benchmarks and tests report to their runner: the binary's terminal sink is not theirs.
#![allow(clippy::disallowed_macros)]
#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)]

mod floor;
mod raw_client;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use test_support::workspace_root;
use tether_mcp::{HeadlessHost, ServerConfig, ServerConnection};

use raw_client::{Era, HttpClient};

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

/// Where a benchmark's clients send their calls.
#[derive(Clone, Copy)]
enum Target<'a> {
    /// Straight to a fresh `tether builtin-server` child over its pipes, all clients sharing it.
    Direct,
    /// A Streamable HTTP endpoint, each client on its own keep-alive connection.
    Http(&'a str, Era),
}

/// Latencies of `clients` concurrent clients making `calls` sequential calls each to `add`
/// (named `tool` by the target), and the wall time of the whole batch.
async fn load(
    target: Target<'_>,
    tool: &'static str,
    clients: usize,
    calls: usize,
) -> (Vec<Duration>, Duration) {
    // Connecting and five warm-up calls per client happen before the clock starts.
    match target {
        Target::Direct => {
            let direct = Arc::new(raw_client::Direct::start(tether(), &["builtin-server"]).await);
            for i in 0..5 {
                direct.call(tool, i, 1).await;
            }
            let started = Instant::now();
            let tasks = (0..clients)
                .map(|c| {
                    let direct = direct.clone();
                    tokio::spawn(async move {
                        let mut latencies = Vec::with_capacity(calls);
                        for i in 0..calls {
                            let sent = Instant::now();
                            direct.call(tool, i as u64, c as u64).await;
                            latencies.push(sent.elapsed());
                        }
                        latencies
                    })
                })
                .collect();
            gather(tasks, started).await
        }
        Target::Http(url, era) => {
            let mut connected = Vec::new();
            for _ in 0..clients {
                let mut client = HttpClient::connect(url, era).await;
                for i in 0..5 {
                    client.call(i + 1, tool, i, 1).await;
                }
                connected.push(client);
            }
            let started = Instant::now();
            let tasks = connected
                .into_iter()
                .enumerate()
                .map(|(c, mut client)| {
                    tokio::spawn(async move {
                        let mut latencies = Vec::with_capacity(calls);
                        for i in 0..calls {
                            let sent = Instant::now();
                            client.call(i as u64 + 10, tool, i as u64, c as u64).await;
                            latencies.push(sent.elapsed());
                        }
                        latencies
                    })
                })
                .collect();
            gather(tasks, started).await
        }
    }
}

/// Every client's latencies, and the wall time since `started`.
async fn gather(
    tasks: Vec<tokio::task::JoinHandle<Vec<Duration>>>,
    started: Instant,
) -> (Vec<Duration>, Duration) {
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    (latencies, started.elapsed())
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

/// Set in the floor's own process: the bench binary run again to serve the floor alone.
const FLOOR_PROCESS: &str = "TETHER_BENCH_FLOOR_PROCESS";

/// The floor in a process of its own, as every proxy measured here runs: in the benchmark's
/// process it would share an address space with the clients, and switching between threads of
/// one process costs less than between processes (its CPU per call measured a quarter lower).
fn floor_process() -> Endpoint {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--bench")
        .env(FLOOR_PROCESS, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut url,
    )
    .unwrap();
    assert!(
        url.starts_with("http://"),
        "the floor did not start: {url:?}"
    );
    Endpoint {
        child,
        url: url.trim().to_string(),
    }
}

/// The floor's process: serves until the benchmark closes its stdin (or kills it).
fn serve_floor() {
    println!("{}", floor::start(tether(), &["builtin-server"]));
    let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if std::env::var_os(FLOOR_PROCESS).is_some() {
        serve_floor();
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
    let floor = floor_process();
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
    let rust_pid = rust_proxy.pid();
    let floor_pid = floor.child.id();
    let mut floor_p50 = 0.0;
    let cells: &[(usize, usize)] = if quick {
        &[(1, 500), (8, 63), (32, 16), (64, 8)]
    } else {
        &[(1, 2000), (8, 250), (32, 63), (64, 32)]
    };
    // `TETHER_BENCH_CLIENTS=1,8` runs those cells only (while trying a change).
    let only: Option<Vec<usize>> = std::env::var("TETHER_BENCH_CLIENTS").ok().map(|list| {
        list.split(',')
            .filter_map(|n| n.trim().parse().ok())
            .collect()
    });
    for &(clients, calls) in cells {
        if only.as_ref().is_some_and(|only| !only.contains(&clients)) {
            continue;
        }
        let (mut d, mut f, mut g, mut gs, mut r, mut p) = (
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
        );
        let (mut gateway_cpu, mut session_cpu, mut floor_cpu, mut rust_cpu) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Connecting and warming up are in the window too, so this is an upper bound.
        let per_call = |used: u64| used as f64 / ((clients * (calls + 5)) as f64) / 1000.0;
        for _ in 0..rounds {
            runtime.block_on(async {
                d.add(load(Target::Direct, "add", clients, calls).await);
                let before = cpu_ns(floor_pid);
                f.add(
                    load(
                        Target::Http(&floor.url, Era::Sessions),
                        "add",
                        clients,
                        calls,
                    )
                    .await,
                );
                floor_cpu.push(per_call(cpu_ns(floor_pid) - before));
                let before = cpu_ns(gateway_pid);
                let stateless = Target::Http(&gateway_one.url, Era::Stateless);
                g.add(load(stateless, "add", clients, calls).await);
                gateway_cpu.push(per_call(cpu_ns(gateway_pid) - before));
                let before = cpu_ns(gateway_pid);
                let sessions = Target::Http(&gateway_one.url, Era::Sessions);
                gs.add(load(sessions, "add", clients, calls).await);
                session_cpu.push(per_call(cpu_ns(gateway_pid) - before));
                let before = cpu_ns(rust_pid);
                let rust = Target::Http(&rust_proxy.url, Era::Sessions);
                r.add(load(rust, "b/add", clients, calls).await);
                rust_cpu.push(per_call(cpu_ns(rust_pid) - before));
                let python = Target::Http(&proxy.url, Era::Sessions);
                p.add(load(python, "add", clients, calls).await);
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
            "    gateway CPU per call (its own threads, not the client's or upstream's): {cpu:.0} µs ({cpu_lo:.0}–{cpu_hi:.0}); with sessions {scpu:.0} µs ({scpu_lo:.0}–{scpu_hi:.0}); the floor {:.0} µs; the Rust mcp-proxy {:.0} µs",
            spread(&floor_cpu).0,
            spread(&rust_cpu).0
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
