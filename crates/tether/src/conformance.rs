//! `tether conformance-client URL`: the client the official MCP conformance suite drives.
//! It goes through the same `ServerConnection` as every other command; only the host is
//! scripted (elicitation accepted with the schema's defaults, a fixed sampling answer) and
//! what it does after connecting follows `MCP_CONFORMANCE_SCENARIO`.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tether_mcp::auth::{self, HeadlessBrowser, TokenStore};
use tether_mcp::client::form_defaults;
use tether_mcp::config::OAuthSettings;
use tether_mcp::{
    ElicitationAnswer, ElicitationRequest, HostHandler, McpError, Root, ServerConfig,
    ServerConnection, ServerNotice,
};

use crate::Failure;

/// The host the suite talks to: it answers every server request without a person.
struct ScriptedHost;

impl HostHandler for ScriptedHost {
    fn roots(&self) -> Vec<Root> {
        Root::working_directory()
    }

    fn sample<'a>(
        &'a self,
        _server: &'a str,
        _params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async {
            Ok(json!({
                "role": "assistant",
                "content": {"type": "text", "text": "conformance sampling answer"},
                "model": "tether-conformance",
                "stopReason": "endTurn",
            }))
        })
    }

    fn elicit<'a>(
        &'a self,
        _server: &'a str,
        request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            match request {
                ElicitationRequest::Form { schema, .. } => {
                    ElicitationAnswer::Accept(form_defaults(&schema))
                }
                ElicitationRequest::Url { .. } => ElicitationAnswer::Accept(Map::new()),
            }
        })
    }

    fn notify(&self, server: &str, notice: ServerNotice) {
        tracing::info!(server, ?notice, "notification");
    }
}

/// Arguments for calling a tool the scenario did not describe.
fn arguments_for(schema: &Value) -> Map<String, Value> {
    let properties = schema.get("properties").and_then(Value::as_object);
    match properties {
        Some(p) if p.contains_key("a") && p.contains_key("b") => json!({"a": 2, "b": 3})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        _ => Map::new(),
    }
}

/// Runs the scenario named in the environment against the server at `url`.
pub async fn run(url: String) -> Result<(), Failure> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let mut config = ServerConfig::http("conformance", url);
    // The suite names the revision under test, as a user would pin it with "protocolVersion".
    config.protocol_version = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").ok();
    let text = |key: &str| context.get(key).and_then(Value::as_str).map(str::to_string);
    config.oauth = OAuthSettings {
        client_id: text("client_id"),
        client_secret: text("client_secret"),
        scopes: Vec::new(),
        client_metadata_url: Some(CLIENT_METADATA_URL.into()),
        ..OAuthSettings::default()
    };
    let host: Arc<dyn HostHandler> = Arc::new(ScriptedHost);
    // Each round either finishes or meets a 401/403 challenge; a sign-in answers it and the
    // scenario starts over. Servers that keep refusing stop us after three sign-ins.
    let mut authorization = None;
    let mut granted: Vec<String> = Vec::new();
    for round in 0..=MAX_SIGN_INS {
        let outcome =
            match ServerConnection::connect_authorized(&config, host.clone(), authorization.take())
                .await
            {
                Ok(connection) => {
                    let outcome = drive(&connection, &scenario, &context).await;
                    connection.close().await;
                    outcome
                }
                Err(error) => Err(error),
            };
        match outcome {
            Err(McpError::SignInRequired { challenge, .. }) if round < MAX_SIGN_INS => {
                let (signed_in, grant) = auth::sign_in(
                    &config,
                    challenge.as_deref(),
                    &granted,
                    TokenStore::Memory,
                    &HeadlessBrowser {
                        redirect_uri: "http://localhost:3000/callback".into(),
                    },
                )
                .await?;
                granted = grant.scopes;
                authorization = Some(signed_in);
            }
            other => return other.map_err(Failure::from),
        }
    }
    Err(Failure::partial(format!(
        "server \"conformance\" still refuses after {MAX_SIGN_INS} sign-ins"
    )))
}

/// Sign-ins per scenario before giving up (a server may keep asking for scopes).
const MAX_SIGN_INS: usize = 3;

/// The client ID metadata document the suite's authorization servers accept.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

async fn drive(
    connection: &ServerConnection,
    scenario: &str,
    context: &Value,
) -> Result<(), McpError> {
    let tools = connection.list_tools().await?;
    match scenario {
        "json-schema-ref-no-deref" => return Ok(()),
        "json-schema-2020-12-preservation" => {
            // Echo the schema of the other tool exactly as we parsed it.
            let observed = tools
                .iter()
                .find(|t| t.name != "json_schema_echo")
                .ok_or_else(|| {
                    McpError::InvalidArguments("the server offers no schema to echo".into())
                })?;
            let arguments = json!({"schema": observed.input_schema});
            connection
                .call_tool("json_schema_echo", arguments.as_object().cloned(), None)
                .await?;
            return Ok(());
        }
        "http-custom-headers" => {
            for call in context
                .get("toolCalls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let name = call.get("name").and_then(Value::as_str).unwrap_or_default();
                let arguments = call.get("arguments").and_then(Value::as_object).cloned();
                connection.call_tool(name, arguments, None).await?;
            }
            return Ok(());
        }
        _ => {}
    }
    for tool in &tools {
        connection
            .call_tool(&tool.name, Some(arguments_for(&tool.input_schema)), None)
            .await?;
    }
    if scenario == "http-standard-headers" {
        for resource in connection.list_resources().await? {
            connection.read_resource(&resource.uri).await?;
        }
        for prompt in connection.list_prompts().await? {
            connection.get_prompt(&prompt.name, Map::new()).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_taken_from_each_property() {
        let schema = json!({"properties": {
            "name": {"type": "string", "default": "Ada"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "default": ["x"]}
        }});
        assert_eq!(
            Value::Object(form_defaults(&schema)),
            json!({"name": "Ada", "tags": ["x"]})
        );
    }
}
