//! OAuth 2.1 for remote servers, on rmcp's implementation of the MCP authorization spec
//! (protected-resource and authorization-server discovery, PKCE S256, resource indicators,
//! pre-registration / client ID metadata documents / dynamic registration, `iss` checks,
//! refresh). This module adds what a host needs around it: where tokens live (one file in
//! the user's config dir, mode 0600, one entry per server URL with the issuer that granted
//! it), how the user's browser step happens ([`BrowserStep`]), and per-server settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::auth::{
    AuthError, AuthorizationManager, AuthorizationRequest, CredentialStore,
    InMemoryCredentialStore, OAuthState, StoredCredentials,
};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::config::{ServerConfig, Transport};
use crate::error::McpError;
use crate::oauth_guard::{GuardHandle, GuardSettings, GuardedOAuthClient};

/// An authorization manager whose every request goes through Tether's OAuth network guard,
/// and a handle on what the guard refused.
async fn guarded_manager(
    name: &str,
    url: &str,
    settings: GuardSettings,
) -> Result<(AuthorizationManager, GuardHandle), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("bad URL {url}: {e}"))?;
    let client = GuardedOAuthClient::new(name, &parsed, settings).await?;
    let handle = client.handle();
    let manager = if settings.allow_private_addresses {
        // rmcp checks the hosts of discovered URLs itself before asking any client, and only
        // this constructor lets a private one through; the guard's resolver still filters
        // every name, and no redirect is followed.
        let mut manager = AuthorizationManager::new_allowing_private_addresses(url)
            .await
            .map_err(|e| e.to_string())?;
        manager
            .with_client(client.without_redirects())
            .map_err(|e| e.to_string())?;
        manager
    } else {
        AuthorizationManager::new_with_oauth_http_client(url, Arc::new(client))
            .await
            .map_err(|e| e.to_string())?
    };
    Ok((manager, handle))
}

/// Where saved tokens live: `$TETHER_CREDENTIALS` if set, else `tether/credentials.json` in
/// the user's config dir.
pub fn credentials_path() -> Option<PathBuf> {
    match std::env::var_os("TETHER_CREDENTIALS") {
        Some(path) if !path.is_empty() => Some(PathBuf::from(path)),
        _ => dirs::config_dir().map(|d| d.join("tether").join("credentials.json")),
    }
}

/// One server's entry in the credentials file. The file as a whole is a JSON object keyed
/// by server URL; rewriting it goes through a temporary file so a crash never truncates it.
#[derive(Debug, Clone)]
pub struct CredentialFile {
    path: PathBuf,
    server_url: String,
}

impl CredentialFile {
    /// The entry for `server_url` in the file at `path`.
    pub fn new(path: &Path, server_url: &str) -> CredentialFile {
        CredentialFile {
            path: path.to_path_buf(),
            server_url: server_url.to_string(),
        }
    }

    fn read_all(&self) -> Result<BTreeMap<String, Value>, String> {
        match std::fs::read_to_string(&self.path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| format!("{} is not valid JSON: {e}", self.path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(format!("cannot read {}: {e}", self.path.display())),
        }
    }

    fn write_all(&self, all: &BTreeMap<String, Value>) -> Result<(), String> {
        let fail = |e: std::io::Error| format!("cannot write {}: {e}", self.path.display());
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        let text = serde_json::to_string_pretty(all).map_err(|e| e.to_string())?;
        crate::private_files::write_atomically(&self.path, text.as_bytes()).map_err(fail)
    }

    /// The saved credentials, if any.
    pub fn saved(&self) -> Result<Option<StoredCredentials>, String> {
        let all = self.read_all()?;
        match all.get(&self.server_url) {
            Some(entry) => serde_json::from_value(entry.clone())
                .map(Some)
                .map_err(|e| {
                    format!(
                        "{}: entry for {}: {e}",
                        self.path.display(),
                        self.server_url
                    )
                }),
            None => Ok(None),
        }
    }

    /// Forgets this server's credentials; `true` if there were any.
    pub fn remove(&self) -> Result<bool, String> {
        let mut all = self.read_all()?;
        let existed = all.remove(&self.server_url).is_some();
        if existed {
            self.write_all(&all)?;
        }
        Ok(existed)
    }
}

fn store_error(message: String) -> AuthError {
    AuthError::InternalError(message)
}

#[async_trait::async_trait]
impl CredentialStore for CredentialFile {
    async fn load(&self) -> Result<Option<StoredCredentials>, AuthError> {
        self.saved().map_err(store_error)
    }

    async fn save(&self, credentials: StoredCredentials) -> Result<(), AuthError> {
        let mut all = self.read_all().map_err(store_error)?;
        let entry = serde_json::to_value(credentials).map_err(|e| store_error(e.to_string()))?;
        all.insert(self.server_url.clone(), entry);
        self.write_all(&all).map_err(store_error)
    }

    async fn clear(&self) -> Result<(), AuthError> {
        self.remove().map(|_| ()).map_err(store_error)
    }
}

/// The part of the flow that happens in a browser: the user signs in at the authorization
/// URL and the authorization server redirects to our redirect URI.
pub trait BrowserStep: Send + Sync {
    /// The redirect URI to register and send.
    fn redirect_uri(&self) -> String;
    /// Takes the user through `authorization_url` and returns the URL the authorization
    /// server redirected to (with `code`, `state` and possibly `iss`).
    fn authorize<'a>(
        &'a self,
        authorization_url: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<String, String>>;
}

/// The interactive browser step: a one-shot HTTP listener on 127.0.0.1 receives the
/// redirect. The URL is printed, never opened, so nothing happens without the user.
pub struct LoopbackBrowser {
    listener: std::sync::Mutex<Option<std::net::TcpListener>>,
    port: u16,
    /// How long to wait for the user.
    pub timeout: Duration,
}

impl LoopbackBrowser {
    /// Binds the redirect listener on an ephemeral loopback port.
    pub fn bind() -> Result<LoopbackBrowser, McpError> {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| McpError::Auth(format!("cannot listen for the OAuth redirect: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| McpError::Auth(format!("cannot listen for the OAuth redirect: {e}")))?
            .port();
        Ok(LoopbackBrowser {
            listener: std::sync::Mutex::new(Some(listener)),
            port,
            timeout: Duration::from_secs(300),
        })
    }
}

impl BrowserStep for LoopbackBrowser {
    fn redirect_uri(&self) -> String {
        format!("http://127.0.0.1:{}/callback", self.port)
    }

    fn authorize<'a>(
        &'a self,
        authorization_url: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let listener = self
                .listener
                .lock()
                .ok()
                .and_then(|mut l| l.take())
                .ok_or("the redirect listener was already used")?;
            let listener =
                tokio::net::TcpListener::from_std(listener).map_err(|e| e.to_string())?;
            // Not eprintln!: a closed standard error must not panic the sign-in.
            {
                use std::io::Write as _;
                let _ = writeln!(
                    std::io::stderr(),
                    "Open this URL in your browser to sign in (Tether does not open it for you):\n  {authorization_url}\nWaiting for the redirect to {} …",
                    self.redirect_uri()
                );
            }
            let wait = async {
                loop {
                    let (mut stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
                    let mut request = vec![0u8; 8192];
                    let read = stream.read(&mut request).await.map_err(|e| e.to_string())?;
                    let head = String::from_utf8_lossy(&request[..read]).into_owned();
                    let target = head
                        .lines()
                        .next()
                        .and_then(|line| line.split_whitespace().nth(1))
                        .unwrap_or_default()
                        .to_string();
                    if !target.starts_with("/callback") {
                        let _ = stream
                            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                            .await;
                        continue;
                    }
                    let body = "Tether is signed in. You can close this tab.";
                    let response = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(response.as_bytes()).await;
                    return Ok::<String, String>(format!("http://127.0.0.1:{}{target}", self.port));
                }
            };
            tokio::time::timeout(self.timeout, wait)
                .await
                .map_err(|_| format!("no sign-in within {}s", self.timeout.as_secs()))?
        })
    }
}

/// The headless browser step of automated clients and tests: fetch the authorization URL
/// without following redirects and take the `Location` the server answers with. Only for
/// authorization servers that approve without a person (the conformance suite's do).
pub struct HeadlessBrowser {
    /// The redirect URI to send.
    pub redirect_uri: String,
}

impl BrowserStep for HeadlessBrowser {
    fn redirect_uri(&self) -> String {
        self.redirect_uri.clone()
    }

    fn authorize<'a>(
        &'a self,
        authorization_url: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            let client = crate::http_client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .timeout(Duration::from_secs(30))
                .build()
                .map_err(|e| e.to_string())?;
            let response = client
                .get(authorization_url)
                .send()
                .await
                .map_err(|e| format!("cannot reach the authorization endpoint: {e}"))?;
            response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(str::to_string)
                .ok_or_else(|| {
                    format!(
                        "the authorization endpoint answered {} without a redirect",
                        response.status()
                    )
                })
        })
    }
}

/// What a completed sign-in granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The authorization server's issuer.
    pub issuer: Option<String>,
    /// The client id Tether used.
    pub client_id: String,
    /// Scopes granted.
    pub scopes: Vec<String>,
}

/// The scopes a `WWW-Authenticate: Bearer … scope="a b"` challenge asks for.
pub fn challenged_scopes(challenge: &str) -> Vec<String> {
    let Some(start) = challenge.find("scope=\"") else {
        return Vec::new();
    };
    let rest = &challenge[start + "scope=\"".len()..];
    rest.split('"')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// The MCP endpoint of an HTTP server, or an error for stdio servers (which need no OAuth).
pub fn server_url(config: &ServerConfig) -> Result<&str, McpError> {
    match &config.transport {
        Transport::Http { url, .. } | Transport::Sse { url, .. } => Ok(url),
        Transport::Stdio { .. } => Err(McpError::InvalidArguments(format!(
            "server \"{}\" runs over stdio; OAuth applies only to HTTP servers",
            config.name
        ))),
    }
}

/// Where a sign-in keeps its tokens.
#[derive(Debug, Clone)]
pub enum TokenStore {
    /// The credentials file (see [`credentials_path`]).
    File(PathBuf),
    /// Memory only, gone when the process ends.
    Memory,
}

/// A signed-in OAuth session for one server: it adds the bearer token to requests and
/// refreshes it. Pass it to [`ServerConnection::connect_authorized`](crate::ServerConnection::connect_authorized).
pub struct Authorization(pub(crate) AuthorizationManager);

impl std::fmt::Debug for Authorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authorization")
    }
}

/// Runs the authorization-code flow for `config` (answering `challenge`, a
/// `WWW-Authenticate` value, when the server sent one) and keeps the tokens in `store`.
pub async fn sign_in(
    config: &ServerConfig,
    challenge: Option<&str>,
    previous_scopes: &[String],
    store: TokenStore,
    browser: &dyn BrowserStep,
) -> Result<(Authorization, Grant), McpError> {
    let url = server_url(config)?;
    let name = &config.name;
    crate::http_client::install_tls_provider();
    let (manager, guard) = guarded_manager(name, url, config.oauth.guard())
        .await
        .map_err(|e| McpError::Auth(format!("server \"{name}\": OAuth setup failed: {e}")))?;
    let fail = |step: &str, e: AuthError| {
        McpError::Auth(format!("server \"{name}\": OAuth {step} failed: {e}"))
    };
    let mut state = OAuthState::Unauthorized(manager);
    if let OAuthState::Unauthorized(manager) = &mut state {
        match store {
            TokenStore::File(path) => manager.set_credential_store(CredentialFile::new(&path, url)),
            TokenStore::Memory => manager.set_credential_store(InMemoryCredentialStore::new()),
        }
    }
    let settings = &config.oauth;
    let mut request = AuthorizationRequest::new(browser.redirect_uri()).with_client_name("Tether");
    if let Some(challenge) = challenge {
        request = request.with_challenge(challenge);
    }
    if !settings.scopes.is_empty() {
        request = request.with_scopes(settings.scopes.iter().cloned());
    } else if !previous_scopes.is_empty() {
        // Step-up keeps what was granted and adds what the server now asks for (SEP-2350).
        let mut scopes = previous_scopes.to_vec();
        for scope in challenge.map(challenged_scopes).unwrap_or_default() {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        request = request.with_scopes(scopes);
    }
    if let Some(id) = &settings.client_id {
        request = request.with_preregistered_client(id.clone());
    }
    if let Some(secret) = &settings.client_secret {
        request = request.with_client_secret(secret.clone());
    }
    if let Some(document) = &settings.client_metadata_url {
        request = request.with_client_metadata_url(document.clone());
    }
    if let Err(e) = state.start_authorization(request).await {
        // A refusal by the network guard is the real cause of whatever rmcp reports.
        return Err(match guard.explain(url, challenge).await {
            Some(refusal) => {
                McpError::Auth(format!("server \"{name}\": OAuth discovery {refusal}"))
            }
            None => fail("discovery", e),
        });
    }
    let authorization_url = state
        .get_authorization_url()
        .await
        .map_err(|e| fail("authorization request", e))?;
    let callback = browser
        .authorize(&authorization_url)
        .await
        .map_err(|e| McpError::Auth(format!("server \"{name}\": sign-in failed: {e}")))?;
    state
        .handle_callback_url(&callback)
        .await
        .map_err(|e| fail("token exchange", e))?;
    let credentials = state
        .get_credentials()
        .await
        .map_err(|e| fail("token exchange", e))?;
    // The token response's `scope` is a space-separated list (RFC 6749 §5.1).
    let scopes = credentials
        .1
        .as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|t| t.get("scope").and_then(Value::as_str).map(str::to_string))
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    let manager = state
        .into_authorization_manager()
        .ok_or_else(|| McpError::Auth(format!("server \"{name}\": OAuth finished unauthorized")))?;
    let issuer = manager
        .resolve_metadata()
        .await
        .ok()
        .and_then(|r| r.metadata.issuer.clone());
    Ok((
        Authorization(manager),
        Grant {
            issuer,
            client_id: credentials.0,
            scopes,
        },
    ))
}

/// The saved authorization for `url`, ready to send its token, or `None` when nothing
/// usable is saved (the server's 401 then says what to do).
pub async fn saved_authorization(
    name: &str,
    url: &str,
    path: &Path,
    guard: GuardSettings,
) -> Option<Authorization> {
    let store = CredentialFile::new(path, url);
    match store.saved() {
        Ok(Some(_)) => {}
        Ok(None) => return None,
        Err(problem) => {
            tracing::warn!(server = name, "ignoring saved OAuth tokens: {problem}");
            return None;
        }
    }
    let mut manager = match guarded_manager(name, url, guard).await {
        Ok((manager, _)) => manager,
        Err(e) => {
            tracing::warn!(server = name, "cannot use saved OAuth tokens: {e}");
            return None;
        }
    };
    manager.set_credential_store(store);
    match manager.initialize_from_store().await {
        Ok(true) => Some(Authorization(manager)),
        Ok(false) => None,
        Err(e) => {
            tracing::warn!(server = name, "cannot use saved OAuth tokens: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_are_read_from_the_challenge() {
        assert_eq!(
            challenged_scopes(
                r#"Bearer error="insufficient_scope", scope="mcp:read mcp:write", resource_metadata="x""#
            ),
            vec!["mcp:read", "mcp:write"]
        );
        assert!(challenged_scopes("Bearer realm=\"x\"").is_empty());
    }

    #[tokio::test]
    async fn credentials_are_saved_per_server_with_private_permissions() {
        let dir = std::env::temp_dir().join(format!("tether-creds-{}", std::process::id()));
        let path = dir.join("credentials.json");
        let a = CredentialFile::new(&path, "https://a.example/mcp");
        let b = CredentialFile::new(&path, "https://b.example/mcp");
        let creds = StoredCredentials::new("client-a".into(), None, vec!["read".into()], Some(1))
            .with_issuer(Some("https://auth.a.example".into()));
        a.save(creds).await.unwrap();
        b.save(StoredCredentials::new(
            "client-b".into(),
            None,
            vec![],
            None,
        ))
        .await
        .unwrap();
        let loaded = a.load().await.unwrap().unwrap();
        assert_eq!(loaded.client_id, "client-a");
        assert_eq!(loaded.issuer.as_deref(), Some("https://auth.a.example"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        assert!(a.remove().unwrap());
        assert!(a.load().await.unwrap().is_none());
        assert_eq!(b.load().await.unwrap().unwrap().client_id, "client-b");
        let _ = std::fs::remove_dir_all(dir);
    }
}
