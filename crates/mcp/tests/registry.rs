//! The MCP layer as a library: a registry of real servers started together, the tool router
//! over them, config tool filters, and calls routed by qualified name.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use test_support::{everything_stdio, misbehaving_stdio, time_stdio};
use tether_mcp::config::adhoc_stdio;
use tether_mcp::{ErrorClass, ServerConfig, ServerRegistry, ServerState};

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
        .map(|e| match e.state {
            ServerState::Connected(_) => "connected",
            ServerState::Failed(_) => "failed",
            ServerState::Disabled => "disabled",
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
