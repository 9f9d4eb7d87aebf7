//! The one adapter that puts any [`McpService`] on the wire through rmcp: [`ServedService`],
//! rmcp's `ServerHandler` over it, and [`serve_stdio`]; wire conversions between rmcp's types
//! and ours go through their JSON.

#![allow(deprecated)]

use super::*;

/// Any [`McpService`] as an rmcp server.
pub struct ServedService<S: ?Sized> {
    service: Arc<S>,
    /// Where an HTTP session enters itself once its client is initialized, for the edge's
    /// hot path (`None` on stdio).
    directory: Option<Arc<dyn SessionListing<S>>>,
    /// Calls running as tasks (2026-07-28 tasks extension), shared by every session of the
    /// service so a poll may arrive on any of them.
    tasks: TaskManager,
}

impl<S: McpService + ?Sized> ServedService<S> {
    /// Wraps `service`.
    pub fn new(service: Arc<S>) -> ServedService<S> {
        ServedService {
            service,
            directory: None,
            tasks: TaskManager::new(),
        }
    }

    /// This service, entered in `directory` when its session's client is initialized.
    pub(crate) fn listed_in(mut self, directory: Arc<dyn SessionListing<S>>) -> ServedService<S> {
        self.directory = Some(directory);
        self
    }
}

impl<S: ?Sized> Clone for ServedService<S> {
    fn clone(&self) -> Self {
        ServedService {
            service: self.service.clone(),
            directory: self.directory.clone(),
            tasks: self.tasks.clone(),
        }
    }
}

/// Serves `service` on stdin/stdout until the client goes away.
pub async fn serve_stdio<S: McpService + ?Sized>(service: Arc<S>) -> Result<(), String> {
    let name = service.info().name;
    let (input, output) = stdio_streams();
    let running = ServedService::new(service)
        .serve((input, output))
        .await
        .map_err(|e| format!("{name}: handshake failed: {e}"))?;
    running
        .waiting()
        .await
        .map_err(|e| format!("{name}: {e}"))?;
    Ok(())
}

/// Our stdin and stdout as pipes the reactor watches, when they are pipes (as under a host
/// that spawned us): tokio's own stdin and stdout hand every read and write to a blocking
/// thread, which cost more than the rest of a tool call. Anything else (a terminal, a file)
/// keeps tokio's.
fn stdio_streams() -> (
    Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    Box<dyn tokio::io::AsyncWrite + Send + Unpin>,
) {
    use std::os::fd::AsFd;
    use tokio::net::unix::pipe;
    let input = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| pipe::Receiver::from_owned_fd(fd).ok());
    let output = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .ok()
        .and_then(|fd| pipe::Sender::from_owned_fd(fd).ok());
    (
        match input {
            Some(pipe) => Box::new(pipe),
            None => Box::new(tokio::io::stdin()),
        },
        match output {
            Some(pipe) => Box::new(pipe),
            None => Box::new(tokio::io::stdout()),
        },
    )
}

impl<S: McpService + ?Sized> ServedService<S> {
    /// Relays the service's changes to the client of `peer` until either side goes.
    fn relay_changes(&self, peer: rmcp::Peer<RoleServer>) {
        let Some(mut changes) = self.service.changes() else {
            return;
        };
        let service = self.service.clone();
        tokio::spawn(async move {
            loop {
                let change = match changes.recv().await {
                    Ok(change) => change,
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => break,
                };
                if peer.is_transport_closed() {
                    break;
                }
                if !service.wants(&change) {
                    continue;
                }
                let sent = match change {
                    ServiceChange::Tools => peer.notify_tool_list_changed().await,
                    ServiceChange::Resources => peer.notify_resource_list_changed().await,
                    ServiceChange::Prompts => peer.notify_prompt_list_changed().await,
                    ServiceChange::ResourceUpdated(uri) => match wire(json!({"uri": uri})) {
                        Ok(param) => peer.notify_resource_updated(param).await,
                        Err(_) => Ok(()),
                    },
                    ServiceChange::Log {
                        level,
                        logger,
                        data,
                    } => match wire(strip_nulls(
                        json!({"level": level, "logger": logger, "data": data}),
                    )) {
                        Ok(param) => peer.notify_logging_message(param).await,
                        Err(_) => Ok(()),
                    },
                };
                if sent.is_err() {
                    break;
                }
            }
        });
    }
}

impl<S: McpService + ?Sized> ServerHandler for ServedService<S> {
    fn get_info(&self) -> ServerInfo {
        let info = self.service.info();
        let list_changed = info.list_changed;
        let mut capabilities = json!({"tools": {"listChanged": list_changed}});
        if info.resources {
            capabilities["resources"] =
                json!({"listChanged": list_changed, "subscribe": info.subscribe});
        }
        if info.prompts {
            capabilities["prompts"] = json!({"listChanged": list_changed});
        }
        if info.completions {
            capabilities["completions"] = json!({});
        }
        if info.logging {
            capabilities["logging"] = json!({});
        }
        if info.tasks {
            capabilities["extensions"] = json!({ (rmcp::model::TASKS_EXTENSION_ID): {} });
        }
        let mut value = json!({
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "serverInfo": {"name": info.name, "version": info.version},
        });
        if let Some(instructions) = info.instructions {
            value["instructions"] = Value::String(instructions);
        }
        // Built from a literal whose shape rmcp accepts; the default is a safe fallback.
        serde_json::from_value(value).unwrap_or_default()
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Some(directory) = &self.directory
            && let Some(parts) = context.extensions.get::<http::request::Parts>()
            && let Some(id) = parts
                .headers
                .get(crate::sealed_sessions::SESSION_HEADER)
                .and_then(|v| v.to_str().ok())
        {
            let capabilities = context
                .peer
                .peer_info()
                .and_then(|info| serde_json::to_value(&info.capabilities).ok())
                .unwrap_or(Value::Null);
            directory.register(id, &self.service, capabilities);
        }
        self.relay_changes(context.peer);
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        self.service.info().list_changed.then(|| requested.clone())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let Some(mut changes) = self.service.changes() else {
            context.cancelled().await;
            return Ok(());
        };
        let sink = context.sink().clone();
        loop {
            let change = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                change = changes.recv() => change,
            };
            let sent = match change {
                Ok(ServiceChange::Tools) => sink.notify_tool_list_changed().await,
                Ok(ServiceChange::Resources) => sink.notify_resource_list_changed().await,
                Ok(ServiceChange::Prompts) => sink.notify_prompt_list_changed().await,
                Ok(ServiceChange::ResourceUpdated(uri)) => sink.notify_resource_updated(uri).await,
                Ok(ServiceChange::Log { .. }) | Err(broadcast::error::RecvError::Lagged(_)) => {
                    Ok(())
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            };
            if sent.is_err() {
                return Ok(());
            }
        }
    }

    async fn subscribe(
        &self,
        request: rmcp::model::SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let caller = Caller::new(context, None, None);
        self.service
            .subscribe(&request.uri, &caller)
            .await
            .map_err(ServeError::into_error_data)
    }

    async fn unsubscribe(
        &self,
        request: rmcp::model::UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.service
            .unsubscribe(&request.uri)
            .await
            .map_err(ServeError::into_error_data)
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let level = serde_json::to_value(request.level).unwrap_or_default();
        self.service.set_log_level(level.as_str().unwrap_or("info"));
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let caller = Caller::new(context, None, None);
        let tools = self
            .service
            .list_tools(&caller)
            .await
            .map_err(ServeError::into_error_data)?;
        result(json!({ "tools": tools }))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut caller = Caller::new(context, request.input_responses, request.request_state);
        let arguments = request.arguments.unwrap_or_default();
        // The service's answer first: it is cheap, while the client's capabilities are decoded
        // from the request's `_meta` each time they are asked for.
        if self.service.runs_as_task(&request.name, &caller)
            && caller
                .context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks())
        {
            // The task outlives the request that created it: only `tasks/cancel` stops it.
            caller.context.ct = tokio_util::sync::CancellationToken::new();
            let service = self.service.clone();
            let name = request.name.to_string();
            let task = self.tasks.spawn(TaskOptions::new(), move |task| {
                caller.task = Some(task.clone());
                Box::pin(async move {
                    tokio::select! {
                        result = service.call_tool(&name, arguments, &caller) => {
                            let result = result.map_err(ServeError::into_error_data)?;
                            Ok(self::result(to_json(result))?)
                        }
                        // Dropping the call cancels it upstream, as for any dropped call.
                        () = task.cancelled() => Err(TaskExit::Cancelled),
                    }
                })
            });
            return Ok(CallToolResponse::Task(CreateTaskResult::new(task)));
        }
        let answer = self
            .service
            .call_tool(&request.name, arguments, &caller)
            .await;
        with_input(
            answer,
            |done| Ok(CallToolResponse::Complete(self::result(to_json(done))?)),
            CallToolResponse::InputRequired,
        )
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks
            .update_task(&request.task_id, request.input_responses)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = Caller::new(context, None, None);
        let resources = self
            .service
            .list_resources(&caller)
            .await
            .map_err(ServeError::into_error_data)?;
        result(json!({ "resources": resources }))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let caller = Caller::new(context, None, None);
        let templates = self
            .service
            .list_resource_templates(&caller)
            .await
            .map_err(ServeError::into_error_data)?;
        result(json!({ "resourceTemplates": templates }))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = Caller::new(context, request.input_responses, request.request_state);
        let answer = self.service.read_resource(&request.uri, &caller).await;
        with_input(
            answer,
            |contents| {
                Ok(ReadResourceResponse::Complete(result(
                    json!({ "contents": contents }),
                )?))
            },
            ReadResourceResponse::InputRequired,
        )
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let caller = Caller::new(context, None, None);
        let prompts = self
            .service
            .list_prompts(&caller)
            .await
            .map_err(ServeError::into_error_data)?;
        result(json!({ "prompts": prompts }))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let caller = Caller::new(context, request.input_responses, request.request_state);
        let arguments = request.arguments.unwrap_or_default();
        let answer = self
            .service
            .get_prompt(&request.name, arguments, &caller)
            .await;
        with_input(
            answer,
            |prompt| Ok(GetPromptResponse::Complete(self::result(to_json(prompt))?)),
            GetPromptResponse::InputRequired,
        )
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let caller = Caller::new(context, None, None);
        let value = serde_json::to_value(&request).unwrap_or_default();
        let reference = &value["ref"];
        let name = reference
            .get("name")
            .or_else(|| reference.get("uri"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let target = if reference["type"] == "ref/resource" {
            Completion::Template(name)
        } else {
            Completion::Prompt(name)
        };
        let argument = value["argument"]["name"].as_str().unwrap_or_default();
        let typed = value["argument"]["value"].as_str().unwrap_or_default();
        let context: std::collections::HashMap<String, String> = value["context"]["arguments"]
            .as_object()
            .map(|args| {
                args.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let mut values = self
            .service
            .complete(target, argument, typed, &context, &caller)
            .await
            .map_err(ServeError::into_error_data)?;
        let total = values.len();
        values.truncate(100);
        result(json!({"completion": {"values": values, "total": total, "hasMore": total > 100}}))
    }
}
