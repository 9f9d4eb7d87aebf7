//! What the engine needs of the servers, as a trait: their names and instructions, a tool call,
//! a re-listing after a change, the resources that changed, and `@server:uri` mentions. The
//! `ServerRegistry` is the implementation every front end uses; the loop's own tests give the
//! session fake servers through the same trait, so the loop is tested without processes.

use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tether_catalog::{Refresh, ToolCatalog};
use tether_mcp::{McpError, Progress, ServerRegistry};
use tether_protocol::ToolResult;
use tether_protocol::chat::Message;
use tokio::sync::mpsc::UnboundedSender;

use crate::attachments::Mention;

/// The servers behind a session.
pub trait ToolServers: Send + Sync {
    /// The servers connected now, by config name.
    fn names(&self) -> Vec<String>;

    /// Each server's non-empty `instructions`, by name.
    fn instructions(&self) -> Vec<(String, String)>;

    /// Whether the user trusts `server`'s annotations (its read-only hints decide approval).
    fn trusts_hints(&self, server: &str) -> bool;

    /// Calls `tool` on `server`; progress notifications go to `progress`. Dropping the future
    /// cancels the call on the server.
    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: Option<Map<String, Value>>,
        progress: Option<UnboundedSender<Progress>>,
    ) -> BoxFuture<'a, Result<ToolResult, McpError>>;

    /// Re-lists the servers that announced a tool change into `catalog`; `None` when none did.
    fn refresh<'a>(&'a self, catalog: &'a ToolCatalog) -> BoxFuture<'a, Option<Refresh>>;

    /// The subscribed resources that changed since the last look, each with the message that
    /// brings its new content into the conversation.
    fn resource_updates(&self) -> BoxFuture<'_, Vec<(Mention, Message)>>;

    /// `text` with the resources its `@server:uri` mentions name attached.
    fn attach<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(String, Vec<Mention>), McpError>>;

    /// The servers still starting (they join when ready), by name.
    fn starting(&self) -> Vec<String> {
        Vec::new()
    }

    /// Waits until none of `names` is still starting, or `limit` has passed.
    fn wait_started<'a>(&'a self, _names: &'a [String], _limit: Duration) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

impl ToolServers for ServerRegistry {
    fn names(&self) -> Vec<String> {
        self.connections().map(|c| c.name().to_string()).collect()
    }

    fn instructions(&self) -> Vec<(String, String)> {
        self.connections()
            .filter_map(|connection| {
                let instructions = connection.summary().instructions.as_deref()?;
                (!instructions.trim().is_empty())
                    .then(|| (connection.name().to_string(), instructions.to_string()))
            })
            .collect()
    }

    fn trusts_hints(&self, server: &str) -> bool {
        self.connection(server)
            .is_ok_and(|connection| connection.config().trust_hints)
    }

    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: Option<Map<String, Value>>,
        progress: Option<UnboundedSender<Progress>>,
    ) -> BoxFuture<'a, Result<ToolResult, McpError>> {
        Box::pin(async move {
            self.connection(server)?
                .call_tool(tool, arguments, progress)
                .await
        })
    }

    fn refresh<'a>(&'a self, catalog: &'a ToolCatalog) -> BoxFuture<'a, Option<Refresh>> {
        Box::pin(catalog.refresh(self))
    }

    fn resource_updates(&self) -> BoxFuture<'_, Vec<(Mention, Message)>> {
        Box::pin(crate::attachments::resource_updates(self))
    }

    fn attach<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(String, Vec<Mention>), McpError>> {
        Box::pin(crate::attachments::attach_resources(self, text))
    }

    fn starting(&self) -> Vec<String> {
        self.starting_names()
    }

    fn wait_started<'a>(&'a self, names: &'a [String], limit: Duration) -> BoxFuture<'a, ()> {
        Box::pin(ServerRegistry::wait_started(self, names, limit))
    }
}

impl ToolServers for tokio::sync::RwLock<ServerRegistry> {
    fn names(&self) -> Vec<String> {
        self.try_read().map(|r| r.names()).unwrap_or_default()
    }

    fn instructions(&self) -> Vec<(String, String)> {
        self.try_read()
            .map(|r| r.instructions())
            .unwrap_or_default()
    }

    fn trusts_hints(&self, server: &str) -> bool {
        self.try_read().is_ok_and(|r| r.trusts_hints(server))
    }

    fn call<'a>(
        &'a self,
        server: &'a str,
        tool: &'a str,
        arguments: Option<Map<String, Value>>,
        progress: Option<UnboundedSender<Progress>>,
    ) -> BoxFuture<'a, Result<ToolResult, McpError>> {
        Box::pin(async move {
            let registry = self.read().await;
            registry.call(server, tool, arguments, progress).await
        })
    }

    fn refresh<'a>(&'a self, catalog: &'a ToolCatalog) -> BoxFuture<'a, Option<Refresh>> {
        Box::pin(async move { catalog.refresh(&*self.read().await).await })
    }

    fn resource_updates(&self) -> BoxFuture<'_, Vec<(Mention, Message)>> {
        Box::pin(async move {
            let registry = self.read().await;
            crate::attachments::resource_updates(&registry).await
        })
    }

    fn attach<'a>(
        &'a self,
        text: &'a str,
    ) -> BoxFuture<'a, Result<(String, Vec<Mention>), McpError>> {
        Box::pin(async move {
            let registry = self.read().await;
            crate::attachments::attach_resources(&registry, text).await
        })
    }

    fn starting(&self) -> Vec<String> {
        self.try_read()
            .map(|r| r.starting_names())
            .unwrap_or_default()
    }

    fn wait_started<'a>(&'a self, names: &'a [String], limit: Duration) -> BoxFuture<'a, ()> {
        Box::pin(async move { self.read().await.wait_started(names, limit).await })
    }
}
