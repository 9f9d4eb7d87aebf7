//! What a server offers: its tools, resources, templates and prompts, completions, and
//! subscriptions to resources and to the roots it is told about.

#![allow(deprecated)]

use super::*;

impl ServerConnection {
    /// Its tools (all pages), minus those the config filters out.
    pub async fn list_tools(&self) -> Result<Vec<Tool>, McpError> {
        if !self.summary.has_capability("tools") {
            return Ok(Vec::new());
        }
        // Cleared before listing so a change announced during the listing is not lost.
        self.stale.tools.store(false, Ordering::SeqCst);
        let session = self.live().await?;
        let tools = self
            .request(
                &session,
                "tools/list",
                all_pages(|page| session.client.list_tools(page)),
            )
            .await?;
        let mut tools = serde_json::to_value(tools).unwrap_or_default();
        // `execution` came through rmcp in `_meta` (see `stdio::keep_legacy_task_fields`).
        for tool in tools.as_array_mut().into_iter().flatten() {
            let Some(meta) = tool.get_mut("_meta").and_then(Value::as_object_mut) else {
                continue;
            };
            let execution = meta.remove(crate::legacy_fields::EXECUTION_META);
            // The key was ours; a `_meta` left empty by taking it was not the server's.
            let emptied = execution.is_some() && meta.is_empty();
            if emptied && let Some(object) = tool.as_object_mut() {
                object.remove("_meta");
            }
            if let Some(execution) = execution {
                tool["execution"] = execution;
            }
        }
        let tools: Vec<Tool> =
            serde_json::from_value(tools).map_err(|e| self.schema_mismatch("tools/list", e))?;
        if let Ok(mut task_tools) = self.task_tools.lock() {
            *task_tools = tools
                .iter()
                .filter(|t| t.requires_task())
                .map(|t| t.name.clone())
                .collect();
        }
        Ok(tools
            .into_iter()
            .filter(|t| self.config.offers_tool(&t.name))
            .collect())
    }

    /// Finds one tool by name, with near matches in the error.
    pub async fn find_tool(&self, name: &str) -> Result<Tool, McpError> {
        let tools = self.list_tools().await?;
        if let Some(tool) = tools.iter().find(|t| t.name == name) {
            return Ok(tool.clone());
        }
        if !self.config.offers_tool(name) {
            return Err(McpError::DisabledTool {
                server: self.config.name.clone(),
                name: name.to_string(),
            });
        }
        Err(McpError::UnknownItem {
            server: self.config.name.clone(),
            what: "tool",
            name: name.to_string(),
            suggestions: near_matches(name, tools.iter().map(|t| t.name.as_str())),
        })
    }

    /// Asks to be told when `uri` changes (`resources/subscribe` on legacy servers, a
    /// `subscriptions/listen` stream on modern ones); see [`take_updated`](Self::take_updated).
    pub async fn subscribe(&self, uri: &str) -> Result<(), McpError> {
        if !self.summary.has_capability("resources.subscribe") {
            return Err(McpError::InvalidArguments(format!(
                "server \"{}\" does not offer resource subscriptions",
                self.config.name
            )));
        }
        let operation = format!("subscribing to \"{uri}\"");
        let session = self.live().await?;
        if self.summary.era == ProtocolEra::Legacy {
            let subscribe = session
                .client
                .subscribe(rmcp::model::SubscribeRequestParams::new(uri));
            return self.request(&session, &operation, subscribe).await;
        }
        let filter = rmcp::model::SubscriptionFilter::builder()
            .resource_subscription(uri)
            .build();
        let mut subscription = self
            .request(&session, &operation, session.client.listen(filter))
            .await?;
        // The tap has already seen each notification; draining keeps the stream open.
        let drain =
            tokio::spawn(async move { while let Ok(Some(_)) = subscription.next().await {} });
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(drain);
        }
        Ok(())
    }

    /// Tells a legacy server the host's roots changed (`notifications/roots/list_changed`);
    /// it will ask for them again. Modern servers ask with each request, so there is nothing
    /// to send.
    pub async fn roots_changed(&self) -> Result<(), McpError> {
        if self.summary.era == ProtocolEra::Modern {
            return Ok(());
        }
        let session = self.live().await?;
        self.request(
            &session,
            "roots/list_changed",
            session.client.notify_roots_list_changed(),
        )
        .await
    }

    /// URIs the server said changed since the last call, oldest first, without repeats.
    pub fn take_updated(&self) -> Vec<String> {
        self.stale
            .resources
            .lock()
            .map(|mut uris| std::mem::take(&mut *uris))
            .unwrap_or_default()
    }

    /// Completion values for an argument of a prompt (`prompt`) or of a resource template
    /// (`template`), given what was typed so far (`completion/complete`).
    pub async fn complete(
        &self,
        target: Completion<'_>,
        argument: &str,
        value: &str,
        context: &std::collections::HashMap<String, String>,
    ) -> Result<Vec<String>, McpError> {
        let operation = format!("completing \"{argument}\"");
        if !self.summary.has_capability("completions") {
            return Err(McpError::InvalidArguments(format!(
                "server \"{}\" does not offer completion (it declares no \"completions\" capability)",
                self.config.name
            )));
        }
        let session = self.live().await?;
        // Earlier arguments narrow what the server suggests (a country before its cities).
        let context = (!context.is_empty())
            .then(|| rmcp::model::CompletionContext::with_arguments(context.clone()));
        let info = match target {
            Completion::Prompt(name) => {
                self.request(
                    &session,
                    &operation,
                    session
                        .client
                        .complete_prompt_argument(name, argument, value, context),
                )
                .await?
            }
            Completion::Template(template) => {
                self.request(
                    &session,
                    &operation,
                    session
                        .client
                        .complete_resource_argument(template, argument, value, context),
                )
                .await?
            }
        };
        Ok(info.values)
    }

    /// Its resources (all pages).
    pub async fn list_resources(&self) -> Result<Vec<Resource>, McpError> {
        if !self.summary.has_capability("resources") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let list = self
            .request(
                &session,
                "resources/list",
                all_pages(|page| session.client.list_resources(page)),
            )
            .await;
        let Some(list) = optional_list(list)? else {
            return Ok(Vec::new());
        };
        self.convert("resources/list", list)
    }

    /// Its resource templates (all pages).
    pub async fn list_resource_templates(&self) -> Result<Vec<ResourceTemplate>, McpError> {
        if !self.summary.has_capability("resources") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let list = self
            .request(
                &session,
                "resources/templates/list",
                all_pages(|page| session.client.list_resource_templates(page)),
            )
            .await;
        let Some(list) = optional_list(list)? else {
            return Ok(Vec::new());
        };
        self.convert("resources/templates/list", list)
    }

    /// Reads one resource.
    pub async fn read_resource(&self, uri: &str) -> Result<Vec<ResourceContents>, McpError> {
        let operation = format!("reading \"{uri}\"");
        let params = self.convert(&operation, serde_json::json!({ "uri": uri }))?;
        let session = self.live().await?;
        let result = self
            .request(&session, &operation, session.client.read_resource(params))
            .await?;
        let value = serde_json::to_value(result).unwrap_or_default();
        self.convert(
            &operation,
            value.get("contents").cloned().unwrap_or_default(),
        )
    }

    /// Its prompts (all pages).
    pub async fn list_prompts(&self) -> Result<Vec<Prompt>, McpError> {
        if !self.summary.has_capability("prompts") {
            return Ok(Vec::new());
        }
        let session = self.live().await?;
        let list = self
            .request(
                &session,
                "prompts/list",
                all_pages(|page| session.client.list_prompts(page)),
            )
            .await;
        let Some(list) = optional_list(list)? else {
            return Ok(Vec::new());
        };
        self.convert("prompts/list", list)
    }

    /// Expands a prompt with its arguments.
    pub async fn get_prompt(
        &self,
        name: &str,
        arguments: Map<String, Value>,
    ) -> Result<PromptResult, McpError> {
        let operation = format!("prompt \"{name}\"");
        let params = self.convert(
            &operation,
            serde_json::json!({ "name": name, "arguments": arguments }),
        )?;
        let session = self.live().await?;
        let result = match self
            .request(&session, &operation, session.client.get_prompt(params))
            .await
        {
            Ok(result) => result,
            Err(error @ McpError::Rpc { .. }) => {
                // Servers word "no such prompt" differently; name it the same way for all.
                let prompts = self.list_prompts().await.unwrap_or_default();
                if prompts.is_empty() || prompts.iter().any(|p| p.name == name) {
                    return Err(error);
                }
                return Err(McpError::UnknownItem {
                    server: self.config.name.clone(),
                    what: "prompt",
                    name: name.to_string(),
                    suggestions: near_matches(name, prompts.iter().map(|p| p.name.as_str())),
                });
            }
            Err(error) => return Err(error),
        };
        self.convert(&operation, result)
    }

    /// [`get_prompt`](Self::get_prompt) on another client's behalf: for a client that takes
    /// input-required results, its answers go upstream and the server's questions come back.
    pub async fn get_prompt_for(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        forwarding: &Forwarding,
    ) -> Result<Reply<PromptResult>, McpError> {
        let Some(round) = &forwarding.input else {
            return self.get_prompt(name, arguments).await.map(Reply::Complete);
        };
        let operation = format!("prompt \"{name}\"");
        let mut params: rmcp::model::GetPromptRequestParams = self.convert(
            &operation,
            serde_json::json!({ "name": name, "arguments": arguments }),
        )?;
        params.input_responses = round.rmcp_responses();
        params.request_state = round.state.clone();
        let request = ClientRequest::GetPromptRequest(rmcp::model::GetPromptRequest::new(params));
        let session = self.live().await?;
        let result = self
            .forward(&session, &operation, request, forwarding)
            .await?;
        self.reply(&operation, result)
    }

    /// [`read_resource`](Self::read_resource) on another client's behalf, as
    /// [`get_prompt_for`](Self::get_prompt_for).
    pub async fn read_resource_for(
        &self,
        uri: &str,
        forwarding: &Forwarding,
    ) -> Result<Reply<Vec<ResourceContents>>, McpError> {
        let Some(round) = &forwarding.input else {
            return self.read_resource(uri).await.map(Reply::Complete);
        };
        let operation = format!("reading \"{uri}\"");
        let mut params: rmcp::model::ReadResourceRequestParams =
            self.convert(&operation, serde_json::json!({ "uri": uri }))?;
        params.input_responses = round.rmcp_responses();
        params.request_state = round.state.clone();
        let request =
            ClientRequest::ReadResourceRequest(rmcp::model::ReadResourceRequest::new(params));
        let session = self.live().await?;
        let mut result = self
            .forward(&session, &operation, request, forwarding)
            .await?;
        if !input_rounds::is_input_required(&result) {
            result = result.get("contents").cloned().unwrap_or_default();
        }
        self.reply(&operation, result)
    }

    /// A forwarded request's result JSON as ours, or the questions it asks.
    pub(super) fn reply<T: DeserializeOwned>(
        &self,
        operation: &str,
        result: Value,
    ) -> Result<Reply<T>, McpError> {
        if input_rounds::is_input_required(&result) {
            return Ok(Reply::InputRequired(InputRequired { result }));
        }
        self.convert(operation, result).map(Reply::Complete)
    }
}
