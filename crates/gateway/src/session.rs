//! One client's session with the gateway: its view of the tools (cut to its principal's
//! allow-list), the approval rules applied to its calls and asked of it, its subscriptions
//! and log level, and the MCP service it is answered through.

use super::*;

/// One client's view of the gateway.
pub struct GatewaySession {
    pub(crate) gateway: Arc<Gateway>,
    pub(crate) selection: Arc<dyn ToolSelection>,
    /// The last tool view cut down to a principal's allow-list: the catalogue snapshot it was
    /// cut from, the allow-list, and the view (a session keeps one principal, so one entry
    /// spares rebuilding the search index on every request).
    pub(crate) allowed_view: Mutex<Option<AllowedView>>,
    /// The level a legacy client set with `logging/setLevel`; a 2026-07-28 client sends its
    /// level with each request.
    pub(crate) log_level: Mutex<Option<String>>,
    /// The resources this client subscribed to: only their updates reach it.
    pub(crate) subscribed: Mutex<std::collections::HashSet<String>>,
    /// This client's user's "always allow" and "always reject" answers to `ask` rules
    /// (a session-less 2026-07-28 request keeps none).
    pub(crate) standing: StandingAnswers,
}

type AllowedView = (Arc<Snapshot>, Option<Vec<String>>, bool, Arc<Snapshot>);

impl std::fmt::Debug for GatewaySession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewaySession")
            .field("mode", &self.selection.mode())
            .finish()
    }
}

impl GatewaySession {
    /// The tools `caller` may see: all of them, or those its principal's allow-list names
    /// (by qualified name or by the name the client sees), less the MCP Apps tools meant only
    /// for an app's view when the client does not run apps (it is a model's host). Everything
    /// a client does with tools (listing, searching, `mcp_query`, calling) goes through this
    /// view, so a tool outside it does not exist for that client.
    fn snapshot_for(&self, caller: &Caller) -> Arc<Snapshot> {
        self.snapshot_view(caller.principal(), || {
            caller.declared_extension(MCP_APPS_EXTENSION)
        })
    }

    /// [`snapshot_for`](Self::snapshot_for) of a client known by its principal and whether
    /// it runs MCP Apps.
    pub(crate) fn snapshot_view(
        &self,
        principal: Option<&Principal>,
        runs_apps: impl FnOnce() -> bool,
    ) -> Arc<Snapshot> {
        let full = self.gateway.catalog.snapshot();
        let globs = principal.and_then(|p| p.allowed_tools.as_ref());
        let hide_apps = full.has_app_only_tools() && !runs_apps();
        if globs.is_none() && !hide_apps {
            return full;
        }
        let mut cached = self.allowed_view.lock().ok();
        if let Some(Some((source, list, hid, view))) = cached.as_deref()
            && Arc::ptr_eq(source, &full)
            && list.as_ref() == globs
            && *hid == hide_apps
        {
            return view.clone();
        }
        let allowed: Vec<(&str, &str)> = full
            .tools()
            .iter()
            .filter(|t| !hide_apps || t.tool.for_model())
            .filter(|t| {
                let Some(principal) = principal else {
                    return true;
                };
                let exposed = self.gateway.exposed(&t.server, &t.tool.name);
                principal.allows(&[&t.qualified_name, &exposed])
            })
            .map(|t| (t.server.as_str(), t.tool.name.as_str()))
            .collect();
        let servers = full
            .servers()
            .iter()
            .map(|s| ServerTools {
                server: s.server.clone(),
                tools: s
                    .tools
                    .iter()
                    .filter(|t| allowed.contains(&(s.server.as_str(), t.name.as_str())))
                    .cloned()
                    .collect(),
                always_load: s.always_load,
            })
            // A server none of whose tools are allowed is not named to this client either.
            .filter(|s| !s.tools.is_empty())
            .collect();
        let view = Arc::new(Snapshot::new(servers));
        if let Some(cached) = cached.as_deref_mut() {
            *cached = Some((full.clone(), globs.cloned(), hide_apps, view.clone()));
        }
        view
    }

    /// The servers `caller` may reach beyond tools (resources, templates, prompts,
    /// completions, subscriptions): those with a tool in its allow-list; `None` when it is not
    /// limited. A server none of whose tools it may call does not exist for it.
    fn servers_for(&self, caller: &Caller) -> Option<Vec<String>> {
        caller.principal()?.allowed_tools.as_ref()?;
        Some(
            self.snapshot_for(caller)
                .servers()
                .iter()
                .map(|s| s.server.clone())
                .collect(),
        )
    }

    /// Refuses `server` to a caller limited to other servers, as if the item did not exist.
    fn reach(
        &self,
        caller: &Caller,
        server: &str,
        what: &'static str,
        name: &str,
    ) -> Result<(), ServeError> {
        match self.servers_for(caller) {
            Some(servers) if !servers.iter().any(|s| s == server) => Err(ServeError::NotFound {
                what,
                name: name.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// What a client's call named `name` stands for.
    fn resolve(&self, snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved {
        if !self.gateway.options.prefix
            && let Some(tool) = snapshot.tools().iter().find(|t| t.tool.name == name)
        {
            return Resolved::Tool {
                tool: Box::new(tool.clone()),
                arguments,
            };
        }
        self.selection.resolve(snapshot, name, arguments)
    }

    /// Applies the config's rules; `ask` goes to the client's user when it can be asked.
    async fn approve(&self, qualified_name: &str, arguments: &Value, caller: &Caller) -> Approval {
        if let Some((server, change)) = self.gateway.catalog.pin_change(qualified_name) {
            return Approval::Refused(format!(
                "\"{qualified_name}\" is blocked: it changed since it was pinned ({change}); whoever runs the gateway must review it and run `tether pins accept {server}`"
            ));
        }
        // The client applies its own approval to what it calls; the gateway adds the
        // config's explicit rules, so hints are left out here.
        let decision = decide(
            ApprovalMode::Auto,
            &self.gateway.options.rules,
            qualified_name,
            Hints {
                annotations: &ToolAnnotations::default(),
                trusted: false,
            },
            true,
        );
        let message = format!(
            "Allow the tool \"{qualified_name}\" with {arguments}? (an \"ask\" rule in the gateway's config)"
        );
        let refused =
            || Approval::Refused(format!("the user did not approve \"{qualified_name}\""));
        let unable = || {
            Approval::Refused(format!(
                "\"{qualified_name}\" needs the user's approval (an \"ask\" rule in the gateway's config), and this client cannot be asked (it does not support elicitation)"
            ))
        };
        match decision {
            Decision::Allow => Approval::Granted { in_round: false },
            Decision::Deny(reason) => {
                Approval::Refused(format!("\"{qualified_name}\" is blocked: {reason}"))
            }
            Decision::Ask => match self.standing.lookup(qualified_name) {
                Some(true) => Approval::Granted { in_round: false },
                Some(false) => Approval::Refused(format!(
                    "the user rejected \"{qualified_name}\" for the rest of this session"
                )),
                // A 2026-07-28 client is asked with an input-required result and answers in
                // its retry; the gateway keeps nothing in between.
                None if caller.input_round().is_some() => {
                    let round = caller.input_round().cloned().unwrap_or_default();
                    if round.is_marked(APPROVED) {
                        return Approval::Granted { in_round: true };
                    }
                    let Some(answer) = round.answer(APPROVAL_KEY) else {
                        if !caller.declared("elicitation") {
                            return unable();
                        }
                        return Approval::Question(InputRequired::form(
                            APPROVAL_KEY,
                            &message,
                            permission_form(),
                        ));
                    };
                    if answer.get("action").and_then(Value::as_str) != Some("accept") {
                        return refused();
                    }
                    let content = answer
                        .get("content")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default();
                    if decision_from_form(&content).allows() {
                        Approval::Granted { in_round: true }
                    } else {
                        refused()
                    }
                }
                None => {
                    if !caller.supports("elicitation") {
                        return unable();
                    }
                    let request = ElicitationRequest::Form {
                        message,
                        schema: permission_form(),
                    };
                    let decision = match caller.elicit(request).await {
                        ElicitationAnswer::Accept(content) => decision_from_form(&content),
                        ElicitationAnswer::Decline => PermissionDecision::RejectOnce,
                        ElicitationAnswer::Cancel => PermissionDecision::Cancelled,
                    };
                    self.standing.remember(qualified_name, decision);
                    if decision.allows() {
                        Approval::Granted { in_round: false }
                    } else {
                        refused()
                    }
                }
            },
        }
    }
}

/// The request handlers themselves; the [`McpService`] methods wrap each in its span.
impl GatewaySession {
    /// What requests upstream carry from `caller`.
    fn forwarding(&self, caller: &Caller) -> Forwarding {
        let level = self.log_level.lock().ok().and_then(|level| level.clone());
        // A legacy server logs unasked; a 2026-07-28 one only when a level comes with the
        // request, so a legacy client that set none is asked for what it would have had.
        caller.forwarding(Some(level.as_deref().unwrap_or("info")))
    }

    /// `resources/read`, routed to the server that listed the URI.
    async fn read_resource_untraced(
        &self,
        uri: &str,
        caller: &Caller,
    ) -> Result<Vec<ResourceContents>, ServeError> {
        let owner = self.gateway.owner_of(uri).await?;
        self.reach(caller, &owner, "resource", uri)?;
        let connection = self.gateway.connection(&owner)?;
        let forwarding = self.forwarding(caller);
        let read = |traceparent| async move {
            let forwarding = Forwarding {
                traceparent,
                ..forwarding
            };
            connection.read_resource_for(uri, &forwarding).await
        };
        let reply = traces::upstream("resources/read", &owner, uri, read, |r| {
            r.as_ref().err().map(ToString::to_string)
        })
        .await
        .map_err(|e| match e {
            McpError::Rpc { .. } => passed_on(e),
            McpError::UnknownItem { .. } => ServeError::InvalidParams(e.to_string()),
            other => ServeError::Internal(other.to_string()),
        })?;
        complete(reply)
    }

    /// `prompts/list` of every server, under the gateway's names.
    async fn list_prompts_untraced(&self, caller: &Caller) -> Result<Vec<Prompt>, ServeError> {
        let gateway = &self.gateway;
        let servers = self.servers_for(caller);
        Ok(gateway
            .prompts()
            .await
            .into_iter()
            .filter(|(server, _)| servers.as_ref().is_none_or(|s| s.contains(server)))
            .map(|(server, prompt)| Prompt {
                name: gateway.exposed(&server, &prompt.name),
                ..prompt
            })
            .collect())
    }

    /// `prompts/get`, routed to the prompt's server.
    async fn get_prompt_untraced(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
    ) -> Result<PromptResult, ServeError> {
        let (server, prompt) = self.gateway.find_prompt(name).await?;
        self.reach(caller, &server, "prompt", name)?;
        let connection = self.gateway.connection(&server)?;
        let forwarding = self.forwarding(caller);
        let get = |traceparent| async {
            let forwarding = Forwarding {
                traceparent,
                ..forwarding
            };
            connection
                .get_prompt_for(&prompt, arguments, &forwarding)
                .await
        };
        let reply = traces::upstream("prompts/get", &server, &prompt, get, |r| {
            r.as_ref().err().map(ToString::to_string)
        })
        .await
        .map_err(|e| match e {
            McpError::Rpc { .. } => passed_on(e),
            other => ServeError::InvalidParams(other.to_string()),
        })?;
        complete(reply)
    }

    /// `tools/call` itself, inside the request's span.
    async fn call_tool_untraced(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
    ) -> Result<ToolResult, ServeError> {
        let snapshot = self.snapshot_for(caller);
        match self.resolve(&snapshot, name, Value::Object(arguments)) {
            Resolved::Unknown => Err(ServeError::NotFound {
                what: "tool",
                name: name.to_string(),
            }),
            Resolved::Refused(text) => Ok(error_result(text)),
            Resolved::Answered { text, loaded } => {
                if !loaded.is_empty() {
                    caller.tools_changed().await;
                }
                Ok(text_result(text))
            }
            Resolved::Tool { tool, arguments } => {
                // Called by its own name (not through mcp_query): its headers were set from
                // the schema the client listed.
                if self.gateway.exposed(&tool.server, &tool.tool.name) == name
                    && let Value::Object(map) = &arguments
                {
                    caller.check_param_headers(&tool.tool.input_schema, map)?;
                }
                let asked_in_round = match self
                    .approve(&tool.qualified_name, &arguments, caller)
                    .await
                {
                    Approval::Granted { in_round } => in_round,
                    Approval::Question(question) => return Err(ServeError::NeedsInput(question)),
                    Approval::Refused(reason) => {
                        self.gateway.options.metrics.tool_call(
                            &tool.server,
                            &tool.tool.name,
                            CallOutcome::Refused,
                            0.0,
                        );
                        return Ok(error_result(reason));
                    }
                };
                let arguments = match arguments {
                    Value::Object(map) => map,
                    _ => Map::new(),
                };
                let mut forwarding = self.forwarding(caller);
                if asked_in_round {
                    // The approval was ours: its answer and mark stay here.
                    forwarding.input = forwarding
                        .input
                        .map(|round| round.without(APPROVAL_KEY, APPROVED));
                }
                let held = forwarding
                    .input
                    .as_ref()
                    .and_then(|round| Some((round.state.as_deref()?.strip_prefix(HELD)?, round)));
                let (server, name) = (&tool.server, &tool.tool.name);
                let outcome = if let Some((token, round)) = held {
                    self.gateway.resume(token, round, caller).await
                } else if caller.input_round().is_some() && self.gateway.speaks_legacy(server) {
                    // A legacy-era server may ask mid-call, which a 2026-07-28 client can
                    // answer only in a retry: the call is held across its rounds.
                    self.gateway
                        .call_held(server, name, arguments, caller, &forwarding)
                        .await
                } else {
                    self.gateway
                        .call_upstream(server, name, arguments, caller, &forwarding)
                        .await
                };
                match outcome {
                    // The upstream's own questions carry the mark, so the client's next round
                    // is not asked for approval again.
                    Err(ServeError::NeedsInput(question)) if asked_in_round => {
                        Err(ServeError::NeedsInput(question.marked(APPROVED)))
                    }
                    other => other,
                }
            }
        }
    }
}

#[async_trait]
impl McpService for GatewaySession {
    fn info(&self) -> ServiceInfo {
        let connections: Vec<&ServerConnection> = self.gateway.registry.connections().collect();
        let any = |capability: &str| {
            connections
                .iter()
                .any(|c| c.summary().has_capability(capability))
        };
        let mut instructions = vec![format!(
            "Tether gateway in front of {} server(s): {}.",
            connections.len(),
            connections
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        )];
        for connection in &connections {
            // Changed since pinned: withheld until the operator accepts them.
            if let Some(text) = &connection.summary().instructions
                && !self
                    .gateway
                    .catalog
                    .instructions_withheld(connection.name())
            {
                instructions.push(format!("{}: {text}", connection.name()));
            }
        }
        ServiceInfo {
            name: "tether-gateway".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instructions: Some(instructions.join("\n\n")),
            resources: any("resources"),
            prompts: any("prompts"),
            completions: any("completions"),
            logging: true,
            subscribe: any("resources.subscribe"),
            list_changed: true,
            tasks: any("tasks"),
        }
    }

    fn runs_as_task(&self, name: &str, caller: &Caller) -> bool {
        let upstream_tasks = self
            .gateway
            .registry
            .connections()
            .any(|c| c.summary().has_capability("tasks"));
        if !upstream_tasks {
            return false;
        }
        let snapshot = self.snapshot_for(caller);
        matches!(
            self.resolve(&snapshot, name, Value::Null),
            Resolved::Tool { tool, .. } if tool.tool.requires_task()
        )
    }

    async fn list_tools(&self, caller: &Caller) -> Result<Vec<Tool>, ServeError> {
        let snapshot = self.snapshot_for(caller);
        let gateway = &self.gateway;
        let real = |tool: &tether_protocol::QualifiedTool| Tool {
            name: gateway.exposed(&tool.server, &tool.tool.name),
            ..tool.tool.clone()
        };
        if self.selection.mode() == SelectionMode::All {
            return Ok(snapshot.tools().iter().map(real).collect());
        }
        Ok(self
            .selection
            .offer(&snapshot)
            .into_iter()
            .map(|definition| match snapshot.resolve(&definition.name) {
                Some(tool) => real(tool),
                None => Tool {
                    name: definition.name,
                    title: None,
                    description: Some(definition.description),
                    input_schema: definition.parameters,
                    output_schema: None,
                    annotations: ToolAnnotations::default(),
                    execution: None,
                    icons: None,
                    meta: None,
                },
            })
            .collect())
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
    ) -> Result<ToolResult, ServeError> {
        traces::client_request(
            "tools/call",
            Some(name),
            caller.traceparent(),
            self.call_tool_untraced(name, arguments, caller),
        )
        .await
    }

    async fn direct_call(&self, call: DirectCall<'_>) -> DirectAnswer {
        self.direct(call).await
    }

    async fn list_resources(&self, caller: &Caller) -> Result<Vec<Resource>, ServeError> {
        let servers = self.servers_for(caller);
        traces::client_request("resources/list", None, None, async {
            Ok::<_, ServeError>(
                self.gateway
                    .list_resources()
                    .await
                    .into_iter()
                    .filter(|(server, _)| servers.as_ref().is_none_or(|s| s.contains(server)))
                    .map(|(_, resource)| resource)
                    .collect(),
            )
        })
        .await
    }

    async fn list_resource_templates(
        &self,
        caller: &Caller,
    ) -> Result<Vec<ResourceTemplate>, ServeError> {
        let servers = self.servers_for(caller);
        Ok(self
            .gateway
            .list_templates()
            .await
            .into_iter()
            .filter(|(server, _)| servers.as_ref().is_none_or(|s| s.contains(server)))
            .map(|(_, template)| template)
            .collect())
    }

    async fn read_resource(
        &self,
        uri: &str,
        caller: &Caller,
    ) -> Result<Vec<ResourceContents>, ServeError> {
        traces::client_request(
            "resources/read",
            Some(uri),
            caller.traceparent(),
            self.read_resource_untraced(uri, caller),
        )
        .await
    }

    async fn list_prompts(&self, caller: &Caller) -> Result<Vec<Prompt>, ServeError> {
        traces::client_request(
            "prompts/list",
            None,
            None,
            self.list_prompts_untraced(caller),
        )
        .await
    }

    async fn get_prompt(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
    ) -> Result<PromptResult, ServeError> {
        traces::client_request(
            "prompts/get",
            Some(name),
            caller.traceparent(),
            self.get_prompt_untraced(name, arguments, caller),
        )
        .await
    }

    async fn subscribe(&self, uri: &str, caller: &Caller) -> Result<(), ServeError> {
        let owner = self.gateway.owner_of(uri).await?;
        self.reach(caller, &owner, "resource", uri)?;
        // One upstream subscription serves every client; each hears only what it asked for.
        self.gateway
            .connection(&owner)?
            .subscribe(uri)
            .await
            .map_err(|e| match e {
                McpError::Rpc { .. } => passed_on(e),
                other => ServeError::Refused(other.to_string()),
            })?;
        if let Ok(mut subscribed) = self.subscribed.lock() {
            subscribed.insert(uri.to_string());
        }
        Ok(())
    }

    async fn unsubscribe(&self, uri: &str) -> Result<(), ServeError> {
        if let Ok(mut subscribed) = self.subscribed.lock() {
            subscribed.remove(uri);
        }
        Ok(())
    }

    fn wants(&self, change: &ServiceChange) -> bool {
        match change {
            ServiceChange::ResourceUpdated(uri) => self
                .subscribed
                .lock()
                .is_ok_and(|subscribed| subscribed.contains(uri)),
            _ => true,
        }
    }

    fn set_log_level(&self, level: &str) {
        if let Ok(mut slot) = self.log_level.lock() {
            *slot = Some(level.to_string());
        }
    }

    async fn complete(
        &self,
        target: Completion<'_>,
        argument: &str,
        value: &str,
        context: &std::collections::HashMap<String, String>,
        caller: &Caller,
    ) -> Result<Vec<String>, ServeError> {
        let (server, upstream_name) = match target {
            Completion::Prompt(name) => self.gateway.find_prompt(name).await?,
            Completion::Template(template) => {
                let owner = self.gateway.resource_owner(template).await.ok_or_else(|| {
                    ServeError::NotFound {
                        what: "resource template",
                        name: template.to_string(),
                    }
                })?;
                (owner, template.to_string())
            }
        };
        let what = match target {
            Completion::Prompt(_) => "prompt",
            Completion::Template(_) => "resource template",
        };
        self.reach(caller, &server, what, &upstream_name)?;
        let target = match target {
            Completion::Prompt(_) => Completion::Prompt(&upstream_name),
            Completion::Template(_) => Completion::Template(&upstream_name),
        };
        self.gateway
            .connection(&server)?
            .complete(target, argument, value, context)
            .await
            .map_err(|e| ServeError::InvalidParams(e.to_string()))
    }

    fn changes(&self) -> Option<broadcast::Receiver<ServiceChange>> {
        Some(self.gateway.changes.subscribe())
    }
}

/// A forwarded request's reply as the service's answer: the result, or the upstream's
/// questions for the client.
fn complete<T>(reply: Reply<T>) -> Result<T, ServeError> {
    match reply {
        Reply::Complete(value) => Ok(value),
        Reply::InputRequired(questions) => Err(ServeError::NeedsInput(questions)),
    }
}

/// The key under which the gateway asks a 2026-07-28 client to approve a call (an `ask` rule).
const APPROVAL_KEY: &str = "dev.tether/approval";

/// Marks the request state of a call the client approved, for the rounds that follow.
const APPROVED: &str = "dev.tether/approved:";

/// What the approval rules say about one call.
enum Approval {
    /// Go ahead.
    Granted {
        /// A 2026-07-28 client approved it in this request's input round (or an earlier one).
        in_round: bool,
    },
    /// Refused, with the reason the client sees.
    Refused(String),
    /// Ask the client first.
    Question(InputRequired),
}
