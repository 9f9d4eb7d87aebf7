//! The tool-call loop: send the conversation and the tools to the model, collect its tool
//! calls, check each (known tool, valid JSON, matches the schema, approved), run the checked
//! ones concurrently, append one result per call id in order, and repeat until the model
//! answers or the step limit is hit. Every failure of a single call goes back to the model as
//! an error result it can recover from; only the model itself failing ends the turn.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::{BoxFuture, join_all};
use serde::Serialize;
use serde_json::Value;
use tether_catalog::{
    ApprovalMode, ApprovalRules, Decision, Hints, META_TOOL, Resolved, SEARCH_TOOL, SelectionMode,
    Snapshot, ToolCatalog, ToolSelection, decide, schema_problems,
};
use tether_llm::{
    ChatRequest, ChatResponse, LlmError, Provider, ResponseBuilder, RetryPolicy, StreamEvent,
    ToolChoice,
};
use tether_mcp::error::near_matches;
use tether_protocol::chat::{Message, ToolCall, ToolDefinition, Usage};
use tether_protocol::{QualifiedTool, ToolResult};
use tokio::sync::mpsc::UnboundedSender;
use tokio_util::sync::CancellationToken;

use crate::events::{AgentEvent, StopReason, ToolKind};
use crate::overflow;
use crate::prompt_mode::{parse_tool_calls, render_history};
use crate::results::{DEFAULT_MAX_RESULT_CHARS, result_text, truncate};
use crate::servers::ToolServers;
use crate::system_prompt::{SystemPrompt, compose};

mod calls;

/// The longest a turn waits for a still-starting server whose tools fit its request: a
/// Python server on two busy cores takes about three seconds; one that takes longer joins
/// later, as any server does.
pub const LATE_SERVER_WAIT: Duration = Duration::from_secs(10);

/// How near the top of the ranking a still-starting server's pinned tool must come for a
/// turn to wait for the server: the few tools a small model's pre-selection offers.
pub const LATE_SERVER_LOOKAHEAD: usize = 3;

/// How tools are offered to the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolMode {
    /// Native tool calling, switching to prompt-based when the provider rejects tools.
    #[default]
    Auto,
    /// Native tool calling only.
    Native,
    /// Tools described in the system prompt, calls parsed from JSON in the text.
    Prompt,
}

/// Settings of the loop.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Most model calls in one turn.
    pub max_steps: usize,
    /// Native or prompt-based tools.
    pub tool_mode: ToolMode,
    /// `--approve`.
    pub approval_mode: ApprovalMode,
    /// Rules from the config.
    pub approval_rules: ApprovalRules,
    /// The user's own system prompt, added after ours.
    pub system_prompt: Option<String>,
    /// Cap on one tool result's text.
    pub max_result_chars: usize,
    /// Retries of transient model failures.
    pub retry: RetryPolicy,
    /// How many identical failing calls stop the loop.
    pub max_identical_failures: usize,
    /// The model's context window in tokens, when known: near it, old tool results are
    /// shortened instead of the request failing.
    pub context_window: Option<usize>,
    /// Where results longer than `max_result_chars` are saved whole, for the model to page
    /// through with `read_result`; `None` cuts them with no way back.
    pub saved_results: Option<std::path::PathBuf>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            max_steps: 20,
            tool_mode: ToolMode::Auto,
            approval_mode: ApprovalMode::Ask,
            approval_rules: ApprovalRules::default(),
            system_prompt: None,
            max_result_chars: DEFAULT_MAX_RESULT_CHARS,
            retry: RetryPolicy::default(),
            max_identical_failures: 3,
            context_window: None,
            saved_results: None,
        }
    }
}

/// A call waiting for the user's approval.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    /// Call id.
    pub id: String,
    /// The tool.
    pub tool: QualifiedTool,
    /// Arguments.
    pub arguments: Value,
}

/// Asks the user about calls that need approval.
pub trait Approver: Send + Sync {
    /// Whether anyone can be asked; if not, calls needing approval are denied.
    fn interactive(&self) -> bool;
    /// Asks; `true` runs the call.
    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, bool>;
}

/// The approver of non-interactive runs: nobody to ask.
pub struct NonInteractive;

impl Approver for NonInteractive {
    fn interactive(&self) -> bool {
        false
    }
    fn approve<'a>(&'a self, _request: &'a ApprovalRequest) -> BoxFuture<'a, bool> {
        Box::pin(async { false })
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnOutcome {
    /// The final answer (or the stop message).
    pub text: String,
    /// Model calls made.
    pub steps: usize,
    /// Tokens used over the turn.
    pub usage: Usage,
    /// Why the loop stopped early, if it did.
    pub stopped: Option<String>,
    /// Why the turn ended.
    pub reason: StopReason,
}

/// Why a turn failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AgentError {
    /// The model could not be reached or refused, after retries.
    #[error(transparent)]
    Model(#[from] LlmError),
    /// The user cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// The loop over one provider and one set of servers.
pub struct Agent<'a> {
    provider: &'a dyn Provider,
    registry: &'a dyn ToolServers,
    catalog: ToolCatalog,
    selection: Arc<dyn ToolSelection>,
    approver: &'a dyn Approver,
    options: AgentOptions,
    prompt_mode: bool,
}

/// One call after the checks: runnable, answered by the tool selection (a search), or
/// already answered with an error.
enum Checked {
    Run {
        call: ToolCall,
        tool: Box<QualifiedTool>,
        arguments: Value,
    },
    Answered {
        call: ToolCall,
        text: String,
    },
    Refused {
        call: ToolCall,
        message: String,
    },
}

impl<'a> Agent<'a> {
    /// A loop over `registry`'s servers, offering the tools of `catalog` as `selection`
    /// decides. The catalogue and the selection are shared handles: a chat keeps them across
    /// turns, so tools loaded by a search and a refreshed catalogue outlive one turn.
    pub fn new(
        provider: &'a dyn Provider,
        registry: &'a dyn ToolServers,
        catalog: ToolCatalog,
        selection: Arc<dyn ToolSelection>,
        approver: &'a dyn Approver,
        options: AgentOptions,
    ) -> Agent<'a> {
        let prompt_mode = options.tool_mode == ToolMode::Prompt;
        Agent {
            provider,
            registry,
            catalog,
            selection,
            approver,
            options,
            prompt_mode,
        }
    }

    /// Whether tools are currently offered through the prompt.
    pub fn prompt_mode(&self) -> bool {
        self.prompt_mode
    }

    /// Re-lists the servers that announced a change, so the next model request (of this turn
    /// and of every later one sharing the catalogue) sees their current tools.
    async fn refresh_tools(&mut self, events: &UnboundedSender<AgentEvent>) {
        let Some(refresh) = self.registry.refresh(&self.catalog).await else {
            return;
        };
        for report in self.catalog.take_pin_reports() {
            for message in report.lines() {
                let _ = events.send(AgentEvent::Notice { message });
            }
        }
        for error in refresh.errors {
            let _ = events.send(AgentEvent::Notice {
                message: format!("could not refresh tools: {error}"),
            });
        }
        if refresh.servers.is_empty() {
            return;
        }
        let _ = events.send(AgentEvent::Notice {
            message: format!(
                "tools changed on {}; {} now in the catalogue",
                refresh.servers.join(", "),
                self.catalog.snapshot().tools().len()
            ),
        });
    }

    /// Before the tools are chosen for `request`: waits for the servers still starting whose
    /// tools, as pinned in an earlier run, rank among the first [`LATE_SERVER_LOOKAHEAD`] for
    /// it, at most [`LATE_SERVER_WAIT`] and until the turn is cancelled, saying so. A server
    /// that starts slowly (an interpreter loading) would otherwise join after the request it
    /// was needed for; one whose tools do not fit costs nothing.
    async fn wait_for_fitting_servers(
        &self,
        request: &str,
        events: &UnboundedSender<AgentEvent>,
        cancel: &CancellationToken,
    ) {
        let starting = self.registry.starting();
        if starting.is_empty() {
            return;
        }
        let fitting = self
            .catalog
            .late_servers_fitting(&starting, request, LATE_SERVER_LOOKAHEAD);
        if fitting.is_empty() {
            return;
        }
        for (server, tool) in &fitting {
            let _ = events.send(AgentEvent::Notice {
                message: format!(
                    "waiting for server \"{server}\" to finish starting: its tool \"{tool}\" fits this request"
                ),
            });
        }
        let names: Vec<String> = fitting.into_iter().map(|(server, _)| server).collect();
        tokio::select! {
            () = self.registry.wait_started(&names, LATE_SERVER_WAIT) => {}
            () = cancel.cancelled() => {}
        }
    }

    /// Warns near the context window and shortens old tool results to stay under it.
    fn fit_context(
        &self,
        conversation: &mut [Message],
        offered: &[ToolDefinition],
        events: &UnboundedSender<AgentEvent>,
    ) {
        let Some(window) = self.options.context_window else {
            return;
        };
        let fixed = crate::context::estimate_text(&self.system_prompt_with(offered))
            + crate::context::estimate(&[], offered);
        let used = crate::context::estimate(conversation, &[]) + fixed;
        if used * 10 < window * 8 {
            return;
        }
        let trimmed = crate::context::trim_tool_results(conversation, window * 7 / 10, fixed);
        let now = crate::context::estimate(conversation, &[]) + fixed;
        let _ = events.send(AgentEvent::Notice {
            message: format!(
                "the conversation is near the model's context window (about {used} of {window} tokens){}",
                if trimmed > 0 {
                    format!("; shortened {trimmed} older tool results, now about {now}")
                } else {
                    "; /compact would free space".into()
                }
            ),
        });
    }

    /// The system prompt with the tools currently offered.
    pub fn system_prompt(&self) -> String {
        let offered = self.selection.offer(&self.catalog.snapshot());
        self.system_prompt_with(&offered)
    }

    /// The system prompt: a usage guide, the instructions of the servers the model can reach
    /// this turn (`system_prompt::compose`), the user's own prompt, and in prompt mode the
    /// tool list.
    fn system_prompt_with(&self, offered: &[ToolDefinition]) -> String {
        let reachable = self.selection.reachable_servers(&self.catalog.snapshot());
        let speaking: Vec<(String, String)> = self
            .registry
            .instructions()
            .into_iter()
            // Changed since pinned: withheld until the user accepts them.
            .filter(|(server, _)| !self.catalog.instructions_withheld(server))
            .filter(|(server, _)| reachable.as_ref().is_none_or(|r| r.contains(server)))
            .collect();
        compose(&SystemPrompt {
            instructions: speaking,
            context_window: self.options.context_window,
            own: self.options.system_prompt.as_deref(),
            offered,
            prompt_mode: self.prompt_mode,
        })
    }

    fn request(&self, conversation: &[Message], offered: Vec<ToolDefinition>) -> ChatRequest {
        let mut messages = vec![Message::system(self.system_prompt_with(&offered))];
        if self.prompt_mode {
            messages.extend(render_history(conversation));
        } else {
            messages.extend(conversation.iter().cloned());
        }
        let tools = if self.prompt_mode {
            Vec::new()
        } else {
            offered
        };
        ChatRequest {
            messages,
            tools,
            tool_choice: ToolChoice::Auto,
            max_tokens: None,
            temperature: None,
        }
    }

    /// Runs one turn: `conversation` must end with the user's message; assistant and tool
    /// messages are appended as they happen, so nothing is lost if the turn fails.
    pub async fn run_turn(
        &mut self,
        conversation: &mut Vec<Message>,
        events: &UnboundedSender<AgentEvent>,
        cancel: &CancellationToken,
    ) -> Result<TurnOutcome, AgentError> {
        let mut usage = Usage::default();
        let mut failures: HashMap<(String, String), usize> = HashMap::new();
        let mut step = 0;
        if let Some(Message::User { content }) = conversation.last() {
            self.wait_for_fitting_servers(content, events, cancel).await;
        }
        self.refresh_tools(events).await;
        if let Some(Message::User { content }) = conversation.last() {
            let loaded = self.selection.start_turn(&self.catalog.snapshot(), content);
            if !loaded.is_empty() {
                let _ = events.send(AgentEvent::ToolsLoaded {
                    names: loaded,
                    reason: "preselected".into(),
                    query: None,
                });
            }
        }
        while step < self.options.max_steps {
            self.refresh_tools(events).await;
            for (changed, update) in self.registry.resource_updates().await {
                let _ = events.send(AgentEvent::Notice {
                    message: format!(
                        "resource {} on server \"{}\" changed; re-read it",
                        changed.uri, changed.server
                    ),
                });
                record(conversation, update, events);
            }
            let snapshot = self.catalog.snapshot();
            let mut offered = self.selection.offer(&snapshot);
            if self.options.saved_results.is_some() && overflow::any_saved(conversation) {
                offered.push(overflow::definition());
            }
            self.fit_context(conversation, &offered, events);
            let request = self.request(conversation, offered);
            let response = match self.call_model(&request, events, cancel).await {
                Ok(response) => response,
                Err(AgentError::Model(LlmError::ToolsUnsupported { message, .. }))
                    if self.options.tool_mode == ToolMode::Auto && !self.prompt_mode =>
                {
                    self.prompt_mode = true;
                    let _ = events.send(AgentEvent::Notice {
                        message: format!(
                            "{} does not accept native tools ({message}); switching to prompt-based tool calling",
                            self.provider.name()
                        ),
                    });
                    continue;
                }
                Err(error) => return Err(error),
            };
            step += 1;
            usage += response.usage;
            let _ = events.send(AgentEvent::Usage {
                usage: response.usage,
            });

            let calls = if self.prompt_mode {
                parse_tool_calls(&response.text)
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| ToolCall {
                        id: format!("call_{step}_{i}"),
                        name: c.name,
                        arguments: c.arguments.to_string(),
                    })
                    .collect()
            } else {
                response.tool_calls.clone()
            };
            if calls.is_empty() {
                if self.prompt_mode {
                    // Prompt mode holds text back until it is known not to be a tool call.
                    let _ = events.send(AgentEvent::TextDelta {
                        text: response.text.clone(),
                    });
                }
                record(
                    conversation,
                    Message::assistant(response.text.clone()),
                    events,
                );
                let reason = match &response.stop_reason {
                    tether_llm::StopReason::MaxTokens => StopReason::MaxTokens,
                    tether_llm::StopReason::Other(why)
                        if why.contains("refusal") || why.contains("content_filter") =>
                    {
                        StopReason::Refusal
                    }
                    _ => StopReason::EndTurn,
                };
                return Ok(TurnOutcome {
                    text: response.text,
                    steps: step,
                    usage,
                    stopped: None,
                    reason,
                });
            }
            record(
                conversation,
                Message::Assistant {
                    content: response.text.clone(),
                    tool_calls: calls.clone(),
                },
                events,
            );

            // A person may be asked about a call here: an interrupt must not wait for them.
            let checked = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(AgentError::Cancelled),
                checked = self.check_calls(&snapshot, calls, events) => checked,
            };
            let results = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(AgentError::Cancelled),
                results = join_all(checked.into_iter().map(|c| self.execute(c, events))) => results,
            };
            let mut repeated: Option<String> = None;
            for (call, message) in results {
                if let Message::Tool {
                    is_error: true,
                    content,
                    name,
                    ..
                } = &message
                {
                    let loaded = self.selection.after_failed_call(&snapshot, name);
                    if !loaded.is_empty() {
                        let _ = events.send(AgentEvent::ToolsLoaded {
                            names: loaded,
                            reason: "after a failed call".into(),
                            query: None,
                        });
                    }
                    let key = (call.name.clone(), canonical(&call.arguments));
                    let count = failures.entry(key).or_insert(0);
                    *count += 1;
                    if *count >= self.options.max_identical_failures {
                        repeated = Some(format!(
                            "Stopped: the model called {} with the same arguments {} times and it failed each time. Last error: {}",
                            call.name,
                            count,
                            content.lines().next().unwrap_or_default()
                        ));
                    }
                }
                record(conversation, message, events);
            }
            if let Some(reason) = repeated {
                return Ok(TurnOutcome {
                    text: reason.clone(),
                    steps: step,
                    usage,
                    stopped: Some(reason),
                    reason: StopReason::RepeatedFailure,
                });
            }
        }
        let reason = format!(
            "Stopped after {} model calls (--max-steps {}) while the model was still calling tools; raise --max-steps or ask a narrower question.",
            step, self.options.max_steps
        );
        Ok(TurnOutcome {
            text: reason.clone(),
            steps: step,
            usage,
            stopped: Some(reason),
            reason: StopReason::MaxSteps,
        })
    }

    /// One model call with retries of transient failures, streaming text as it comes.
    async fn call_model(
        &self,
        request: &ChatRequest,
        events: &UnboundedSender<AgentEvent>,
        cancel: &CancellationToken,
    ) -> Result<ChatResponse, AgentError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut streamed_anything = false;
            let outcome = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(AgentError::Cancelled),
                outcome = async {
                    let mut stream = self.provider.stream(request).await?;
                    let mut builder = ResponseBuilder::default();
                    while let Some(event) = stream.next().await {
                        let event = event?;
                        if let StreamEvent::TextDelta(text) = &event
                            && !self.prompt_mode
                        {
                            streamed_anything = true;
                            let _ = events.send(AgentEvent::TextDelta { text: text.clone() });
                        }
                        builder.push(&event);
                    }
                    Ok::<_, LlmError>(builder.finish())
                } => outcome,
            };
            match outcome {
                Ok(response) => return Ok(response),
                Err(error) => {
                    let delay = if streamed_anything {
                        None
                    } else {
                        self.options.retry.delay(attempt, &error)
                    };
                    let Some(delay) = delay else {
                        return Err(AgentError::Model(error));
                    };
                    let _ = events.send(AgentEvent::Notice {
                        message: format!(
                            "{error}; retrying in {:.1}s (attempt {} of {})",
                            delay.as_secs_f64(),
                            attempt + 1,
                            self.options.retry.max_retries + 1
                        ),
                    });
                    tokio::select! {
                        _ = cancel.cancelled() => return Err(AgentError::Cancelled),
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }
}

/// Adds a message to the conversation and tells the front end, which may persist it.
fn record(conversation: &mut Vec<Message>, message: Message, events: &UnboundedSender<AgentEvent>) {
    let _ = events.send(AgentEvent::MessageAdded {
        message: message.clone(),
    });
    conversation.push(message);
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Arguments normalised so that key order and spacing do not hide a repeat.
fn canonical(arguments: &str) -> String {
    serde_json::from_str::<Value>(arguments)
        .map(|v| v.to_string())
        .unwrap_or_else(|_| arguments.trim().to_string())
}
