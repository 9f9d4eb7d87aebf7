//! The engine every front end drives: an owned [`Session`] that takes [`Op`]s in and sends
//! [`AgentEvent`]s out (codex-rs's queue pair). It owns the model, a handle on the servers,
//! the catalogue and tool selection, the conversation, the "always" answers and the questions
//! waiting for a person; a front end renders events and turns a person's input into ops, and
//! never reads a terminal on the engine's behalf.
//!
//! The session runs as one task. While a turn runs it keeps reading ops, so a decision, an
//! answer or an interrupt is taken at once; an interrupt withdraws every pending question
//! (answered "cancelled") and ends the turn with [`StopReason::Cancelled`].

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tether_catalog::{ApprovalMode, ToolCatalog, ToolSelection};
use tether_llm::Provider;
use tether_protocol::chat::{Message, Usage};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentError, AgentOptions};
use crate::events::{AgentEvent, EVENT_SCHEMA_VERSION, StopReason};
use crate::questions::{
    Answer, AnswerAction, ModelSlot, PermissionDecision, Questions, SessionApprover,
    elicitation_answer,
};
use crate::servers::ToolServers;

/// What a front end asks of a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Op {
    /// The person's input: starts a turn.
    Prompt {
        /// The input, in order.
        content: Vec<InputBlock>,
    },
    /// A decision on a pending permission or sampling question.
    Decide {
        /// The question's `request_id`.
        request_id: String,
        /// The answer.
        decision: PermissionDecision,
    },
    /// An answer to a pending elicitation.
    Answer {
        /// The question's `request_id`.
        request_id: String,
        /// Accept, decline or cancel.
        action: AnswerAction,
        /// The form's values, for accept.
        #[serde(default)]
        content: Map<String, Value>,
    },
    /// Stop the running turn; pending questions are answered "cancelled".
    Interrupt,
    /// The approval mode from now on.
    SetApprovalMode {
        /// ask, auto or never.
        mode: ApprovalMode,
    },
    /// The model from the next turn on (`provider:model`, or `local`).
    SetModel {
        /// The spec.
        model: String,
    },
    /// The system prompt from the next turn on; `null` removes it.
    SetSystemPrompt {
        /// The prompt.
        #[serde(default)]
        text: Option<String>,
    },
    /// Forget the conversation (between turns); answered by `conversation_replaced`.
    Clear,
    /// Replace all but the last exchange with a summary the model writes (between turns);
    /// answered by `conversation_replaced`, or `op_rejected` when there is nothing to compact.
    Compact,
    /// Continue from `messages` instead of the conversation so far (a resumed session);
    /// answered by `conversation_replaced`.
    ReplaceConversation {
        /// The conversation to continue.
        messages: Vec<Message>,
    },
    /// End the session once the running turn (if any) is interrupted.
    Shutdown,
}

/// One piece of a person's input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputBlock {
    /// Text; `@server:uri` mentions in it attach that server's resource.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Base64 data.
        data: String,
        /// Its MIME type.
        #[serde(rename = "mimeType", alias = "mime_type")]
        mime_type: String,
    },
    /// A pointer to a resource (a file the editor names): the model is told of it and may
    /// read it with a tool.
    ResourceLink {
        /// Its URI.
        uri: String,
        /// Its name.
        #[serde(default)]
        name: Option<String>,
    },
    /// A resource's contents, given inline (an editor's selection, an open file).
    Resource {
        /// Its URI.
        uri: String,
        /// Its text.
        #[serde(default)]
        text: Option<String>,
        /// Its MIME type.
        #[serde(default, rename = "mimeType", alias = "mime_type")]
        mime_type: Option<String>,
    },
}

/// Builds models by spec, for [`Op::SetModel`].
pub trait ModelSource: Send + Sync {
    /// The provider for `spec`, or why not (a line that names `spec`).
    fn provider<'a>(&'a self, spec: &'a str) -> BoxFuture<'a, Result<Arc<dyn Provider>, String>>;
}

/// Everything a session is made of; the front end builds the parts (servers first, with the
/// session's host) and hands them over.
pub struct SessionParts {
    /// The model in use (shared with the host, which samples with it).
    pub model: ModelSlot,
    /// The servers.
    pub registry: Arc<dyn ToolServers>,
    /// Their tools.
    pub catalog: ToolCatalog,
    /// How tools are offered.
    pub selection: Arc<dyn ToolSelection>,
    /// The loop's settings.
    pub options: AgentOptions,
    /// The questions table the host asks through (shared with the host).
    pub questions: Arc<Questions>,
    /// Where the host and the loop send events; the session forwards them, in order.
    pub inner_events: UnboundedReceiver<AgentEvent>,
    /// A sender on `inner_events`.
    pub inner_sender: UnboundedSender<AgentEvent>,
    /// The conversation so far (a loaded session's history).
    pub history: Vec<Message>,
    /// Builds models for [`Op::SetModel`]; `None` refuses it.
    pub models: Option<Arc<dyn ModelSource>>,
}

/// The front end's side of a running session.
pub struct SessionHandle {
    /// Ops in.
    pub ops: UnboundedSender<Op>,
    /// Events out, in order.
    pub events: UnboundedReceiver<AgentEvent>,
    /// The session's task; it yields the conversation when the session ends.
    pub task: JoinHandle<Vec<Message>>,
}

/// The channel the host and the loop send events to; hand the receiver to
/// [`SessionParts::inner_events`].
pub fn event_channel() -> (UnboundedSender<AgentEvent>, UnboundedReceiver<AgentEvent>) {
    mpsc::unbounded_channel()
}

/// A running session.
pub struct Session {
    model: ModelSlot,
    registry: Arc<dyn ToolServers>,
    catalog: ToolCatalog,
    selection: Arc<dyn ToolSelection>,
    options: AgentOptions,
    questions: Arc<Questions>,
    approver: SessionApprover,
    inner_events: UnboundedReceiver<AgentEvent>,
    inner_sender: UnboundedSender<AgentEvent>,
    out: UnboundedSender<AgentEvent>,
    conversation: Vec<Message>,
    models: Option<Arc<dyn ModelSource>>,
    turns: u64,
    /// The calls running on each server, so a server's question names its call.
    running: HashMap<String, Vec<String>>,
}

impl Session {
    /// Starts a session task from `parts`; its first event is `session_started`.
    pub fn spawn(parts: SessionParts) -> SessionHandle {
        let (ops_tx, ops_rx) = mpsc::unbounded_channel();
        let (out, events) = mpsc::unbounded_channel();
        let session = Session {
            approver: SessionApprover::new(parts.questions.clone()),
            model: parts.model,
            registry: parts.registry,
            catalog: parts.catalog,
            selection: parts.selection,
            options: parts.options,
            questions: parts.questions,
            inner_events: parts.inner_events,
            inner_sender: parts.inner_sender,
            out,
            conversation: parts.history,
            models: parts.models,
            turns: 0,
            running: HashMap::new(),
        };
        let task = tokio::spawn(session.run(ops_rx));
        SessionHandle {
            ops: ops_tx,
            events,
            task,
        }
    }

    async fn run(mut self, mut ops: UnboundedReceiver<Op>) -> Vec<Message> {
        let _ = self.out.send(AgentEvent::SessionStarted {
            schema_version: EVENT_SCHEMA_VERSION,
            model: self.model.spec(),
            servers: self.registry.names(),
            tools: self.catalog.snapshot().tools().len(),
        });
        loop {
            tokio::select! {
                biased;
                Some(event) = self.inner_events.recv() => self.forward(event),
                op = ops.recv() => match op {
                    None | Some(Op::Shutdown) => break,
                    Some(Op::Prompt { content }) => {
                        if self.turn(content, &mut ops).await {
                            break;
                        }
                    }
                    Some(op) => self.idle_op(op).await,
                },
            }
        }
        self.questions.cancel_all();
        while let Ok(event) = self.inner_events.try_recv() {
            self.forward(event);
        }
        let _ = self.out.send(AgentEvent::SessionEnded {
            messages: self.conversation.clone(),
        });
        self.conversation
    }

    /// Passes an event on, after noting which calls run where and naming the call a
    /// server's question belongs to.
    fn forward(&mut self, event: AgentEvent) {
        forward_in_turn(&self.out, &self.catalog, &mut self.running, event);
    }

    fn reject(&self, message: String) {
        let _ = self.out.send(AgentEvent::OpRejected { message });
    }

    /// An op that arrives between turns.
    async fn idle_op(&mut self, op: Op) {
        match op {
            Op::Decide {
                request_id,
                decision,
            } => self.answer(&request_id, Answer::Decision(decision)),
            Op::Answer {
                request_id,
                action,
                content,
            } => self.answer(
                &request_id,
                Answer::Elicitation(elicitation_answer(action, content)),
            ),
            Op::Interrupt => {}
            Op::SetApprovalMode { mode } => self.options.approval_mode = mode,
            Op::SetSystemPrompt { text } => self.options.system_prompt = text,
            Op::SetModel { model } => self.set_model(model).await,
            Op::Clear => self.replace(Vec::new(), "conversation cleared".into()),
            Op::Compact => {
                let provider = self.model.provider();
                match crate::compaction::compact(provider.as_ref(), &self.conversation).await {
                    Ok((messages, note)) => self.replace(messages, note),
                    Err(message) => self.reject(message),
                }
            }
            Op::ReplaceConversation { messages } => {
                let note = format!("continuing a conversation of {} messages", messages.len());
                self.replace(messages, note);
            }
            Op::Prompt { .. } | Op::Shutdown => {}
        }
    }

    /// Makes `messages` the conversation and says so.
    fn replace(&mut self, messages: Vec<Message>, note: String) {
        self.conversation = messages.clone();
        let _ = self
            .out
            .send(AgentEvent::ConversationReplaced { messages, note });
    }

    fn answer(&self, request_id: &str, answer: Answer) {
        if let Err(message) = self.questions.answer(request_id, answer) {
            self.reject(message);
        }
    }

    async fn set_model(&mut self, spec: String) {
        let Some(models) = self.models.clone() else {
            self.reject("this front end cannot switch models".into());
            return;
        };
        match models.provider(&spec).await {
            Ok(provider) => {
                self.options.context_window = provider.context_window();
                self.model.set(spec.clone(), provider);
                let _ = self.out.send(AgentEvent::ModelChanged { model: spec });
            }
            // The source's error names the spec.
            Err(error) => self.reject(error),
        }
    }

    /// The user's message for `content`: text with attached resources, links and inline
    /// resources as the model reads them.
    async fn user_message(&self, content: Vec<InputBlock>) -> Result<Message, String> {
        let mut text = String::new();
        let mut context = String::new();
        for block in content {
            match block {
                InputBlock::Text { text: part } => {
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&part);
                }
                InputBlock::Image { mime_type, .. } => {
                    return Err(format!(
                        "an image ({mime_type}) was given, but images in prompts are not supported yet; describe it in text"
                    ));
                }
                InputBlock::ResourceLink { uri, name } => {
                    let path = uri.strip_prefix("file://").unwrap_or(&uri);
                    context.push_str(&format!(
                        "\n\nThe user refers to {}: {path}",
                        name.as_deref().unwrap_or("a resource")
                    ));
                }
                InputBlock::Resource {
                    uri,
                    text: Some(body),
                    ..
                } => {
                    context.push_str(&format!(
                        "\n\n<resource uri=\"{uri}\">\n{body}\n</resource>"
                    ));
                }
                InputBlock::Resource { uri, .. } => {
                    context.push_str(&format!("\n\nThe user refers to the resource {uri}"));
                }
            }
        }
        let (text, _) = self
            .registry
            .attach(&text)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Message::user(format!("{text}{context}")))
    }

    /// Runs one turn, taking ops as it goes; `true` when the session should end.
    async fn turn(&mut self, content: Vec<InputBlock>, ops: &mut UnboundedReceiver<Op>) -> bool {
        // A prompt always ends in `turn_ended`, even one that cannot start, so a front end
        // waiting on it (an editor's `session/prompt`) is always answered.
        let message = match self.user_message(content).await {
            Ok(message) => message,
            Err(text) => {
                let _ = self.out.send(AgentEvent::TurnEnded {
                    stop_reason: StopReason::Error,
                    text,
                    steps: 0,
                    usage: Usage::default(),
                });
                return false;
            }
        };
        self.turns += 1;
        let _ = self.out.send(AgentEvent::TurnStarted { turn: self.turns });
        let _ = self.inner_sender.send(AgentEvent::MessageAdded {
            message: message.clone(),
        });
        self.conversation.push(message);
        let provider = self.model.provider();
        let cancel = CancellationToken::new();
        let mut shutdown = false;
        let outcome = {
            let mut agent = Agent::new(
                provider.as_ref(),
                self.registry.as_ref(),
                self.catalog.clone(),
                self.selection.clone(),
                &self.approver,
                self.options.clone(),
            );
            let turn = agent.run_turn(&mut self.conversation, &self.inner_sender, &cancel);
            tokio::pin!(turn);
            loop {
                tokio::select! {
                    biased;
                    Some(event) = self.inner_events.recv() => {
                        forward_in_turn(&self.out, &self.catalog, &mut self.running, event);
                    }
                    outcome = &mut turn => break outcome,
                    op = ops.recv() => match op {
                        None | Some(Op::Shutdown) => {
                            shutdown = true;
                            cancel.cancel();
                            self.questions.cancel_all();
                        }
                        Some(Op::Interrupt) => {
                            cancel.cancel();
                            self.questions.cancel_all();
                        }
                        Some(Op::Decide { request_id, decision }) => {
                            if let Err(message) = self.questions.answer(&request_id, Answer::Decision(decision)) {
                                let _ = self.out.send(AgentEvent::OpRejected { message });
                            }
                        }
                        Some(Op::Answer { request_id, action, content }) => {
                            let answer = Answer::Elicitation(elicitation_answer(action, content));
                            if let Err(message) = self.questions.answer(&request_id, answer) {
                                let _ = self.out.send(AgentEvent::OpRejected { message });
                            }
                        }
                        Some(Op::SetApprovalMode { mode }) => self.options.approval_mode = mode,
                        // Read when the next turn starts.
                        Some(Op::SetSystemPrompt { text }) => self.options.system_prompt = text,
                        Some(
                            Op::Prompt { .. }
                            | Op::SetModel { .. }
                            | Op::Clear
                            | Op::Compact
                            | Op::ReplaceConversation { .. },
                        ) => {
                            let _ = self.out.send(AgentEvent::OpRejected {
                                message: "a turn is running; wait for turn_ended or interrupt it first".into(),
                            });
                        }
                    },
                }
            }
        };
        // A turn stopped during its tool calls leaves calls without results, which every
        // provider refuses on the next request: each gets a result saying what happened.
        if outcome.is_err() {
            let note = match &outcome {
                Err(AgentError::Cancelled) => {
                    "Error: cancelled: the user stopped this call before it finished; its outcome is unknown"
                }
                _ => "Error: not run: the model request that followed failed",
            };
            for message in answer_calls_left_open(&mut self.conversation, note) {
                let _ = self.inner_sender.send(AgentEvent::MessageAdded { message });
            }
        }
        // Everything the turn sent comes out before its end.
        while let Ok(event) = self.inner_events.try_recv() {
            self.forward(event);
        }
        self.running.clear();
        let (stop_reason, text, steps, usage) = match outcome {
            Ok(outcome) => (outcome.reason, outcome.text, outcome.steps, outcome.usage),
            Err(AgentError::Cancelled) => (
                StopReason::Cancelled,
                "cancelled".into(),
                0,
                Usage::default(),
            ),
            Err(AgentError::Model(error)) => {
                (StopReason::Error, error.to_string(), 0, Usage::default())
            }
        };
        let _ = self.out.send(AgentEvent::TurnEnded {
            stop_reason,
            text,
            steps,
            usage,
        });
        shutdown
    }
}

/// Passes an event on, after noting which calls run where and naming the call a server's
/// question belongs to; takes the parts a running turn leaves free.
fn forward_in_turn(
    out: &UnboundedSender<AgentEvent>,
    catalog: &ToolCatalog,
    running: &mut HashMap<String, Vec<String>>,
    mut event: AgentEvent,
) {
    match &mut event {
        AgentEvent::ToolCallStarted { id, name, .. } => {
            if let Some(tool) = catalog.snapshot().resolve(name) {
                running
                    .entry(tool.server.clone())
                    .or_default()
                    .push(id.clone());
            }
        }
        AgentEvent::ToolCallFinished { id, .. } => {
            for calls in running.values_mut() {
                calls.retain(|c| c != id);
            }
        }
        AgentEvent::ElicitationRequested {
            server, call_id, ..
        }
        | AgentEvent::SamplingRequested {
            server, call_id, ..
        } if call_id.is_none() => {
            *call_id = running.get(server.as_str()).and_then(|c| c.last()).cloned();
        }
        _ => {}
    }
    let _ = out.send(event);
}

/// Gives every tool call without a result the error result `content`, right after the
/// calls it answers (providers reject a conversation with a call left unanswered), and
/// returns the results added.
pub fn answer_calls_left_open(messages: &mut Vec<Message>, content: &str) -> Vec<Message> {
    let mut added = Vec::new();
    let mut index = 0;
    while index < messages.len() {
        if let Message::Assistant { tool_calls, .. } = &messages[index] {
            let calls = tool_calls.clone();
            let mut insert_at = index + 1;
            for call in calls {
                let answered = messages[index + 1..].iter().any(
                    |m| matches!(m, Message::Tool { tool_call_id, .. } if *tool_call_id == call.id),
                );
                if !answered {
                    let result = Message::Tool {
                        tool_call_id: call.id.clone(),
                        name: call.name.clone(),
                        content: content.into(),
                        images: Vec::new(),
                        is_error: true,
                    };
                    messages.insert(insert_at, result.clone());
                    added.push(result);
                    insert_at += 1;
                }
            }
        }
        index += 1;
    }
    added
}
