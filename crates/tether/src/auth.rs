//! `tether auth login|logout|status`: OAuth sign-in for HTTP servers. The flow itself lives
//! in `tether_mcp::auth`; this is the command line around it.

use std::sync::Arc;

use serde_json::json;
use tether_mcp::auth::{
    self, CredentialFile, LoopbackBrowser, TokenStore, credentials_path, server_url,
};
use tether_mcp::{HeadlessHost, McpError, ServerConfig, ServerConnection, Transport};

use crate::{Failure, render};

/// What `tether auth` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum AuthAction {
    /// Sign in to an HTTP server: prints the authorization URL, waits for the browser's
    /// redirect on 127.0.0.1, saves the tokens.
    Login {
        /// Server name.
        server: String,
    },
    /// Forget a server's saved tokens.
    Logout {
        /// Server name.
        server: String,
    },
    /// Show saved sign-ins: issuer, client id, scopes, token age.
    Status {
        /// Only this server.
        server: Option<String>,
    },
}

fn find<'a>(servers: &'a [ServerConfig], name: &str) -> Result<&'a ServerConfig, Failure> {
    servers.iter().find(|s| s.name == name).ok_or_else(|| {
        let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        Failure::usage(format!(
            "unknown server \"{name}\"; configured: {}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        ))
    })
}

fn store() -> Result<std::path::PathBuf, Failure> {
    credentials_path().ok_or_else(|| {
        Failure::usage("cannot find the user config dir for saved tokens; set TETHER_CREDENTIALS")
    })
}

/// Runs one `tether auth` action.
pub async fn command(
    servers: &[ServerConfig],
    action: AuthAction,
    json: bool,
) -> Result<(), Failure> {
    match action {
        AuthAction::Login { server } => login(find(servers, &server)?, json).await,
        AuthAction::Logout { server } => {
            let config = find(servers, &server)?;
            let url = server_url(config)?;
            let removed = CredentialFile::new(&store()?, url)
                .remove()
                .map_err(Failure::usage)?;
            if json {
                render::print_json(&json!({"server": server, "signedOut": removed}));
            } else if removed {
                safe_println!("signed out of \"{server}\"");
            } else {
                safe_println!("no saved sign-in for \"{server}\"");
            }
            Ok(())
        }
        AuthAction::Status { server } => {
            let path = store()?;
            let selected: Vec<&ServerConfig> = match &server {
                Some(name) => vec![find(servers, name)?],
                None => servers
                    .iter()
                    .filter(|s| matches!(s.transport, Transport::Http { .. }))
                    .collect(),
            };
            let mut rows = Vec::new();
            for config in selected {
                let url = server_url(config)?;
                let saved = CredentialFile::new(&path, url)
                    .saved()
                    .map_err(Failure::usage)?;
                rows.push(match saved {
                    Some(saved) => {
                        let saved = serde_json::to_value(saved).unwrap_or_default();
                        json!({"server": config.name, "url": url, "signedIn": true,
                               "issuer": saved["issuer"], "clientId": saved["client_id"],
                               "scopes": saved["granted_scopes"],
                               "receivedAt": saved["token_received_at"],
                               "expiresIn": saved["token_response"]["expires_in"]})
                    }
                    None => json!({"server": config.name, "url": url, "signedIn": false}),
                });
            }
            if json {
                render::print_json(&json!({"credentials": path, "servers": rows}));
                return Ok(());
            }
            if rows.is_empty() {
                safe_println!("no HTTP servers configured");
            }
            for row in rows {
                let name = row["server"].as_str().unwrap_or_default();
                if row["signedIn"] == true {
                    let scopes: Vec<&str> = row["scopes"]
                        .as_array()
                        .map(|s| s.iter().filter_map(|s| s.as_str()).collect())
                        .unwrap_or_default();
                    safe_println!(
                        "{name}: signed in (issuer {}, client {}, scopes: {})",
                        row["issuer"].as_str().unwrap_or("unknown"),
                        row["clientId"].as_str().unwrap_or("?"),
                        if scopes.is_empty() {
                            "none listed".to_string()
                        } else {
                            scopes.join(" ")
                        }
                    );
                } else {
                    safe_println!("{name}: not signed in");
                }
            }
            Ok(())
        }
    }
}

async fn login(config: &ServerConfig, json: bool) -> Result<(), Failure> {
    let path = store()?;
    let url = server_url(config)?.to_string();
    let previous: Vec<String> = CredentialFile::new(&path, &url)
        .saved()
        .ok()
        .flatten()
        .map(|saved| saved.granted_scopes)
        .unwrap_or_default();
    // Ask the server first: its 401 names the authorization server and the scopes.
    let challenge =
        match ServerConnection::connect_authorized(config, Arc::new(HeadlessHost), None).await {
            Ok(connection) => {
                connection.close().await;
                None
            }
            Err(McpError::SignInRequired { challenge, .. }) => challenge,
            Err(other) => return Err(other.into()),
        };
    let browser = LoopbackBrowser::bind()?;
    let (_authorization, grant) = auth::sign_in(
        config,
        challenge.as_deref(),
        &previous,
        TokenStore::File(path.clone()),
        &browser,
    )
    .await?;
    if json {
        render::print_json(&json!({
            "server": config.name, "issuer": grant.issuer, "clientId": grant.client_id,
            "scopes": grant.scopes, "credentials": path,
        }));
    } else {
        safe_println!(
            "signed in to \"{}\" (issuer {}, scopes: {}); tokens saved in {}",
            config.name,
            grant.issuer.as_deref().unwrap_or("unknown"),
            if grant.scopes.is_empty() {
                "none listed".to_string()
            } else {
                grant.scopes.join(" ")
            },
            path.display()
        );
    }
    Ok(())
}
