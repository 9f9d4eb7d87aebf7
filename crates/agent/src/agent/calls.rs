//! A turn's tool calls: each checked (a known tool, arguments that fit, the approval rules and
//! the person's answer), then run, and the result put the way the model reads it.

use super::*;

impl Agent<'_> {
    /// Validates and approves each call, in order (approval prompts are one at a time).
    pub(super) async fn check_calls(
        &self,
        snapshot: &Snapshot,
        calls: Vec<ToolCall>,
        events: &UnboundedSender<AgentEvent>,
    ) -> Vec<Checked> {
        let mut checked = Vec::with_capacity(calls.len());
        for call in calls {
            checked.push(self.check_call(snapshot, call, events).await);
        }
        checked
    }

    /// Why a call names no tool, with the likeliest fixes.
    pub(super) fn unknown_tool(&self, snapshot: &Snapshot, name: &str) -> String {
        let searchable = self.selection.mode() != SelectionMode::All;
        let suggestions = near_matches(name, snapshot.names());
        let hint = if !suggestions.is_empty() {
            format!("did you mean {}?", suggestions.join(", "))
        } else if searchable {
            let found: Vec<&str> = snapshot
                .search(name, 5)
                .iter()
                .map(|h| snapshot.tools()[h.index].qualified_name.as_str())
                .collect();
            if found.is_empty() {
                "find tools by what they do with search_tools (or mcp_query's \"query\")"
                    .to_string()
            } else {
                format!("similar tools: {}", found.join(", "))
            }
        } else {
            let names: Vec<&str> = snapshot.names().take(30).collect();
            format!("available tools: {}", names.join(", "))
        };
        format!("unknown tool \"{name}\"; {hint}")
    }

    pub(super) async fn check_call(
        &self,
        snapshot: &Snapshot,
        call: ToolCall,
        events: &UnboundedSender<AgentEvent>,
    ) -> Checked {
        let known_tool = snapshot.resolve(&call.name);
        let _ = events.send(AgentEvent::ToolCallPending {
            id: call.id.clone(),
            name: call.name.clone(),
            title: known_tool
                .map(crate::events::tool_title)
                .unwrap_or_else(|| call.name.clone()),
            kind: known_tool.map_or_else(
                || ToolKind::from_parts(&call.name, &Default::default()),
                ToolKind::of,
            ),
            arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
        });
        if call.name == overflow::READ_RESULT_TOOL
            && let Some(dir) = &self.options.saved_results
        {
            let arguments = serde_json::from_str::<Value>(&call.arguments).unwrap_or_default();
            return match overflow::read(dir, &arguments, self.options.max_result_chars) {
                Ok(text) => Checked::Answered { call, text },
                Err(message) => Checked::Refused { call, message },
            };
        }
        let known = call.name == SEARCH_TOOL
            || call.name == META_TOOL
            || snapshot.resolve(&call.name).is_some();
        if !known {
            return Checked::Refused {
                message: self.unknown_tool(snapshot, &call.name),
                call,
            };
        }
        let arguments = if call.arguments.trim().is_empty() {
            Value::Object(Default::default())
        } else {
            match serde_json::from_str::<Value>(&call.arguments) {
                Ok(value @ Value::Object(_)) => value,
                Ok(_) => {
                    return Checked::Refused {
                        message: "arguments must be a JSON object; send the tool's arguments as one object".into(),
                        call,
                    };
                }
                Err(e) => {
                    return Checked::Refused {
                        message: format!(
                            "arguments are not valid JSON ({e}); send the arguments again as one valid JSON object"
                        ),
                        call,
                    };
                }
            }
        };
        let (tool, arguments) = match self.selection.resolve(snapshot, &call.name, arguments) {
            Resolved::Tool { tool, arguments } => (*tool, arguments),
            Resolved::Answered { text, loaded } => {
                if !loaded.is_empty() {
                    let query = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .and_then(|v| v.get("query").and_then(Value::as_str).map(str::to_string));
                    let _ = events.send(AgentEvent::ToolsLoaded {
                        names: loaded,
                        reason: "search".into(),
                        query,
                    });
                }
                return Checked::Answered { call, text };
            }
            Resolved::Refused(message) => return Checked::Refused { call, message },
            Resolved::Unknown => {
                return Checked::Refused {
                    message: self.unknown_tool(snapshot, &call.name),
                    call,
                };
            }
        };
        if let Some(problems) = schema_problems(&tool.tool.input_schema, &arguments) {
            return Checked::Refused {
                message: format!(
                    "arguments do not match the tool's input schema: {problems}. Fix them and call again."
                ),
                call,
            };
        }
        let trusted = self.registry.trusts_hints(&tool.server);
        let decision = decide(
            self.options.approval_mode,
            &self.options.approval_rules,
            &tool.qualified_name,
            Hints {
                annotations: &tool.tool.annotations,
                trusted,
            },
            self.approver.interactive(),
        );
        // A tool that changed since it was pinned is asked about whatever the rules say, and
        // refused where nobody can be asked.
        let decision = match (decision, self.catalog.pin_change(&tool.qualified_name)) {
            (Decision::Deny(reason), _) => Decision::Deny(reason),
            (_, Some((_, change))) => {
                let _ = events.send(AgentEvent::Notice {
                    message: format!(
                        "{} changed since it was pinned: {change}",
                        tool.qualified_name
                    ),
                });
                if self.approver.interactive() && self.options.approval_mode != ApprovalMode::Never
                {
                    Decision::Ask
                } else {
                    Decision::Deny(format!(
                        "the tool changed since it was pinned ({change}); the user must review it and run `tether pins accept {}`",
                        tool.server
                    ))
                }
            }
            (decision, None) => decision,
        };
        match decision {
            Decision::Allow => Checked::Run {
                call,
                tool: Box::new(tool),
                arguments,
            },
            Decision::Deny(reason) => Checked::Refused {
                message: format!("not run: {reason}"),
                call,
            },
            Decision::Ask => {
                let request = ApprovalRequest {
                    id: call.id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                };
                if self.approver.approve(&request).await {
                    Checked::Run {
                        call,
                        tool: Box::new(tool),
                        arguments,
                    }
                } else {
                    Checked::Refused {
                        message: "not run: the user denied this call; do not retry it, continue without it or ask the user".into(),
                        call,
                    }
                }
            }
        }
    }

    pub(super) async fn execute(
        &self,
        checked: Checked,
        events: &UnboundedSender<AgentEvent>,
    ) -> (ToolCall, Message) {
        let started = Instant::now();
        // Events name the tool that runs: for `mcp_query`, the server's tool behind it.
        let mut shown = None;
        let mut content = Vec::new();
        let mut structured_content = None;
        let (call, text, images, is_error) = match checked {
            Checked::Refused { call, message } => {
                (call, format!("Error: {message}"), Vec::new(), true)
            }
            Checked::Answered { call, text } => {
                let _ = events.send(AgentEvent::ToolCallStarted {
                    id: call.id.clone(),
                    name: call.name.clone(),
                    arguments: serde_json::from_str(&call.arguments).unwrap_or(Value::Null),
                });
                (call, text, Vec::new(), false)
            }
            Checked::Run {
                call,
                tool,
                arguments,
            } => {
                shown = Some(tool.qualified_name.clone());
                let _ = events.send(AgentEvent::ToolCallStarted {
                    id: call.id.clone(),
                    name: tool.qualified_name.clone(),
                    arguments: arguments.clone(),
                });
                let (progress_tx, mut progress_rx) =
                    tokio::sync::mpsc::unbounded_channel::<tether_mcp::Progress>();
                let forward = async {
                    while let Some(progress) = progress_rx.recv().await {
                        let _ = events.send(AgentEvent::ToolProgress {
                            id: call.id.clone(),
                            name: tool.qualified_name.clone(),
                            progress: progress.progress,
                            total: progress.total,
                            message: progress.message,
                            task: progress.task,
                        });
                    }
                };
                let run = self.registry.call(
                    &tool.server,
                    &tool.tool.name,
                    arguments.as_object().cloned(),
                    Some(progress_tx),
                );
                // The forwarder ends when the call drops its sender, so every progress
                // event is emitted before the call's `ToolCallFinished`.
                let (outcome, ()) = tokio::join!(run, forward);
                match outcome {
                    Ok(result) => {
                        let (text, images) = self.model_view(&result);
                        content = result.content;
                        structured_content = result.structured_content;
                        (call, text, images, result.is_error)
                    }
                    Err(error) => (
                        call,
                        format!("Error: the call failed: {error}"),
                        Vec::new(),
                        true,
                    ),
                }
            }
        };
        let _ = events.send(AgentEvent::ToolCallFinished {
            id: call.id.clone(),
            name: shown.unwrap_or_else(|| call.name.clone()),
            is_error,
            result: text.clone(),
            content,
            structured_content,
            duration_ms: duration_ms(started.elapsed()),
        });
        let message = Message::Tool {
            tool_call_id: call.id.clone(),
            name: call.name.clone(),
            content: text,
            images,
            is_error,
        };
        (call, message)
    }

    pub(super) fn model_view(
        &self,
        result: &ToolResult,
    ) -> (String, Vec<tether_protocol::chat::ImageData>) {
        let images_ok = self.provider.accepts_tool_images() && !self.prompt_mode;
        let max = self.options.max_result_chars;
        let (text, images) = result_text(result, images_ok);
        if text.chars().count() <= max {
            return (text, images);
        }
        let saved = self
            .options
            .saved_results
            .as_deref()
            .and_then(|dir| overflow::save(dir, &text, max));
        (saved.unwrap_or_else(|| truncate(text, max)), images)
    }
}
