//! Calls: a tool call with its progress and cancellation, a direct call past rmcp for the
//! gateway's hot path, tasks, and requests forwarded with a client's input rounds.

#![allow(deprecated)]

use super::*;

impl ServerConnection {
    /// Calls a tool. A tool that reports failure is `Ok` with `is_error` set; `Err` means the
    /// call itself failed (timeout, protocol error, server gone). The server's progress
    /// notifications for this call go to `progress`; its questions go to our host.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        progress: Option<UnboundedSender<Progress>>,
    ) -> Result<ToolResult, McpError> {
        match self.call_tool_for(tool, arguments, progress, None).await? {
            Reply::Complete(result) => Ok(result),
            // Without a client to relay them to, rmcp answers the questions through our host.
            Reply::InputRequired(_) => Err(self.unanswered(&format!("tool \"{tool}\""))),
        }
    }

    /// [`call_tool`](Self::call_tool) on another client's behalf (the gateway's calls): its
    /// capabilities and log level go upstream with the call and, for a client that takes
    /// input-required results, its answers go up and the server's questions come back.
    pub async fn call_tool_for(
        &self,
        tool: &str,
        arguments: Option<Map<String, Value>>,
        progress: Option<UnboundedSender<Progress>>,
        forwarding: Option<&Forwarding>,
    ) -> Result<Reply<ToolResult>, McpError> {
        if !self.config.offers_tool(tool) {
            return Err(McpError::InvalidArguments(format!(
                "server \"{}\": tool \"{tool}\" is filtered out by allowedTools/disabledTools in the config",
                self.config.name
            )));
        }
        let mut params = CallToolRequestParams::new(tool.to_string());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        if let Some(round) = forwarding.and_then(|f| f.input.as_ref()) {
            params.input_responses = round.rmcp_responses();
            params.request_state = round.state.clone();
        }
        let operation = format!("tool \"{tool}\"");
        // Not through `request`: the call keeps its own deadline, so that when it passes the
        // server is told why, instead of a second timer dropping the call first.
        let session = self.live().await?;
        let as_task = self
            .task_tools
            .lock()
            .is_ok_and(|tools| tools.contains(tool));
        let peer = session.client.peer();
        let timeout = self.config.timeout;
        let outcome = if as_task {
            crate::tasks::call_as_task(peer, tool, params.arguments, timeout, progress).await
        } else {
            let outcome = self
                .call_with_progress(&session, &params, progress.clone(), forwarding)
                .await;
            // Where the tool's `execution` did not reach us (a plain JSON answer over HTTP),
            // the server's refusal says it: run it as a task, from now on too.
            let refused = match &outcome {
                Err(ServiceError::McpError(error)) => crate::tasks::needs_task(error),
                Ok(result) => crate::tasks::refused_without_task(result),
                Err(_) => false,
            };
            if refused {
                self.mark_task_tool(tool);
                crate::tasks::call_as_task(peer, tool, params.arguments, timeout, progress).await
            } else {
                outcome
            }
        };
        let result = self.outcome(&session, &operation, outcome).await?;
        if input_rounds::is_input_required(&result) {
            return Ok(Reply::InputRequired(InputRequired { result }));
        }
        // Already JSON: read it as ours directly, rather than copying it through `convert`.
        serde_json::from_value(result)
            .map(Reply::Complete)
            .map_err(|e| self.schema_mismatch(&operation, e))
    }

    /// Whether a call of `tool` may take the direct lane ([`call_direct`](Self::call_direct)):
    /// a stdio server that offers the tool (config filters) and declares no tasks, so that no
    /// answer of it needs rmcp's task handling.
    pub fn takes_direct_calls(&self, tool: &str) -> bool {
        matches!(self.config.transport, Transport::Stdio { .. })
            && self.config.offers_tool(tool)
            && !self.summary.has_capability("tasks")
            && !self
                .task_tools
                .lock()
                .map_or(true, |tools| tools.contains(tool))
    }

    /// Calls `tool` past rmcp: the arguments go up as the client sent them (a JSON object's
    /// text), the server's result comes back as it wrote it, undecoded. For the gateway's hot
    /// path; only where [`takes_direct_calls`](Self::takes_direct_calls) said so. The server's
    /// JSON-RPC errors, timeouts and exits are the same [`McpError`]s as
    /// [`call_tool_for`](Self::call_tool_for)'s. A modern server is asked to log at
    /// `log_level` (the client's, else the config's) and told `client_capabilities` (a
    /// 2026-07-28 client's, as it sent them, who then gets the server's questions in the
    /// result to answer itself; else ours). Progress the server reports goes to `progress`.
    pub async fn call_direct(
        &self,
        tool: &str,
        arguments: Option<&serde_json::value::RawValue>,
        log_level: Option<&str>,
        client_capabilities: Option<&serde_json::value::RawValue>,
        progress: Option<UnboundedSender<Progress>>,
    ) -> Result<DirectReply, McpError> {
        let session = self.live().await?;
        let Some(lane) = session.process.as_ref().map(|p| p.lane().clone()) else {
            return Ok(DirectReply::FullPath);
        };
        // The `_meta` entries, comma-separated, without braces.
        let mut meta = String::new();
        if self.summary.era == ProtocolEra::Modern {
            let (start, ours) = session.direct_meta.get_or_init(|| modern_meta(&session));
            let level = log_level.map(str::to_string).or_else(|| {
                self.log_level
                    .and_then(|l| serde_json::to_value(l).ok())
                    .and_then(|l| l.as_str().map(str::to_string))
            });
            let capabilities = client_capabilities.map_or(ours.as_str(), |c| c.get());
            meta.reserve(start.len() + capabilities.len() + 80);
            meta.push_str(start.strip_prefix('{').unwrap_or(start));
            meta.push_str(",\"io.modelcontextprotocol/clientCapabilities\":");
            meta.push_str(capabilities);
            if let Some(level) = level {
                meta.push_str(",\"io.modelcontextprotocol/logLevel\":");
                meta.push_str(&Value::String(level).to_string());
            }
        }
        let name = serde_json::to_string(tool).unwrap_or_default();
        // The call's id is its progress token; the lane routes its progress.
        let wants_progress = progress.is_some();
        let write = |line: &mut Vec<u8>, id: &str| {
            line.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":");
            line.extend_from_slice(id.as_bytes());
            line.extend_from_slice(b",\"method\":\"tools/call\",\"params\":{\"name\":");
            line.extend_from_slice(name.as_bytes());
            if let Some(arguments) = arguments {
                line.extend_from_slice(b",\"arguments\":");
                line.extend_from_slice(arguments.get().as_bytes());
            }
            if wants_progress {
                if !meta.is_empty() {
                    meta.push(',');
                }
                meta.push_str("\"progressToken\":");
                meta.push_str(id);
            }
            if !meta.is_empty() {
                line.extend_from_slice(b",\"_meta\":{");
                line.extend_from_slice(meta.as_bytes());
                line.push(b'}');
            }
            line.extend_from_slice(b"}}");
        };
        // Named only when something goes wrong: no allocation on the hot path otherwise.
        let operation = || format!("tool \"{tool}\"");
        let answer =
            match tokio::time::timeout(self.config.timeout, lane.call(write, progress)).await {
                Ok(Ok(line)) => line,
                Ok(Err(crate::direct_lane::LaneError::NotReading)) => {
                    return Err(McpError::Unreachable {
                        server: self.config.name.clone(),
                        detail: format!(
                            "{}: the server has not read the last 16 MB it was sent",
                            operation()
                        ),
                    });
                }
                Ok(Err(crate::direct_lane::LaneError::Closed)) => {
                    return Err(McpError::Unreachable {
                        server: self.config.name.clone(),
                        detail: format!("{}: {}", operation(), session.why_gone().await),
                    });
                }
                Err(_) => {
                    return Err(McpError::Timeout {
                        server: self.config.name.clone(),
                        operation: operation(),
                        after: self.config.timeout,
                        hint: None,
                    });
                }
            };
        #[derive(serde::Deserialize)]
        struct Answer<'a> {
            #[serde(borrow)]
            result: Option<&'a serde_json::value::RawValue>,
            error: Option<rmcp::model::ErrorData>,
        }
        #[derive(serde::Deserialize)]
        struct Kind<'a> {
            #[serde(rename = "resultType", borrow)]
            result_type: Option<std::borrow::Cow<'a, str>>,
        }
        let answer: Answer<'_> =
            serde_json::from_slice(&answer).map_err(|e| self.schema_mismatch(&operation(), e))?;
        match (answer.result, answer.error) {
            (_, Some(error)) => {
                self.outcome::<DirectReply>(
                    &session,
                    &operation(),
                    Err(ServiceError::McpError(error)),
                )
                .await
            }
            (Some(result), None) => {
                let kind: Kind<'_> = serde_json::from_str(result.get())
                    .map_err(|e| self.schema_mismatch(&operation(), e))?;
                // Questions for the client (2026-07-28): a modern client answers them itself in its
                // retry; for anyone else rmcp's rounds answer them, on the full path.
                if kind.result_type.is_some_and(|t| t != "complete")
                    && client_capabilities.is_none()
                {
                    return Ok(DirectReply::FullPath);
                }
                Ok(DirectReply::Result(result.to_owned()))
            }
            (None, None) => Err(self.schema_mismatch(
                &operation(),
                "its answer has neither \"result\" nor \"error\"",
            )),
        }
    }

    /// The error for an input-required result that reached a caller with no client to ask.
    pub(super) fn unanswered(&self, operation: &str) -> McpError {
        McpError::Unreachable {
            server: self.config.name.clone(),
            detail: format!("{operation}: the server still asks for input after our answers"),
        }
    }

    /// The server's tasks (`tasks/list`, MCP 2025-11-25), as it describes them: `taskId`,
    /// `status`, `statusMessage`, times. Empty when it declares no task listing.
    pub async fn list_tasks(&self) -> Result<Vec<Value>, McpError> {
        if !self.summary.has_capability("tasks.list") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let peer = session.client.peer();
        let outcome = crate::tasks::list(peer, self.config.timeout).await;
        self.outcome(&session, "tasks/list", outcome).await
    }

    /// One task's state as the server describes it (`tasks/get`, either era): `taskId`,
    /// `status`, `statusMessage`, and the result or error once it has ended.
    pub async fn task(&self, task_id: &str) -> Result<Value, McpError> {
        let session = self.live().await?;
        let peer = session.client.peer();
        let operation = format!("task \"{task_id}\"");
        let outcome = if self.summary.era == ProtocolEra::Modern {
            let get = peer.get_task(rmcp::model::GetTaskParams::new(task_id));
            crate::tasks::within(self.config.timeout, get)
                .await
                .map(|task| serde_json::to_value(task).unwrap_or_default())
        } else {
            crate::tasks::get(peer, task_id, self.config.timeout).await
        };
        self.outcome(&session, &operation, outcome).await
    }

    /// Remembers that `tool` runs only as a task, for the calls after this one.
    pub(super) fn mark_task_tool(&self, tool: &str) {
        if let Ok(mut tools) = self.task_tools.lock() {
            tools.insert(tool.to_string());
        }
    }

    /// Sends `tools/call` with a progress token we know, so the server's progress reaches
    /// the caller. Dropping the future cancels the call on the server.
    pub(super) async fn call_with_progress(
        &self,
        session: &Session,
        params: &CallToolRequestParams,
        progress: Option<UnboundedSender<Progress>>,
        forwarding: Option<&Forwarding>,
    ) -> Result<Value, ServiceError> {
        let peer = session.client.peer();
        let task_progress = progress.clone();
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
        let options = self.request_options(forwarding);
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let timed_out = || ServiceError::Timeout {
            timeout: self.config.timeout,
        };
        let sent =
            tokio::time::timeout_at(deadline, peer.send_request_with_option(request, options));
        let handle = sent.await.map_err(|_| timed_out())??;
        let mut guard = InFlight {
            peer: peer.clone(),
            id: Some(handle.id.clone()),
            token: token_key(&handle.progress_token),
            routes: self.progress.clone(),
            cancellations: self.cancellations.clone(),
            reason: "cancelled by the user".into(),
        };
        if let (Some(sender), Ok(mut routes)) = (progress, self.progress.lock()) {
            routes.insert(guard.token.clone(), ProgressRoute { sender, last: None });
        }
        // A question of the server's to a person pauses this deadline (person_wait).
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let Ok(result) = self.pauses.limit(remaining, handle.await_response()).await else {
            guard.reason = format!(
                "timed out after {} (the client's limit)",
                crate::error::fmt_duration(self.config.timeout)
            );
            return Err(timed_out());
        };
        guard.id = None;
        // Serialising rmcp's own types cannot fail (string keys only); `Null` would then
        // surface as a schema mismatch in `convert`.
        fn to_value(value: &impl Serialize) -> Value {
            serde_json::to_value(value).unwrap_or_default()
        }
        match result? {
            ServerResult::CallToolResult(result) => Ok(to_value(&result)),
            // A modern server made the call a task (the tasks extension we declare).
            ServerResult::CreateTaskResult(created) => {
                let host = (self.host.as_ref(), self.config.name.as_str());
                crate::tasks::follow(peer, host, created.task, self.config.timeout, task_progress)
                    .await
            }
            // The questions are for the client we forward for: it answers and retries.
            ServerResult::InputRequiredResult(questions)
                if forwarding.is_some_and(|f| f.input.is_some()) =>
            {
                Ok(to_value(&questions))
            }
            // A modern server needs input first: rmcp's helper runs the rounds through our
            // handler and re-issues the call, which MRTR makes safe (the server is stateless).
            ServerResult::InputRequiredResult(_) => {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                let rounds = self
                    .pauses
                    .limit(remaining, session.client.call_tool(params.clone()));
                Ok(to_value(&rounds.await.map_err(|_| timed_out())??))
            }
            other => Ok(to_value(&other)),
        }
    }

    /// Options for a request to this server: the forwarded trace context and, on a modern one,
    /// the `_meta` that 2026-07-28 carries per request (it has no `logging/setLevel`), with the
    /// forwarded client's capabilities and log level in place of ours.
    pub(super) fn request_options(&self, forwarding: Option<&Forwarding>) -> PeerRequestOptions {
        let options = PeerRequestOptions::no_options();
        let modern = self.summary.era == ProtocolEra::Modern;
        let mut meta = forwarding.and_then(|f| f.meta(modern)).unwrap_or_default();
        if modern
            && forwarding.is_none_or(|f| f.log_level.is_none())
            && let Some(level) = self.log_level
        {
            meta.set_log_level(level);
        }
        if meta.is_empty() {
            options
        } else {
            options.with_meta(meta)
        }
    }

    /// Sends a prompt or resource request on another client's behalf, under the server's
    /// timeout, and returns the result's JSON as the server sent it (an input-required result
    /// included).
    pub(super) async fn forward(
        &self,
        session: &Session,
        operation: &str,
        request: ClientRequest,
        forwarding: &Forwarding,
    ) -> Result<Value, McpError> {
        let peer = session.client.peer();
        let options = self.request_options(Some(forwarding));
        let sent = async {
            peer.send_request_with_option(request, options)
                .await?
                .await_response()
                .await
        };
        let result = self.request(session, operation, sent).await?;
        Ok(serde_json::to_value(result).unwrap_or_default())
    }
}
