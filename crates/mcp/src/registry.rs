//! The set of servers a run uses: started in parallel, each either connected or failed with
//! its reason, so one broken server never takes the others down.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;

use crate::client::HostHandler;
use crate::config::ServerConfig;
use crate::connection::ServerConnection;
use crate::error::{McpError, near_matches};
use crate::router::ToolRouter;

/// Where one configured server stands.
#[derive(Debug)]
pub enum ServerState {
    /// Connected and usable.
    Connected(Box<ServerConnection>),
    /// Could not be started or reached.
    Failed(McpError),
    /// `"disabled": true` in the config.
    Disabled,
}

/// One configured server and its state.
#[derive(Debug)]
pub struct ServerEntry {
    /// Its config.
    pub config: ServerConfig,
    /// Connected, failed or disabled.
    pub state: ServerState,
    /// Wall time its start took (zero when disabled).
    pub elapsed: Duration,
}

impl ServerEntry {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }
}

/// All servers of a run.
#[derive(Debug, Default)]
pub struct ServerRegistry {
    entries: Vec<ServerEntry>,
}

impl ServerRegistry {
    /// Starts every enabled server concurrently; each has its own startup timeout. What the
    /// servers ask of the host goes to `host`.
    pub async fn start(
        servers: impl IntoIterator<Item = ServerConfig>,
        host: Arc<dyn HostHandler>,
    ) -> ServerRegistry {
        let starts = servers.into_iter().map(|config| {
            let host = host.clone();
            async move {
                if config.disabled {
                    return ServerEntry {
                        config,
                        state: ServerState::Disabled,
                        elapsed: Duration::ZERO,
                    };
                }
                let started = Instant::now();
                let state = match ServerConnection::connect(&config, host).await {
                    Ok(connection) => ServerState::Connected(Box::new(connection)),
                    Err(error) => ServerState::Failed(error),
                };
                ServerEntry {
                    config,
                    state,
                    elapsed: started.elapsed(),
                }
            }
        });
        ServerRegistry {
            entries: join_all(starts).await,
        }
    }

    /// Starts only the named server, or explains that there is none by that name.
    pub async fn start_one(
        servers: &[ServerConfig],
        name: &str,
        host: Arc<dyn HostHandler>,
    ) -> Result<ServerRegistry, McpError> {
        let config = servers
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| unknown_server(servers, name))?;
        Ok(ServerRegistry::start([config.clone()], host).await)
    }

    /// Every entry, in config order.
    pub fn entries(&self) -> &[ServerEntry] {
        &self.entries
    }

    /// The connection for `name`, or why there is none.
    pub fn connection(&self, name: &str) -> Result<&ServerConnection, McpError> {
        let entry = self
            .entries
            .iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| {
                let configs: Vec<ServerConfig> =
                    self.entries.iter().map(|e| e.config.clone()).collect();
                unknown_server(&configs, name)
            })?;
        match &entry.state {
            ServerState::Connected(connection) => Ok(connection),
            ServerState::Failed(error) => Err(error.clone()),
            ServerState::Disabled => Err(McpError::Disabled(name.to_string())),
        }
    }

    /// Connected servers, in config order.
    pub fn connections(&self) -> impl Iterator<Item = &ServerConnection> {
        self.entries.iter().filter_map(|e| match &e.state {
            ServerState::Connected(c) => Some(c.as_ref()),
            _ => None,
        })
    }

    /// Servers that failed to start, with their errors.
    pub fn failures(&self) -> impl Iterator<Item = &McpError> {
        self.entries.iter().filter_map(|e| match &e.state {
            ServerState::Failed(error) => Some(error),
            _ => None,
        })
    }

    /// Lists every connected server's tools concurrently and builds the router. Servers whose
    /// listing fails are left out and reported.
    pub async fn tool_router(&self) -> (ToolRouter, Vec<McpError>) {
        let listings = join_all(
            self.connections()
                .map(|c| async move { (c.name(), c.list_tools().await) }),
        )
        .await;
        let mut errors = Vec::new();
        let mut catalog = Vec::new();
        for (name, listing) in listings {
            match listing {
                Ok(tools) => catalog.push((name, tools)),
                Err(error) => errors.push(error),
            }
        }
        (ToolRouter::new(catalog), errors)
    }

    /// Tells every connected server that the host's roots changed.
    pub async fn roots_changed(&self) -> Vec<McpError> {
        join_all(self.connections().map(ServerConnection::roots_changed))
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect()
    }

    /// Closes every connection concurrently.
    pub async fn shutdown(self) {
        join_all(self.entries.into_iter().filter_map(|e| match e.state {
            ServerState::Connected(c) => Some(c.close()),
            _ => None,
        }))
        .await;
    }
}

fn unknown_server(servers: &[ServerConfig], name: &str) -> McpError {
    let names = || servers.iter().map(|s| s.name.as_str());
    let suggestions = near_matches(name, names());
    McpError::UnknownServer {
        name: name.to_string(),
        known: if suggestions.is_empty() && servers.len() <= 10 {
            names().map(str::to_string).collect()
        } else {
            Vec::new()
        },
        suggestions,
    }
}
