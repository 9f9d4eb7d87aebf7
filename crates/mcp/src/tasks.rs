//! Tool calls a server runs as tasks (MCP 2025-11-25 `tasks`, "call now, fetch later"):
//! `tools/call` with a `task` parameter creates the task; `tasks/get` is polled at the
//! interval the server suggests and each new status reaches the caller as progress;
//! `tasks/result` waits for the outcome, and is also where the server delivers what it must
//! ask the user meanwhile (an elicitation arrives as an ordinary request while it is open);
//! `tasks/cancel` is sent when the caller gives up or the wait runs out. rmcp 3.11 models the
//! 2026-07-28 tasks extension only, so these requests go out as custom ones and their
//! answers are read as JSON.
//!
//! The 2026-07-28 tasks extension ([`follow`]) is the server's choice instead: it answers a
//! `tools/call` from a client that declared the extension with a task, which is polled with
//! `tasks/get` until it carries the result; questions arrive in it as `inputRequests` and
//! are answered with `tasks/update`.

use std::time::Duration;

use rmcp::RoleClient;
use rmcp::model::{
    CancelTaskParams, ClientRequest, CustomRequest, ErrorData, GetTaskParams, TaskPayload,
    UpdateTaskParams,
};
use rmcp::service::{Peer, ServiceError};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc::UnboundedSender;

use crate::client::{HostHandler, Progress, TaskState};

/// How long we ask the server to keep a task (`task.ttl`); also how long we wait for one
/// whose server names no ttl of its own.
const TASK_TTL: Duration = Duration::from_secs(60 * 60);
/// Bounds on the polling interval, whatever the server suggests.
const POLL_AT_LEAST: Duration = Duration::from_millis(100);
const POLL_AT_MOST: Duration = Duration::from_secs(5);

/// Runs `tool` as a task and returns its `CallToolResult` as JSON. `request_timeout` bounds
/// each request; the whole task is bounded by its ttl. Dropping the future cancels the task.
pub(crate) async fn call_as_task(
    peer: &Peer<RoleClient>,
    tool: &str,
    arguments: Option<Map<String, Value>>,
    request_timeout: Duration,
    progress: Option<UnboundedSender<Progress>>,
) -> Result<Value, ServiceError> {
    let mut params = json!({"name": tool, "task": {"ttl": TASK_TTL.as_millis() as u64}});
    if let Some(arguments) = arguments {
        params["arguments"] = Value::Object(arguments);
    }
    let created = send(peer, "tools/call", params, request_timeout).await?;
    let Some(task) = created.get("task") else {
        // The server ran it at once: this is the call's result.
        return Ok(created);
    };
    let Some(task_id) = task
        .get("taskId")
        .and_then(Value::as_str)
        .map(str::to_string)
    else {
        return Err(ServiceError::UnexpectedResponse);
    };
    let wait = task
        .get("ttl")
        .and_then(Value::as_u64)
        .map_or(TASK_TTL, Duration::from_millis)
        .min(TASK_TTL);
    let mut poll = poll_interval(task);
    let mut reporter = Reporter::new(&task_id, progress);
    reporter.report(task);
    let mut guard = CancelOnDrop {
        peer: peer.clone(),
        task_id: Some(task_id.clone()),
        modern: false,
    };
    let result = send(peer, "tasks/result", json!({"taskId": task_id}), wait);
    tokio::pin!(result);
    let outcome = loop {
        tokio::select! {
            outcome = &mut result => break outcome,
            () = tokio::time::sleep(poll) => {
                let status = send(peer, "tasks/get", json!({"taskId": task_id}), request_timeout);
                if let Ok(status) = status.await {
                    reporter.report(&status);
                    poll = poll_interval(&status);
                }
            }
        }
    };
    if !matches!(outcome, Err(ServiceError::Timeout { .. })) {
        // Finished (with a result or the server's error): nothing left to cancel.
        guard.task_id = None;
    }
    let result = outcome?;
    reporter.report(&json!({"status": "completed"}));
    Ok(result)
}

/// Whether a server refused a plain `tools/call` because the tool runs only as a task:
/// "Method not found" naming task augmentation, as the TypeScript SDK says it.
pub(crate) fn needs_task(error: &rmcp::model::ErrorData) -> bool {
    error.code == rmcp::model::ErrorCode::METHOD_NOT_FOUND
        && error.message.to_lowercase().contains("task")
}

/// Whether a tool result is the TypeScript SDK's refusal of a plain call to a task-only tool,
/// which it sends as an `isError` result rather than an error: "MCP error -32601: Tool X
/// requires task augmentation (taskSupport: 'required')".
pub(crate) fn refused_without_task(result: &Value) -> bool {
    result.get("isError") == Some(&Value::Bool(true))
        && result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .is_some_and(|text| text.contains("requires task augmentation"))
}

/// One task's state (`tasks/get`, 2025-11-25).
pub(crate) async fn get(
    peer: &Peer<RoleClient>,
    task_id: &str,
    timeout: Duration,
) -> Result<Value, ServiceError> {
    send(peer, "tasks/get", json!({"taskId": task_id}), timeout).await
}

/// Every task the server lists (`tasks/list`, all pages).
pub(crate) async fn list(
    peer: &Peer<RoleClient>,
    timeout: Duration,
) -> Result<Vec<Value>, ServiceError> {
    let mut tasks = Vec::new();
    let mut cursor: Option<String> = None;
    // A server that keeps handing out cursors is cut off rather than followed forever.
    for _ in 0..100 {
        let params = cursor.map_or_else(|| json!({}), |c| json!({"cursor": c}));
        let page = send(peer, "tasks/list", params, timeout).await?;
        if let Some(Value::Array(items)) = page.get("tasks") {
            tasks.extend(items.iter().cloned());
        }
        cursor = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        if cursor.is_none() {
            break;
        }
    }
    Ok(tasks)
}

/// Follows a task a modern server created for a call until it ends, and returns the call's
/// result as JSON. `host` (with the server's name) answers the questions the task asks.
pub(crate) async fn follow(
    peer: &Peer<RoleClient>,
    host: (&dyn HostHandler, &str),
    task: rmcp::model::Task,
    request_timeout: Duration,
    progress: Option<UnboundedSender<Progress>>,
) -> Result<Value, ServiceError> {
    let task_id = task.task_id.clone();
    let wait = task
        .ttl_ms
        .map_or(TASK_TTL, Duration::from_millis)
        .min(TASK_TTL);
    let deadline = tokio::time::Instant::now() + wait;
    let seed = serde_json::to_value(&task).unwrap_or_default();
    let mut poll = poll_interval(&seed);
    let mut reporter = Reporter::new(&task_id, progress);
    reporter.report(&seed);
    let mut guard = CancelOnDrop {
        peer: peer.clone(),
        task_id: Some(task_id.clone()),
        modern: true,
    };
    let mut answered: Vec<String> = Vec::new();
    loop {
        if tokio::time::Instant::now() + poll > deadline {
            return Err(ServiceError::Timeout { timeout: wait });
        }
        tokio::time::sleep(poll).await;
        let get = peer.get_task(GetTaskParams::new(task_id.clone()));
        let current = within(request_timeout, get).await?;
        let value = serde_json::to_value(&current).unwrap_or_default();
        reporter.report(&value);
        poll = poll_interval(&value);
        match current.task.payload {
            TaskPayload::Completed { result } => {
                guard.task_id = None;
                return Ok(Value::Object(result));
            }
            TaskPayload::Failed { error } => {
                guard.task_id = None;
                let error = serde_json::from_value(Value::Object(error)).unwrap_or_else(|_| {
                    ErrorData::internal_error("the task failed without saying why", None)
                });
                return Err(ServiceError::McpError(error));
            }
            TaskPayload::Cancelled => {
                guard.task_id = None;
                return Err(ServiceError::McpError(ErrorData::internal_error(
                    "the server cancelled the task",
                    None,
                )));
            }
            TaskPayload::InputRequired { input_requests } => {
                let requests = serde_json::to_value(&input_requests).unwrap_or_default();
                let mut responses = Map::new();
                for (key, request) in requests.as_object().into_iter().flatten() {
                    if answered.contains(key) {
                        continue;
                    }
                    responses.insert(key.clone(), answer(host, request).await);
                    answered.push(key.clone());
                }
                if !responses.is_empty() {
                    let responses = serde_json::from_value(Value::Object(responses))
                        .map_err(|_| ServiceError::UnexpectedResponse)?;
                    let update =
                        peer.update_task(UpdateTaskParams::new(task_id.clone(), responses));
                    within(request_timeout, update).await?;
                }
            }
            _ => {}
        }
    }
}

/// The user's (or the host's) answer to one question a task asks (`elicitation/create`,
/// `sampling/createMessage` or `roots/list`), in the wire shape of its result.
async fn answer((host, server): (&dyn HostHandler, &str), request: &Value) -> Value {
    let params = request.get("params").cloned().unwrap_or_default();
    match request.get("method").and_then(Value::as_str) {
        Some("elicitation/create") => {
            crate::client::elicitation_answer(host, server, &params).await
        }
        Some("sampling/createMessage") => match host.sample(server, params).await {
            Ok(result) => result,
            Err(why) => json!({"error": why}),
        },
        Some("roots/list") => json!({"roots": host.roots()}),
        _ => json!({}),
    }
}

/// `request`'s outcome, or `ServiceError::Timeout` once `timeout` has passed.
pub(crate) async fn within<T>(
    timeout: Duration,
    request: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, ServiceError> {
    tokio::time::timeout(timeout, request)
        .await
        .map_err(|_| ServiceError::Timeout { timeout })?
}

/// Sends one custom request and reads the answer as JSON.
async fn send(
    peer: &Peer<RoleClient>,
    method: &str,
    params: Value,
    timeout: Duration,
) -> Result<Value, ServiceError> {
    let request = ClientRequest::CustomRequest(CustomRequest::new(method, Some(params)));
    let answer = within(timeout, peer.send_request(request)).await?;
    // Serialising rmcp's own types cannot fail (string keys only).
    Ok(serde_json::to_value(&answer).unwrap_or_default())
}

fn poll_interval(task: &Value) -> Duration {
    task.get("pollInterval")
        .or_else(|| task.get("pollIntervalMs"))
        .and_then(Value::as_u64)
        .map_or(Duration::from_secs(1), Duration::from_millis)
        .clamp(POLL_AT_LEAST, POLL_AT_MOST)
}

/// Turns task states into progress, once per change of status or message.
struct Reporter {
    task_id: String,
    sender: Option<UnboundedSender<Progress>>,
    last: Option<(String, Option<String>)>,
    count: u32,
}

impl Reporter {
    fn new(task_id: &str, sender: Option<UnboundedSender<Progress>>) -> Reporter {
        Reporter {
            task_id: task_id.to_string(),
            sender,
            last: None,
            count: 0,
        }
    }

    fn report(&mut self, task: &Value) {
        let Some(status) = task.get("status").and_then(Value::as_str) else {
            return;
        };
        let message = task
            .get("statusMessage")
            .and_then(Value::as_str)
            .map(str::to_string);
        let now = (status.to_string(), message.clone());
        if self.last.as_ref() == Some(&now) {
            return;
        }
        self.last = Some(now);
        self.count += 1;
        if let Some(sender) = &self.sender {
            let _ = sender.send(Progress {
                progress: f64::from(self.count),
                total: None,
                message: Some(match (status, message) {
                    ("working", Some(message)) => message,
                    (_, Some(message)) => format!("{status}: {message}"),
                    (_, None) => format!("task {status}"),
                }),
                task: Some(TaskState {
                    task_id: self.task_id.clone(),
                    status: status.to_string(),
                }),
            });
        }
    }
}

/// Sends `tasks/cancel` for a task whose caller went away before it finished.
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    task_id: Option<String>,
    /// A 2026-07-28 task (rmcp's typed request) rather than a 2025-11-25 one.
    modern: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(task_id) = self.task_id.take() else {
            return;
        };
        let (peer, modern) = (self.peer.clone(), self.modern);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let limit = Duration::from_secs(5);
                if modern {
                    let cancel = peer.cancel_task(CancelTaskParams::new(task_id));
                    let _ = tokio::time::timeout(limit, cancel).await;
                } else {
                    let _ = send(&peer, "tasks/cancel", json!({"taskId": task_id}), limit).await;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_poll_interval_is_the_servers_within_bounds() {
        assert_eq!(
            poll_interval(&json!({"pollInterval": 250})),
            Duration::from_millis(250)
        );
        assert_eq!(poll_interval(&json!({"pollInterval": 1})), POLL_AT_LEAST);
        assert_eq!(
            poll_interval(&json!({"pollInterval": 600000})),
            POLL_AT_MOST
        );
        assert_eq!(poll_interval(&json!({})), Duration::from_secs(1));
    }

    #[test]
    fn a_refusal_for_want_of_a_task_is_recognised() {
        let refusal = json!({"isError": true, "content": [{"type": "text", "text": "MCP error -32601: Tool r requires task augmentation (taskSupport: 'required')"}]});
        assert!(refused_without_task(&refusal));
        let other = json!({"isError": true, "content": [{"type": "text", "text": "no such city"}]});
        assert!(!refused_without_task(&other));
        let fine = json!({"content": [{"type": "text", "text": "requires task augmentation"}]});
        assert!(!refused_without_task(&fine));
        let error = rmcp::model::ErrorData::new(
            rmcp::model::ErrorCode::METHOD_NOT_FOUND,
            "Tool r requires task augmentation",
            None,
        );
        assert!(needs_task(&error));
    }

    #[test]
    fn each_change_of_status_is_reported_once() {
        let (sender, mut receiver) = tokio::sync::mpsc::unbounded_channel();
        let mut reporter = Reporter::new("t1", Some(sender));
        reporter.report(&json!({"status": "working"}));
        reporter.report(&json!({"status": "working"}));
        reporter.report(&json!({"status": "working", "statusMessage": "Analyzing"}));
        reporter.report(&json!({"status": "input_required", "statusMessage": "Which one?"}));
        reporter.report(&json!({"status": "completed"}));
        let seen: Vec<(f64, String, String)> = std::iter::from_fn(|| receiver.try_recv().ok())
            .map(|p| (p.progress, p.message.unwrap(), p.task.unwrap().status))
            .collect();
        assert_eq!(
            seen,
            [
                (1.0, "task working".into(), "working".into()),
                (2.0, "Analyzing".into(), "working".into()),
                (
                    3.0,
                    "input_required: Which one?".into(),
                    "input_required".into()
                ),
                (4.0, "task completed".into(), "completed".into()),
            ]
        );
    }
}
