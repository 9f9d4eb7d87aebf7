//! The MCP layer as a library: a registry of real servers started together, the tool router
//! over them, config tool filters, and calls routed by qualified name.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use test_support::{everything_stdio, misbehaving_stdio, scratch_dir, time_stdio};
use tether_mcp::config::adhoc_stdio;
use tether_mcp::{
    ElicitationAnswer, ElicitationRequest, ErrorClass, HostHandler, Root, ServerConfig,
    ServerNotice, ServerRegistry, ServerState,
};
use tokio::sync::mpsc;

#[tokio::test]
async fn registry_starts_all_servers_and_isolates_the_broken_one() {
    let mut servers: Vec<ServerConfig> = Vec::new();
    for line in [everything_stdio(), time_stdio(), misbehaving_stdio("exit")] {
        let names: Vec<String> = servers.iter().map(|s| s.name.clone()).collect();
        servers.push(adhoc_stdio(&line, &names).unwrap());
    }
    servers[0].disabled_tools = vec!["get-env".into()];
    let registry =
        ServerRegistry::start(servers, std::sync::Arc::new(tether_mcp::HeadlessHost)).await;

    let states: Vec<&str> = registry
        .entries()
        .iter()
        .map(|e| match e.state() {
            ServerState::Connected(_) => "connected",
            ServerState::Failed(_) => "failed",
            ServerState::Disabled => "disabled",
            ServerState::Starting => "starting",
        })
        .collect();
    assert_eq!(states, ["connected", "connected", "failed"]);
    let failure = registry.failures().next().unwrap();
    assert_eq!(failure.class(), ErrorClass::Unreachable);

    let (router, errors) = registry.tool_router().await;
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        router.resolve("everything__get-env").is_none(),
        "disabledTools filters it out"
    );
    let sum = router.resolve("everything__get-sum").expect("routed");
    assert_eq!(
        (sum.server.as_str(), sum.tool.name.as_str()),
        ("everything", "get-sum")
    );
    let time = router.resolve("time__get_current_time").expect("routed");

    // Calls routed by qualified name run concurrently on two servers.
    let everything = registry.connection(&sum.server).unwrap();
    let time_server = registry.connection(&time.server).unwrap();
    let args = |v: serde_json::Value| v.as_object().cloned();
    let (a, b) = tokio::join!(
        everything.call_tool("get-sum", args(serde_json::json!({"a": 1, "b": 2})), None),
        time_server.call_tool(
            "get_current_time",
            args(serde_json::json!({"timezone": "UTC"})),
            None
        ),
    );
    let a = a.unwrap();
    assert!(
        matches!(&a.content[0], tether_protocol::ContentBlock::Text { text } if text.contains("is 3"))
    );
    assert_eq!(b.unwrap().structured_content.unwrap()["timezone"], "UTC");
    assert!(
        everything.summary().instructions.is_some(),
        "server-everything sends instructions"
    );

    registry.shutdown().await;
}

#[tokio::test]
async fn tool_error_is_a_result_not_an_error() {
    let server = adhoc_stdio(&misbehaving_stdio("tool-error"), &[]).unwrap();
    let registry =
        ServerRegistry::start([server], std::sync::Arc::new(tether_mcp::HeadlessHost)).await;
    let connection = registry.connection("misbehaving_server").unwrap();
    let result = connection.call_tool("boom", None, None).await.unwrap();
    assert!(result.is_error);
    registry.shutdown().await;
}

/// A host that passes every notice to the test.
struct NoticeTap(mpsc::UnboundedSender<(String, ServerNotice)>);

impl HostHandler for NoticeTap {
    fn roots(&self) -> Vec<Root> {
        Vec::new()
    }
    fn sample<'a>(&'a self, _: &'a str, _: Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async { Err("no sampling here".to_string()) })
    }
    fn elicit<'a>(&'a self, _: &'a str, _: ElicitationRequest) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async { ElicitationAnswer::Decline })
    }
    fn notify(&self, server: &str, notice: ServerNotice) {
        let _ = self.0.send((server.to_string(), notice));
    }
}

/// A server that writes its shell's pid to `pid` and waits on the FIFO `gate` before it
/// becomes the time server: it starts exactly when the test writes a line to the gate.
fn gated_time_server(
    dir: &std::path::Path,
) -> (ServerConfig, std::path::PathBuf, std::path::PathBuf) {
    let gate = dir.join("gate");
    let pid = dir.join("pid");
    let _ = std::fs::remove_file(&gate);
    let status = std::process::Command::new("mkfifo")
        .arg(&gate)
        .status()
        .unwrap();
    assert!(status.success());
    let script = format!(
        "echo $$ > '{}'; read line < '{}'; exec {}",
        pid.display(),
        gate.display(),
        time_stdio()
    );
    let mut config = ServerConfig::stdio("gated", "sh", vec!["-c".into(), script]);
    config.startup_timeout = Duration::from_secs(120);
    (config, gate, pid)
}

#[tokio::test]
async fn a_slow_server_joins_after_the_others_are_ready() {
    let dir = scratch_dir("registry", "joins_later");
    let (gated, gate, _) = gated_time_server(&dir);
    let fast = adhoc_stdio(&misbehaving_stdio("tool-error"), &[]).unwrap();
    let (tx, mut notices) = mpsc::unbounded_channel();
    let registry = ServerRegistry::start_settling([fast, gated], Arc::new(NoticeTap(tx))).await;

    // The fast server is ready; the gated one cannot be, since nothing has opened its gate.
    assert!(registry.connection("misbehaving_server").is_ok());
    assert!(matches!(
        registry.entries()[1].state(),
        ServerState::Starting
    ));
    assert!(registry.starting());
    let error = registry.connection("gated").unwrap_err().to_string();
    assert!(error.contains("\"gated\" is still starting"), "{error}");
    assert!(registry.take_joined().is_empty());

    std::fs::write(&gate, "go\n").unwrap();
    let (server, notice) = loop {
        let (server, notice) = tokio::time::timeout(Duration::from_secs(60), notices.recv())
            .await
            .expect("the gated server joins once its gate opens")
            .unwrap();
        if matches!(notice, ServerNotice::JoinedLate { .. }) {
            break (server, notice);
        }
    };
    assert_eq!(server, "gated");
    assert!(
        matches!(notice, ServerNotice::JoinedLate { error: None, .. }),
        "{notice:?}"
    );
    assert!(!registry.starting());
    assert_eq!(
        registry.take_joined(),
        ["gated"],
        "named once for the catalogue"
    );
    assert!(registry.take_joined().is_empty());
    let tools = registry
        .connection("gated")
        .unwrap()
        .list_tools()
        .await
        .unwrap();
    assert!(tools.iter().any(|t| t.name == "get_current_time"));
    registry.shutdown().await;
}

#[tokio::test]
async fn waiting_for_a_starting_server_ends_at_the_limit_or_when_it_joins() {
    let dir = scratch_dir("registry", "wait_started");
    let (gated, gate, _) = gated_time_server(&dir);
    let fast = adhoc_stdio(&misbehaving_stdio("tool-error"), &[]).unwrap();
    let registry =
        ServerRegistry::start_settling([fast, gated], Arc::new(tether_mcp::HeadlessHost)).await;
    assert_eq!(registry.starting_names(), ["gated"]);
    let names = vec!["gated".to_string()];
    // The gate is shut: the wait ends at its limit, the server still starting.
    registry
        .wait_started(&names, Duration::from_millis(50))
        .await;
    assert_eq!(registry.starting_names(), ["gated"]);
    // A server not starting is not waited for at all.
    tokio::time::timeout(
        Duration::from_secs(30),
        registry.wait_started(
            &["misbehaving_server".to_string()],
            Duration::from_secs(600),
        ),
    )
    .await
    .expect("nothing to wait for");
    // Opened while the wait is under way: the wait ends when the server has joined, well
    // before its limit.
    let opener = std::thread::spawn(move || std::fs::write(&gate, "go\n").unwrap());
    tokio::time::timeout(
        Duration::from_secs(60),
        registry.wait_started(&names, Duration::from_secs(600)),
    )
    .await
    .expect("the wait ends when the server joins");
    opener.join().unwrap();
    assert!(registry.starting_names().is_empty());
    assert!(registry.connection("gated").is_ok());
    registry.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_a_server_still_starting() {
    let dir = scratch_dir("registry", "stops_pending");
    let (gated, _gate, pid_file) = gated_time_server(&dir);
    let fast = adhoc_stdio(&misbehaving_stdio("tool-error"), &[]).unwrap();
    let registry =
        ServerRegistry::start_settling([fast, gated], Arc::new(tether_mcp::HeadlessHost)).await;
    assert!(registry.starting());
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(30), registry.shutdown())
        .await
        .expect("shutdown does not wait for a start that never ends");
    // Killed with its process group; gone once reaped (a zombie counts as stopped).
    test_support::wait_until_stopped(pid, "the gated server's shell");
}

/// Shutting down closes a stdio server's input before any signal, as the spec's stdio
/// shutdown says, so a server that exits on end of input does so by itself: this one ignores
/// SIGTERM and notes when its input ended; without that end it would only be killed.
#[tokio::test]
async fn shutdown_ends_a_servers_input_before_signalling_it() {
    let dir = scratch_dir("registry", "ends_input");
    let marker = dir.join("input ended");
    let script = format!(
        "trap '' TERM; {}; echo ended > '{}'",
        misbehaving_stdio("tool-error"),
        marker.display()
    );
    let config = ServerConfig::stdio("eof", "sh", vec!["-c".into(), script]);
    let registry = ServerRegistry::start([config], Arc::new(tether_mcp::HeadlessHost)).await;
    assert!(registry.connection("eof").is_ok());
    registry.shutdown().await;
    assert_eq!(
        std::fs::read_to_string(&marker).ok().as_deref(),
        Some("ended\n"),
        "the server never read the end of its input"
    );
}

/// A task-only tool (server-everything's `simulate-research-query`) runs as a task whose
/// steps arrive as progress; a caller that gives up cancels the task on the server.
#[tokio::test]
async fn a_task_tool_reports_its_steps_and_is_cancelled_when_dropped() {
    let servers = vec![adhoc_stdio(&everything_stdio(), &[]).unwrap()];
    let registry = ServerRegistry::start(servers, Arc::new(tether_mcp::HeadlessHost)).await;
    let everything = registry.connection("everything").unwrap();
    let tools = everything.list_tools().await.unwrap();
    let research = tools
        .iter()
        .find(|t| t.name == "simulate-research-query")
        .unwrap();
    assert!(research.requires_task(), "{:?}", research.execution);

    // To the end: every step in order, then the report.
    let (sender, mut steps) = mpsc::unbounded_channel();
    let arguments = serde_json::json!({"topic": "rust"}).as_object().cloned();
    let result = everything
        .call_tool("simulate-research-query", arguments.clone(), Some(sender))
        .await
        .unwrap();
    assert!(!result.is_error);
    assert!(
        serde_json::to_string(&result)
            .unwrap()
            .contains("Research Report: rust")
    );
    let steps: Vec<tether_mcp::Progress> = std::iter::from_fn(|| steps.try_recv().ok()).collect();
    let messages: Vec<&str> = steps.iter().filter_map(|p| p.message.as_deref()).collect();
    assert!(
        // Four one-second stages, polled every second: at least one is seen.
        messages.iter().any(|m| m.ends_with("...")) && messages.last() == Some(&"task completed"),
        "{messages:?}"
    );
    let id = &steps[0].task.as_ref().unwrap().task_id;
    assert!(
        steps
            .iter()
            .all(|p| &p.task.as_ref().unwrap().task_id == id)
    );

    // Given up after the first step: the server hears tasks/cancel.
    let (sender, mut steps) = mpsc::unbounded_channel();
    let call = everything.call_tool("simulate-research-query", arguments, Some(sender));
    let first = tokio::select! {
        step = steps.recv() => step.unwrap(),
        _ = call => panic!("the task finished before its first step was seen"),
    };
    let id = first.task.unwrap().task_id;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let tasks = everything.list_tasks().await.unwrap();
        let status = tasks
            .iter()
            .find(|t| t["taskId"] == id.as_str())
            .map(|t| t["status"].clone());
        if status == Some(Value::from("cancelled")) {
            break;
        }
        assert!(
            status != Some(Value::from("completed")),
            "the dropped task ran to completion"
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "task {id} never cancelled: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    registry.shutdown().await;
}

#[tokio::test]
async fn a_modern_servers_tool_list_change_reaches_the_connection() {
    // A 2026-07-28 server announces list changes only on a subscriptions/listen stream, which
    // the connection keeps open; without it the change is never heard.
    let server = test_support::HttpServer::modern();
    let config = tether_mcp::config::adhoc_url(&format!("modern={}", server.url), &[]).unwrap();
    let connection =
        tether_mcp::ServerConnection::connect(&config, Arc::new(tether_mcp::HeadlessHost))
            .await
            .unwrap();
    let mut changes = connection.tool_changes();
    let names = || async {
        let tools = connection.list_tools().await.unwrap();
        tools.into_iter().map(|t| t.name).collect::<Vec<String>>()
    };
    let before = names().await;
    assert!(!before.contains(&"grown".to_string()), "{before:?}");
    connection.call_tool("grow", None, None).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), changes.changed())
        .await
        .expect("tools/list_changed within 10 s")
        .unwrap();
    assert!(connection.tools_changed());
    let after = names().await;
    assert!(after.contains(&"grown".to_string()), "{after:?}");
    connection.close().await;
}

/// A loopback relay in front of `upstream` (`host:port`) that counts the TCP connections
/// clients open through it; returns its address and the count.
async fn counting_relay(upstream: String) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (address, accepted)
}

#[tokio::test]
async fn sequential_calls_over_http_reuse_one_connection_after_sse_answers() {
    // server-everything (the TypeScript SDK) answers each POST with an SSE stream that it
    // closes after the answer: the client reads it to the end and reuses the connection
    // instead of opening one per request.
    let server = test_support::HttpServer::everything();
    let upstream = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    let (relay, accepted) = counting_relay(upstream).await;
    let config =
        tether_mcp::config::adhoc_url(&format!("everything=http://{relay}/mcp"), &[]).unwrap();
    let connection =
        tether_mcp::ServerConnection::connect(&config, Arc::new(tether_mcp::HeadlessHost))
            .await
            .unwrap();
    let before = accepted.load(std::sync::atomic::Ordering::SeqCst);
    for i in 0..20 {
        let arguments = serde_json::json!({"message": format!("hi {i}")});
        let result = connection
            .call_tool("echo", arguments.as_object().cloned(), None)
            .await
            .unwrap();
        assert!(!result.is_error, "{result:?}");
    }
    let opened = accepted.load(std::sync::atomic::Ordering::SeqCst) - before;
    // One pooled connection serves the calls; a second may open while the first still
    // finishes reading an answer's stream.
    assert!(opened <= 2, "{opened} connections for 20 sequential calls");
    connection.close().await;
}
