//! Streamable HTTP against the official TypeScript SDK's server: what the server sends on the
//! standalone GET stream reaches us.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use test_support::HttpServer;
use tether_mcp::client::form_defaults;
use tether_mcp::{
    ElicitationAnswer, ElicitationRequest, HostHandler, Root, ServerConfig, ServerConnection,
    ServerNotice,
};

/// Accepts every form with its defaults, as a person pressing Enter would.
struct AcceptDefaults;

impl HostHandler for AcceptDefaults {
    fn roots(&self) -> Vec<Root> {
        Vec::new()
    }
    fn sample<'a>(&'a self, _: &'a str, _: Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async { Err("no sampling here".to_string()) })
    }
    fn elicit<'a>(
        &'a self,
        _: &'a str,
        request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            let ElicitationRequest::Form { schema, .. } = request else {
                return ElicitationAnswer::Decline;
            };
            ElicitationAnswer::Accept(form_defaults(&schema))
        })
    }
    fn notify(&self, _: &str, _: ServerNotice) {}
}

/// The SDK drops a server request meant for the GET stream while none is open (the
/// conformance suite's elicitation scenario sends its form that way). The server here answers
/// the GET half a second late; a connection handed out before that calls the tool at once and
/// its form is lost (the call reports "elicitation failed" after 5 s).
#[tokio::test]
async fn a_form_sent_on_the_get_stream_right_after_connecting_is_answered() {
    let server = HttpServer::late_get_stream(500);
    let config = ServerConfig::http("late", server.url.clone());
    let connection = ServerConnection::connect(&config, Arc::new(AcceptDefaults))
        .await
        .expect("connects");
    let result = connection
        .call_tool("ask_name", Some(Map::new()), None)
        .await
        .expect("the call returns");
    let text = serde_json::to_string(&result).unwrap();
    assert!(
        text.contains(r#"answer: {\"action\":\"accept\",\"content\":{\"name\":\"Ada\"}}"#),
        "{text}"
    );
    connection.close().await;
}
