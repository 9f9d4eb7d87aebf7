//! Multi-round-trip requests (MCP 2026-07-28, SEP-2322) as they pass through Tether. A modern
//! server that needs the client's input (an elicitation, a sampling, the roots) answers
//! `tools/call`, `prompts/get` or `resources/read` with an input-required result; the client
//! asks its user or model and sends the same request again with the answers and the opaque state.
//!
//! When Tether is the client (`tether run`, the tester), rmcp drives the rounds through our
//! `HostHandler`. When it serves another client (`tether serve`), the rounds belong to that
//! client: the gateway relays the upstream's questions and the client's answers verbatim, and
//! sends the client's own capabilities upstream, so the upstream asks only what the client can
//! answer and the gateway keeps no state between rounds (any replica can take the retry).

use serde_json::Value;

/// What a retried request carries: the answers to an earlier input-required result's
/// questions, and the state that result carried, both exactly as the client sent them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InputRound {
    /// `inputResponses`: each question's key to its answer.
    pub responses: Option<Value>,
    /// `requestState`, opaque to everyone but the server that issued it.
    pub state: Option<String>,
}

impl InputRound {
    /// The client's answer to the question asked under `key`, if this round carries one.
    pub fn answer(&self, key: &str) -> Option<&Value> {
        self.responses.as_ref()?.get(key)
    }

    /// This round as it goes upstream when the gateway asked `key` itself and marked the
    /// state with `mark`: that answer and that mark taken off, the rest untouched.
    pub fn without(&self, key: &str, mark: &str) -> InputRound {
        let responses = self.responses.clone().map(|mut responses| {
            if let Value::Object(map) = &mut responses {
                map.remove(key);
            }
            responses
        });
        let responses = responses.filter(|r| r.as_object().is_none_or(|m| !m.is_empty()));
        let state = match self.state.as_deref().map(|s| s.strip_prefix(mark)) {
            Some(Some("")) => None,
            Some(Some(rest)) => Some(rest.to_string()),
            _ => self.state.clone(),
        };
        InputRound { responses, state }
    }

    /// Whether the state carries `mark` (set by [`InputRequired::marked`]).
    pub fn is_marked(&self, mark: &str) -> bool {
        self.state.as_deref().is_some_and(|s| s.starts_with(mark))
    }
}

/// An input-required result: the request cannot complete until the client answers these.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequired {
    /// The result as the server sent it (`resultType`, `inputRequests`, `requestState`).
    pub result: Value,
}

impl InputRequired {
    /// Asks one form (`elicitation/create`) under `key`.
    pub fn form(key: &str, message: &str, schema: Value) -> InputRequired {
        let request = serde_json::json!({"method": "elicitation/create", "params": {
            "mode": "form", "message": message, "requestedSchema": schema}});
        let mut requests = serde_json::Map::new();
        requests.insert(key.to_string(), request);
        InputRequired {
            result: serde_json::json!({"resultType": "input_required", "inputRequests": requests}),
        }
    }

    /// The same questions with `mark` before the request state, so the client's retry shows
    /// what this hop already settled (the state is opaque to the client, which echoes it).
    pub fn marked(mut self, mark: &str) -> InputRequired {
        let state = self
            .result
            .get("requestState")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.result["requestState"] = Value::String(format!("{mark}{state}"));
        self
    }
}

/// A request's answer: complete, or waiting for the client's input.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply<T> {
    /// The final result.
    Complete(T),
    /// Questions for the client; it retries with the answers.
    InputRequired(InputRequired),
}

/// What a request made on another client's behalf carries from that client (the gateway's
/// requests upstream).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Forwarding {
    /// The client's own capabilities, sent upstream in place of ours on a modern request.
    pub client_capabilities: Option<Value>,
    /// The least severe log message the client wants; a modern upstream logs only when asked.
    pub log_level: Option<String>,
    /// Set for a client that takes input-required results (a 2026-07-28 client): its answers
    /// go upstream, and the upstream's questions come back to it rather than being answered
    /// through our host.
    pub input: Option<InputRound>,
    /// The W3C trace context of the request made upstream (`_meta.traceparent`, either era),
    /// so the upstream server's spans join the client's trace.
    pub traceparent: Option<String>,
}

impl Forwarding {
    /// `_meta` entries to add to the upstream request: the trace context and, on a modern
    /// request, the client's capabilities and log level.
    pub(crate) fn meta(&self, modern: bool) -> Option<rmcp::model::RequestMetaObject> {
        let mut meta = rmcp::model::RequestMetaObject::default();
        if let Some(traceparent) = &self.traceparent {
            meta.insert("traceparent".into(), Value::String(traceparent.clone()));
        }
        if !modern {
            return (!meta.is_empty()).then_some(meta);
        }
        if self.client_capabilities.is_none() && self.log_level.is_none() {
            return (!meta.is_empty()).then_some(meta);
        }
        // As the client sent them: rmcp puts these entries after its own, so they win.
        if let Some(capabilities) = &self.client_capabilities {
            meta.insert(CLIENT_CAPABILITIES.into(), capabilities.clone());
        }
        if let Some(level) = &self.log_level {
            meta.insert(LOG_LEVEL.into(), Value::String(level.clone()));
        }
        Some(meta)
    }
}

/// The `_meta` key of a 2026-07-28 request's client capabilities.
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// The `_meta` key of a 2026-07-28 request's log level.
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

impl InputRound {
    /// The answers as rmcp's request parameters carry them (`None` when absent or not an
    /// object of answers).
    pub(crate) fn rmcp_responses(&self) -> Option<rmcp::model::InputResponses> {
        serde_json::from_value(self.responses.clone()?).ok()
    }
}

/// A fresh 128-bit random token, URL-safe: the name of a call held across input rounds, which
/// must not be guessable by another client.
pub fn unguessable_token() -> Option<String> {
    use base64::Engine;
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Whether a result's JSON is an input-required result.
pub(crate) fn is_input_required(result: &Value) -> bool {
    result.get("resultType").and_then(Value::as_str) == Some("input_required")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn forwarding_meta_carries_the_clients_capabilities_and_level() {
        let forwarding = Forwarding {
            client_capabilities: Some(json!({"sampling": {}})),
            log_level: Some("info".into()),
            input: None,
            traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        };
        let meta = serde_json::to_value(forwarding.meta(true).expect("meta")).expect("json");
        assert_eq!(
            meta["io.modelcontextprotocol/clientCapabilities"],
            json!({"sampling": {}})
        );
        assert_eq!(meta["io.modelcontextprotocol/logLevel"], json!("info"));
        assert_eq!(meta["traceparent"], json!(forwarding.traceparent));
        // A legacy request carries the trace context only.
        let legacy = serde_json::to_value(forwarding.meta(false).expect("meta")).expect("json");
        assert_eq!(legacy, json!({"traceparent": forwarding.traceparent}));
        assert!(Forwarding::default().meta(true).is_none());
        assert!(Forwarding::default().meta(false).is_none());
    }

    #[test]
    fn a_marked_round_goes_upstream_without_the_mark_and_the_own_answer() {
        let asked = InputRequired::form("own", "Allow?", json!({"type": "object"}));
        assert!(is_input_required(&asked.result));
        let upstream = InputRequired {
            result: json!({"resultType": "input_required", "requestState": "up"}),
        };
        assert_eq!(upstream.marked("m:").result["requestState"], json!("m:up"));
        let round = InputRound {
            responses: Some(json!({"own": {"action": "accept"}, "theirs": 1})),
            state: Some("m:up".into()),
        };
        assert!(round.is_marked("m:"));
        assert_eq!(round.answer("own"), Some(&json!({"action": "accept"})));
        let sent = round.without("own", "m:");
        assert_eq!(sent.responses, Some(json!({"theirs": 1})));
        assert_eq!(sent.state.as_deref(), Some("up"));
        let bare = InputRound {
            responses: Some(json!({"own": {}})),
            state: Some("m:".into()),
        }
        .without("own", "m:");
        assert_eq!(bare, InputRound::default());
    }

    #[test]
    fn input_required_is_read_from_the_result_type() {
        assert!(is_input_required(&json!({"resultType": "input_required"})));
        assert!(!is_input_required(&json!({"resultType": "complete"})));
        assert!(!is_input_required(&json!({"content": []})));
    }
}
