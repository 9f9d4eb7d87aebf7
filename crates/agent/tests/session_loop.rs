//! The engine's loop in-process: a `Session` over a fake model (a scripted `Provider`) and fake
//! servers (a `ToolServers` with fixed tools), driven only through ops and read only through
//! events, as every front end does. Parallel calls, a rejection, an interrupt while permission
//! is pending, and the step limit.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Map, Value, json};
use tether_agent::attachments::Mention;
use tether_agent::{
    AgentEvent, AgentOptions, ApprovalMode, InputBlock, ModelSlot, Op, PermissionDecision,
    Questions, Session, SessionHandle, SessionParts, StopReason, ToolServers, event_channel,
};
use tether_catalog::{
    Refresh, SelectionMode, SelectionOptions, ServerTools, ToolCatalog, selection_for,
};
use tether_llm::{ChatRequest, EventStream, LlmError, Provider, StreamEvent};
use tether_mcp::{McpError, Progress};
use tether_protocol::chat::Message;
use tether_protocol::{ContentBlock, Tool, ToolAnnotations, ToolResult};
use tokio::sync::{Barrier, mpsc::UnboundedSender};

/// One answer of the fake model: text, or tool calls `(id, name, arguments)`.
enum Answer {
    Text(&'static str),
    Calls(Vec<(&'static str, &'static str, &'static str)>),
}

/// A model that gives its answers in order (repeating the last) and records every request.
struct FakeModel {
    script: Mutex<VecDeque<Answer>>,
    repeat_last: bool,
    requests: Mutex<Vec<ChatRequest>>,
}

impl FakeModel {
    fn new(script: Vec<Answer>, repeat_last: bool) -> Arc<FakeModel> {
        Arc::new(FakeModel {
            script: Mutex::new(script.into()),
            repeat_last,
            requests: Mutex::new(Vec::new()),
        })
    }

    fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }
}

impl Provider for FakeModel {
    fn name(&self) -> &str {
        "fake"
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, LlmError>> {
        self.requests.lock().unwrap().push(request.clone());
        let mut script = self.script.lock().unwrap();
        let answer = if self.repeat_last && script.len() == 1 {
            match script.front().unwrap() {
                Answer::Text(text) => Answer::Text(text),
                Answer::Calls(calls) => Answer::Calls(calls.clone()),
            }
        } else {
            script
                .pop_front()
                .expect("the model was asked more than scripted")
        };
        let events: Vec<Result<StreamEvent, LlmError>> = match answer {
            Answer::Text(text) => vec![
                Ok(StreamEvent::TextDelta(text.into())),
                Ok(StreamEvent::Stop(tether_llm::StopReason::EndTurn)),
            ],
            Answer::Calls(calls) => calls
                .into_iter()
                .enumerate()
                .map(|(index, (id, name, arguments))| {
                    Ok(StreamEvent::ToolCallDelta {
                        index,
                        id: Some(id.into()),
                        name: Some(name.into()),
                        arguments: arguments.into(),
                    })
                })
                .chain([Ok(StreamEvent::Stop(tether_llm::StopReason::ToolCalls))])
                .collect(),
        };
        Box::pin(async move { Ok(Box::pin(futures::stream::iter(events)) as EventStream) })
    }
}

/// One server, "fake", with a read-only `echo`, two read-only `meet_*` tools that finish only
/// when both are running at once, and a `write` tool that is not read-only.
struct FakeServers {
    meeting: Arc<Barrier>,
    calls: Mutex<Vec<String>>,
    /// What each server's `instructions` say.
    instructions: Vec<(String, String)>,
}

impl FakeServers {
    fn new() -> Arc<FakeServers> {
        FakeServers::instructed(Vec::new())
    }

    fn instructed(instructions: Vec<(String, String)>) -> Arc<FakeServers> {
        Arc::new(FakeServers {
            meeting: Arc::new(Barrier::new(2)),
            calls: Mutex::new(Vec::new()),
            instructions,
        })
    }

    fn catalog() -> ToolCatalog {
        let tool = |name: &str, read_only: bool| Tool {
            name: name.into(),
            title: None,
            description: Some(format!("the {name} tool")),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: ToolAnnotations {
                read_only_hint: Some(read_only),
                ..ToolAnnotations::default()
            },
            execution: None,
            icons: None,
            meta: None,
        };
        ToolCatalog::from_servers(vec![ServerTools {
            server: "fake".into(),
            tools: vec![
                tool("echo", true),
                tool("meet_a", true),
                tool("meet_b", true),
                tool("write", false),
            ],
            always_load: false,
        }])
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

fn text(text: &str, is_error: bool) -> ToolResult {
    ToolResult {
        content: vec![ContentBlock::Text { text: text.into() }],
        structured_content: None,
        is_error,
    }
}

impl ToolServers for FakeServers {
    fn names(&self) -> Vec<String> {
        vec!["fake".into()]
    }

    fn instructions(&self) -> Vec<(String, String)> {
        self.instructions.clone()
    }

    fn trusts_hints(&self, _server: &str) -> bool {
        true
    }

    fn call<'a>(
        &'a self,
        _server: &'a str,
        tool: &'a str,
        _arguments: Option<Map<String, Value>>,
        _progress: Option<UnboundedSender<Progress>>,
    ) -> BoxFuture<'a, Result<ToolResult, McpError>> {
        self.calls.lock().unwrap().push(tool.to_string());
        Box::pin(async move {
            Ok(match tool {
                "meet_a" | "meet_b" => {
                    // Both calls must be in flight together for either to pass the barrier.
                    match tokio::time::timeout(Duration::from_secs(10), self.meeting.wait()).await {
                        Ok(_) => text("met", false),
                        Err(_) => text("ran alone: the calls were not concurrent", true),
                    }
                }
                "write" => text("written", false),
                _ => text("echoed", false),
            })
        })
    }

    fn refresh<'a>(&'a self, _catalog: &'a ToolCatalog) -> BoxFuture<'a, Option<Refresh>> {
        Box::pin(async { None })
    }

    fn resource_updates(&self) -> BoxFuture<'_, Vec<(Mention, Message)>> {
        Box::pin(async { Vec::new() })
    }

    fn attach<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(String, Vec<Mention>), McpError>> {
        Box::pin(async move { Ok((text.to_string(), Vec::new())) })
    }
}

fn start(model: Arc<FakeModel>, servers: Arc<FakeServers>, max_steps: usize) -> SessionHandle {
    let all = SelectionOptions {
        mode: SelectionMode::All,
        ..SelectionOptions::default()
    };
    start_with(model, servers, max_steps, all, None)
}

fn start_with(
    model: Arc<FakeModel>,
    servers: Arc<FakeServers>,
    max_steps: usize,
    selection: SelectionOptions,
    context_window: Option<usize>,
) -> SessionHandle {
    let (inner_sender, inner_events) = event_channel();
    let questions = Questions::new(inner_sender.clone(), true);
    Session::spawn(SessionParts {
        model: ModelSlot::new("fake:model".into(), model),
        registry: servers,
        catalog: FakeServers::catalog(),
        selection: selection_for(&selection),
        options: AgentOptions {
            max_steps,
            approval_mode: ApprovalMode::Ask,
            context_window,
            ..AgentOptions::default()
        },
        questions,
        inner_events,
        inner_sender,
        history: Vec::new(),
        models: None,
    })
}

fn prompt(handle: &SessionHandle, text: &str) {
    handle
        .ops
        .send(Op::Prompt {
            content: vec![InputBlock::Text { text: text.into() }],
        })
        .unwrap();
}

/// Events until (and with) the first one `stop` accepts, within 30 s.
async fn until(
    handle: &mut SessionHandle,
    mut stop: impl FnMut(&AgentEvent) -> bool,
) -> Vec<AgentEvent> {
    let mut seen = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), handle.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no event in 30 s; saw {seen:#?}"))
            .unwrap_or_else(|| panic!("the session ended; saw {seen:#?}"));
        let done = stop(&event);
        seen.push(event);
        if done {
            return seen;
        }
    }
}

fn turn_ended(event: &AgentEvent) -> bool {
    matches!(event, AgentEvent::TurnEnded { .. })
}

fn stop_reason(events: &[AgentEvent]) -> StopReason {
    match events.last() {
        Some(AgentEvent::TurnEnded { stop_reason, .. }) => *stop_reason,
        other => panic!("not a turn end: {other:?}"),
    }
}

/// The tool messages the model was sent, as `(call id, content)`.
fn tool_messages(request: &ChatRequest) -> Vec<(String, String)> {
    request
        .messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool {
                tool_call_id,
                content,
                ..
            } => Some((tool_call_id.clone(), content.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn independent_calls_run_at_once_and_results_keep_call_order() {
    let model = FakeModel::new(
        vec![
            Answer::Calls(vec![
                ("c1", "fake__meet_a", "{}"),
                ("c2", "fake__meet_b", "{}"),
            ]),
            Answer::Text("Both met."),
        ],
        false,
    );
    let servers = FakeServers::new();
    let mut handle = start(model.clone(), servers.clone(), 5);
    prompt(&handle, "meet");
    let events = until(&mut handle, turn_ended).await;
    assert_eq!(stop_reason(&events), StopReason::EndTurn, "{events:#?}");
    let told = tool_messages(&model.requests()[1]);
    assert_eq!(
        told,
        [("c1".into(), "met".into()), ("c2".into(), "met".into())],
        "both ran at once, and the results are in call order"
    );
}

#[tokio::test]
async fn a_rejected_call_never_runs_and_the_model_is_told() {
    let model = FakeModel::new(
        vec![
            Answer::Calls(vec![("c1", "fake__write", "{}")]),
            Answer::Text("I was not allowed."),
        ],
        false,
    );
    let servers = FakeServers::new();
    let mut handle = start(model.clone(), servers.clone(), 5);
    prompt(&handle, "write it");
    let asked = until(&mut handle, |e| {
        matches!(e, AgentEvent::PermissionRequested { .. })
    })
    .await;
    let Some(AgentEvent::PermissionRequested {
        request_id,
        call_id,
        ..
    }) = asked.last()
    else {
        unreachable!()
    };
    assert_eq!(call_id, "c1");
    handle
        .ops
        .send(Op::Decide {
            request_id: request_id.clone(),
            decision: PermissionDecision::RejectOnce,
        })
        .unwrap();
    let events = until(&mut handle, turn_ended).await;
    assert_eq!(stop_reason(&events), StopReason::EndTurn);
    assert!(servers.calls().is_empty(), "the server was never called");
    let told = tool_messages(&model.requests()[1]);
    assert!(told[0].1.contains("the user denied this call"), "{told:?}");
}

#[tokio::test]
async fn an_interrupt_withdraws_the_pending_question_and_cancels_the_turn() {
    let model = FakeModel::new(
        vec![
            Answer::Calls(vec![("c1", "fake__write", "{}")]),
            Answer::Text("Fine."),
        ],
        false,
    );
    let servers = FakeServers::new();
    let mut handle = start(model.clone(), servers.clone(), 5);
    prompt(&handle, "write it");
    let asked = until(&mut handle, |e| {
        matches!(e, AgentEvent::PermissionRequested { .. })
    })
    .await;
    let Some(AgentEvent::PermissionRequested { request_id, .. }) = asked.last() else {
        unreachable!()
    };
    handle.ops.send(Op::Interrupt).unwrap();
    let events = until(&mut handle, turn_ended).await;
    assert_eq!(stop_reason(&events), StopReason::Cancelled);
    // The question was answered "cancelled" and is gone: a late answer is refused in words.
    handle
        .ops
        .send(Op::Decide {
            request_id: request_id.clone(),
            decision: PermissionDecision::AllowOnce,
        })
        .unwrap();
    let refused = until(&mut handle, |e| matches!(e, AgentEvent::OpRejected { .. })).await;
    assert!(
        matches!(refused.last(), Some(AgentEvent::OpRejected { message }) if message.contains("no question")),
        "{refused:#?}"
    );
    assert!(servers.calls().is_empty(), "the call never ran");
    assert_eq!(model.requests().len(), 1, "the model was not asked again");
    // The session goes on: the next prompt is a new turn, and the call the interrupt left
    // open has a result saying so (providers refuse a call without one).
    prompt(&handle, "never mind");
    let events = until(&mut handle, turn_ended).await;
    assert_eq!(stop_reason(&events), StopReason::EndTurn, "{events:#?}");
    let told = tool_messages(&model.requests()[1]);
    assert_eq!(told.len(), 1, "{told:?}");
    assert!(told[0].1.contains("cancelled"), "{told:?}");
    handle.ops.send(Op::Shutdown).unwrap();
    let conversation = handle.task.await.unwrap();
    assert!(matches!(conversation.first(), Some(Message::User { .. })));
}

#[tokio::test]
async fn the_step_limit_ends_a_turn_that_keeps_calling_tools() {
    let model = FakeModel::new(vec![Answer::Calls(vec![("c", "fake__echo", "{}")])], true);
    let servers = FakeServers::new();
    let mut handle = start(model.clone(), servers.clone(), 3);
    prompt(&handle, "loop");
    let events = until(&mut handle, turn_ended).await;
    assert_eq!(stop_reason(&events), StopReason::MaxSteps, "{events:#?}");
    assert_eq!(model.requests().len(), 3);
    assert_eq!(servers.calls().len(), 3);
}

/// The ops a chat or an editor sends between turns: the system prompt for the next turn,
/// compaction by the model (the last exchange kept), a cleared conversation, a resumed one;
/// each replacement is announced with the conversation now, and a compaction with nothing to
/// compact, or one asked for during a turn, is refused in words.
#[tokio::test]
async fn conversation_ops_between_turns() {
    let model = FakeModel::new(
        vec![
            Answer::Text("First."),
            Answer::Calls(vec![("c1", "fake__write", "{}")]),
            Answer::Text("Second."),
            Answer::Text("A summary."),
            Answer::Text("After."),
        ],
        false,
    );
    let mut handle = start(model.clone(), FakeServers::new(), 5);
    let replaced = |e: &AgentEvent| {
        matches!(
            e,
            AgentEvent::ConversationReplaced { .. } | AgentEvent::OpRejected { .. }
        )
    };
    handle.ops.send(Op::Compact).unwrap();
    let events = until(&mut handle, replaced).await;
    assert!(
        matches!(events.last(), Some(AgentEvent::OpRejected { message }) if message.contains("nothing to compact")),
        "{events:#?}"
    );
    handle
        .ops
        .send(Op::SetSystemPrompt {
            text: Some("Be brief.".into()),
        })
        .unwrap();
    prompt(&handle, "one");
    until(&mut handle, turn_ended).await;
    let system = &model.requests()[0].messages[0];
    assert!(
        matches!(system, Message::System { content } if content.contains("Be brief.")),
        "{system:?}"
    );
    prompt(&handle, "two");
    let asked = until(&mut handle, |e| {
        matches!(e, AgentEvent::PermissionRequested { .. })
    })
    .await;
    let Some(AgentEvent::PermissionRequested { request_id, .. }) = asked.last() else {
        unreachable!()
    };
    // Asked while the turn runs: refused, and the turn goes on.
    handle.ops.send(Op::Clear).unwrap();
    let events = until(&mut handle, |e| matches!(e, AgentEvent::OpRejected { .. })).await;
    assert!(
        matches!(events.last(), Some(AgentEvent::OpRejected { message }) if message.contains("a turn is running")),
        "{events:#?}"
    );
    handle
        .ops
        .send(Op::Decide {
            request_id: request_id.clone(),
            decision: PermissionDecision::RejectOnce,
        })
        .unwrap();
    let events = until(&mut handle, turn_ended).await;
    assert_eq!(stop_reason(&events), StopReason::EndTurn);

    handle.ops.send(Op::Compact).unwrap();
    let events = until(&mut handle, replaced).await;
    let Some(AgentEvent::ConversationReplaced { messages, note }) = events.last() else {
        panic!("{events:#?}");
    };
    assert!(note.starts_with("compacted 2 earlier messages"), "{note}");
    assert!(
        matches!(&messages[0], Message::User { content } if content.contains("A summary.")),
        "{messages:#?}"
    );
    assert!(
        matches!(&messages[1], Message::User { content } if content == "two"),
        "the last exchange is kept: {messages:#?}"
    );
    assert_eq!(
        messages.len(),
        5,
        "the summary, then the question, the call, its refusal and the answer: {messages:#?}"
    );

    handle.ops.send(Op::Clear).unwrap();
    let events = until(&mut handle, replaced).await;
    assert!(
        matches!(events.last(), Some(AgentEvent::ConversationReplaced { messages, .. }) if messages.is_empty()),
        "{events:#?}"
    );
    let resumed = vec![Message::user("earlier"), Message::assistant("noted")];
    handle
        .ops
        .send(Op::ReplaceConversation {
            messages: resumed.clone(),
        })
        .unwrap();
    until(&mut handle, replaced).await;
    prompt(&handle, "three");
    until(&mut handle, turn_ended).await;
    let last = model.requests().last().unwrap().messages.clone();
    let users: Vec<&str> = last
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["earlier", "three"], "{last:#?}");
}

/// A model offered only pre-selected tools hears only their servers' instructions, in a share
/// of its context window; a model that can reach every tool hears every server.
#[tokio::test]
async fn instructions_come_only_from_the_servers_whose_tools_are_offered_and_are_capped() {
    let long = format!("Use echo for echoing. {}", "Be careful. ".repeat(200));
    let instructions = vec![
        ("fake".to_string(), long.clone()),
        (
            "chatty".to_string(),
            "Answer every message with an easter egg.".to_string(),
        ),
    ];
    let system = |request: &ChatRequest| match request.messages.first() {
        Some(Message::System { content }) => content.clone(),
        other => panic!("no system message: {other:?}"),
    };
    let preselecting = SelectionOptions {
        mode: SelectionMode::Search,
        search_tool: false,
        preload: 3,
        keep_loaded: false,
        ..SelectionOptions::default()
    };
    let model = FakeModel::new(vec![Answer::Text("Done.")], false);
    let mut handle = start_with(
        model.clone(),
        FakeServers::instructed(instructions.clone()),
        5,
        preselecting,
        Some(8192),
    );
    prompt(&handle, "echo this back");
    until(&mut handle, turn_ended).await;
    let told = system(&model.requests()[0]);
    assert!(told.contains("Use echo for echoing."), "{told}");
    assert!(
        !told.contains("easter egg"),
        "a server with no offered tool is silent: {told}"
    );
    assert!(
        told.len() < long.len(),
        "8,192 tokens allow 512 characters: {told}"
    );
    assert!(told.contains("[…]"), "{told}");

    let model = FakeModel::new(vec![Answer::Text("Done.")], false);
    let mut handle = start(model.clone(), FakeServers::instructed(instructions), 5);
    prompt(&handle, "echo this back");
    until(&mut handle, turn_ended).await;
    let told = system(&model.requests()[0]);
    assert!(
        told.contains("easter egg") && told.contains(long.trim()),
        "{told}"
    );
}
