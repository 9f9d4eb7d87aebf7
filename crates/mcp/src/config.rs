//! The server configuration: the Claude Desktop `mcpServers` JSON shape plus Tether's
//! per-server extras, where to find the file, `${VAR}` substitution, and ad-hoc servers given
//! on the command line.
//!
//! Parsing is strict about types (a wrong type names the file, line, column and key) but
//! lenient about unknown keys, because configs written for other hosts carry their own extras
//! (`autoApprove`, `alwaysAllow`, …) and must keep working unchanged. Unknown keys that look
//! like a typo of ours are reported as warnings with the likely intended key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::McpError;

mod adhoc;

pub use adhoc::{adhoc_stdio, adhoc_url, derive_server_name};

/// Default time one request to a server may take.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time a server has to start and finish its handshake.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The name of the config file looked up in the working directory.
pub const LOCAL_CONFIG_FILE: &str = ".tether.json";

/// A loaded configuration: servers in file order.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where it came from, for error messages; `None` for ad-hoc or empty configs.
    pub source: Option<PathBuf>,
    /// Servers in the order the file lists them.
    pub servers: Vec<ServerConfig>,
    /// Problems that did not stop loading (unknown keys), one line each.
    pub warnings: Vec<String>,
    /// Top-level keys other than `mcpServers` (`model`, `approval`, …), for the layers that
    /// own them.
    pub settings: serde_json::Map<String, Value>,
    /// Whether the file has an `"mcpServers"` key (even an empty one).
    pub declares_servers: bool,
}

/// How to reach one server.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking JSON-RPC over stdin/stdout.
    Stdio {
        /// Program to run.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment (on top of a small safe inherited set).
        env: BTreeMap<String, String>,
        /// Working directory.
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at a URL.
    Http {
        /// Endpoint, e.g. `http://127.0.0.1:3001/mcp`.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
    /// The deprecated HTTP+SSE transport (`GET /sse`).
    Sse {
        /// The SSE endpoint.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The key under `mcpServers`.
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Time one request may take.
    pub timeout: Duration,
    /// Time to start and finish the handshake.
    pub startup_timeout: Duration,
    /// Listed but not started.
    pub disabled: bool,
    /// When set, only these tools (exact names or `*` globs) are offered.
    pub allowed_tools: Option<Vec<String>>,
    /// Tools never offered (exact names or `*` globs).
    pub disabled_tools: Vec<String>,
    /// Whether this server may have the model answer its `sampling/createMessage` requests.
    pub sampling: SamplingPolicy,
    /// `"protocolVersion"`: speak exactly this MCP revision instead of probing for the newest
    /// (skips the discovery round trip, and its 10 s wait on legacy servers that ignore it).
    pub protocol_version: Option<String>,
    /// `"oauth"`: how to identify Tether to the server's authorization server.
    pub oauth: OAuthSettings,
    /// `"alwaysLoad"`: its tools are sent on every request, whatever the tool-selection mode.
    pub always_load: bool,
    /// `"trustHints"`: its tools' `readOnlyHint` may let them run under `--approve never`.
    /// Annotations are the server's own claims, so only Tether's built-in server and servers
    /// the user vouches for get this.
    pub trust_hints: bool,
}

/// The MCP revisions Tether speaks, oldest first.
pub const PROTOCOL_VERSIONS: &[&str] = &[
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// `"sampling"` of a server: may it use the user's model?
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SamplingPolicy {
    /// Show the request and the draft answer and ask; refused when nobody can be asked.
    #[default]
    Ask,
    /// Answer without asking (also in non-interactive runs).
    Allow,
    /// Always refuse.
    Deny,
}

impl ServerConfig {
    /// A stdio server with default settings.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        Self::with_transport(
            name,
            Transport::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A Streamable HTTP server with default settings.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self::with_transport(
            name,
            Transport::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
        )
    }

    fn with_transport(name: impl Into<String>, transport: Transport) -> Self {
        ServerConfig {
            name: name.into(),
            transport,
            timeout: DEFAULT_REQUEST_TIMEOUT,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            disabled: false,
            allowed_tools: None,
            disabled_tools: Vec::new(),
            sampling: SamplingPolicy::Ask,
            protocol_version: None,
            oauth: OAuthSettings::default(),
            always_load: false,
            trust_hints: false,
        }
    }

    /// Whether the tool filters let `tool` through.
    pub fn offers_tool(&self, tool: &str) -> bool {
        let allowed = self
            .allowed_tools
            .as_ref()
            .is_none_or(|list| list.iter().any(|p| glob_match(p, tool)));
        allowed && !self.disabled_tools.iter().any(|p| glob_match(p, tool))
    }

    /// A one-line description of where the server lives, for listings.
    pub fn endpoint(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                let mut parts = vec![command.clone()];
                parts.extend(args.iter().cloned());
                shlex::try_join(parts.iter().map(String::as_str))
                    .unwrap_or_else(|_| parts.join(" "))
            }
            Transport::Http { url, .. } | Transport::Sse { url, .. } => url.clone(),
        }
    }
}

/// Matches `text` against a pattern where `*` stands for any run of characters.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let Some((first, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut remaining) = text.strip_prefix(first) else {
        return false;
    };
    let pieces: Vec<&str> = rest.split('*').collect();
    for (index, piece) in pieces.iter().enumerate() {
        let is_last = index + 1 == pieces.len();
        if is_last {
            return remaining.ends_with(piece);
        }
        match remaining.find(piece) {
            Some(at) => remaining = &remaining[at + piece.len()..],
            None => return false,
        }
    }
    true
}

/// The raw file shape. Unknown keys are kept so they can be warned about, not rejected.
#[derive(Deserialize)]
struct RawConfig {
    /// `None` when the file has no `"mcpServers"` key at all.
    #[serde(rename = "mcpServers", default)]
    mcp_servers: Option<serde_json::Map<String, Value>>,
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(rename = "type")]
    kind: Option<String>,
    timeout: Option<RawDuration>,
    startup_timeout: Option<RawDuration>,
    #[serde(default)]
    disabled: bool,
    allowed_tools: Option<Vec<String>>,
    #[serde(default)]
    disabled_tools: Vec<String>,
    sampling: Option<Value>,
    protocol_version: Option<String>,
    oauth: Option<Value>,
    #[serde(default)]
    always_load: bool,
    #[serde(default)]
    trust_hints: bool,
    #[serde(flatten)]
    other: serde_json::Map<String, Value>,
}

/// The top-level keys Tether reads (`"mcpServers"` and the settings front ends take).
const KNOWN_TOP_LEVEL_KEYS: &[&str] = &[
    "mcpServers",
    "model",
    "baseUrl",
    "toolSelection",
    "approval",
    "maxResultChars",
    "contextWindow",
    "roots",
    "semanticSearch",
    "$schema",
];

const KNOWN_SERVER_KEYS: &[&str] = &[
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "type",
    "timeout",
    "startupTimeout",
    "disabled",
    "allowedTools",
    "disabledTools",
    "sampling",
    "protocolVersion",
    "oauth",
    "alwaysLoad",
    "trustHints",
];

/// The longest timeout accepted anywhere: a year. Beyond that a number is a typo, and a
/// `Duration` of `1e30` seconds cannot even be built.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Seconds as a timeout: positive, finite and at most [`MAX_TIMEOUT`], else a message that
/// says which.
pub fn duration_from_seconds(seconds: f64) -> Result<Duration, String> {
    if !(seconds.is_finite() && seconds > 0.0) {
        return Err(format!("must be a positive duration, got {seconds}"));
    }
    match Duration::try_from_secs_f64(seconds) {
        Ok(duration) if duration <= MAX_TIMEOUT => Ok(duration),
        _ => Err(format!(
            "too long; give at most {} seconds (a year)",
            MAX_TIMEOUT.as_secs()
        )),
    }
}

/// A duration written as seconds (`30`, `2.5`) or with a unit (`"500ms"`, `"30s"`, `"2m"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Seconds(f64),
    Text(String),
}

impl RawDuration {
    fn to_duration(&self) -> Result<Duration, String> {
        let seconds = match self {
            RawDuration::Seconds(s) => *s,
            RawDuration::Text(text) => parse_duration_text(text)?,
        };
        duration_from_seconds(seconds)
    }
}

fn parse_duration_text(text: &str) -> Result<f64, String> {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = text.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = text.strip_suffix('m') {
        (n, 60.0)
    } else {
        (text, 1.0)
    };
    number
        .trim()
        .parse::<f64>()
        .map(|n| n * scale)
        .map_err(|_| {
            format!(
                "\"{text}\" is not a duration; write seconds (30) or \"500ms\", \"30s\", \"2m\""
            )
        })
}

impl Config {
    /// Finds the config: `explicit` if given (it must exist), else `./.tether.json`, else
    /// `<user config dir>/tether/config.json`; no file at all is an empty config.
    pub fn discover(explicit: Option<&Path>) -> Result<Config, McpError> {
        if let Some(path) = explicit {
            return Config::load(path);
        }
        let local = PathBuf::from(LOCAL_CONFIG_FILE);
        if local.is_file() {
            return Config::load(&local);
        }
        if let Some(user) = user_config_path()
            && user.is_file()
        {
            return Config::load(&user);
        }
        Ok(Config::default())
    }

    /// Reads and parses one file.
    pub fn load(path: &Path) -> Result<Config, McpError> {
        let text = std::fs::read_to_string(path).map_err(|e| McpError::Config {
            place: path.display().to_string(),
            message: format!("cannot read the file: {e}"),
        })?;
        Config::parse(&text, path)
    }

    /// Parses config text; `path` is only used to name the place in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, McpError> {
        Config::parse_with_env(text, path, &|name| std::env::var(name).ok())
    }

    /// Parses with an explicit environment lookup, so substitution is testable.
    pub fn parse_with_env(
        text: &str,
        path: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, McpError> {
        let file = path.display().to_string();
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let raw: RawConfig =
            serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
                let inner = err.inner();
                let key = err.path().to_string();
                let key = if key == "." {
                    String::new()
                } else {
                    format!(" at {key}")
                };
                McpError::Config {
                    place: format!("{file}:{}:{}", inner.line(), inner.column()),
                    message: format!("{}{key}", strip_position(&inner.to_string())),
                }
            })?;

        let declares_servers = raw.mcp_servers.is_some();
        if !declares_servers && let Some((key, message)) = misplaced_servers_key(&raw.other) {
            return Err(McpError::Config {
                place: format!("{file} ({})", line_of_key(text, key)),
                message,
            });
        }
        let mut config = Config {
            source: Some(path.to_path_buf()),
            declares_servers,
            ..Config::default()
        };
        // A typo at the top ("toolSelectoin") would otherwise be ignored without a word.
        for unknown in raw.other.keys() {
            if KNOWN_TOP_LEVEL_KEYS.contains(&unknown.as_str()) {
                continue;
            }
            let hint = strsim_suggest(unknown, KNOWN_TOP_LEVEL_KEYS)
                .map(|s| format!(" (did you mean \"{s}\"?)"))
                .unwrap_or_default();
            config.warnings.push(format!(
                "{file} ({}): unknown top-level key \"{unknown}\" ignored{hint}",
                line_of_key(text, unknown)
            ));
        }
        config.settings = raw.other;
        for (name, value) in raw.mcp_servers.unwrap_or_default() {
            let key = format!("mcpServers.{name}");
            let raw_server: RawServer =
                serde_path_to_error::deserialize(value).map_err(|err| McpError::Config {
                    place: format!("{file} ({})", line_of_key(text, &name)),
                    message: format!("{key}.{}: {}", err.path(), err.inner()),
                })?;
            for unknown in raw_server.other.keys() {
                let hint = strsim_suggest(unknown, KNOWN_SERVER_KEYS)
                    .map(|s| format!(" (did you mean \"{s}\"?)"))
                    .unwrap_or_default();
                config.warnings.push(format!(
                    "{file}: {key}: unknown key \"{unknown}\" ignored{hint}"
                ));
            }
            let server =
                build_server(&name, raw_server, env).map_err(|message| McpError::Config {
                    place: format!("{file} ({})", line_of_key(text, &name)),
                    message: format!("{key}: {message}"),
                })?;
            config.servers.push(server);
        }
        Ok(config)
    }

    /// A config made only of ad-hoc servers from the command line.
    pub fn from_servers(servers: Vec<ServerConfig>) -> Config {
        Config {
            servers,
            ..Config::default()
        }
    }

    /// Looks a server up by name.
    pub fn server(&self, name: &str) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| s.name == name)
    }
}

/// The user-wide config file location.
pub fn user_config_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("tether").join("config.json"))
}

/// serde_json appends " at line L column C"; we print the position ourselves.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// Finds the line where `"name":` appears so errors in a server block point at it.
fn line_of_key(text: &str, name: &str) -> String {
    let needle = format!("\"{name}\"");
    text.lines()
        .position(|line| line.contains(&needle))
        .map(|i| format!("line {}", i + 1))
        .unwrap_or_else(|| "server block".to_string())
}

/// A top-level key that was meant to be `"mcpServers"`: VS Code's `"servers"` (its `mcp.json`
/// shape) or a near miss (`"mcpServer"`, `"mcp_servers"`). Either would otherwise leave the file
/// with no servers, and Tether would quietly run with the built-in one. The key and the message.
fn misplaced_servers_key(top: &serde_json::Map<String, Value>) -> Option<(&str, String)> {
    if let Some((key, _)) = top.get_key_value("servers") {
        return Some((
            key.as_str(),
            "\"servers\" is VS Code's mcp.json shape; Tether reads Claude Desktop's: rename \"servers\" to \"mcpServers\" (entries with \"type\": \"http\" take \"url\" as they are)".into(),
        ));
    }
    top.keys()
        .find(|key| {
            let folded: String = key
                .chars()
                .filter(|c| c.is_ascii_alphanumeric())
                .collect::<String>()
                .to_ascii_lowercase();
            folded == "mcpservers" || strsim::levenshtein(&folded, "mcpservers") <= 2
        })
        .map(|key| {
            (
                key.as_str(),
                format!("unknown key \"{key}\": did you mean \"mcpServers\"?"),
            )
        })
}

fn strsim_suggest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| {
            (
                strsim::jaro_winkler(&word.to_lowercase(), &c.to_lowercase()),
                *c,
            )
        })
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

fn build_server(
    name: &str,
    raw: RawServer,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ServerConfig, String> {
    let sub = |field: &str, value: &str| -> Result<String, String> {
        substitute(value, env).map_err(|e| format!("{field}: {e}"))
    };
    let sub_map = |field: &str, map: &BTreeMap<String, String>| {
        map.iter()
            .map(|(k, v)| Ok((k.clone(), sub(&format!("{field}.{k}"), v)?)))
            .collect::<Result<BTreeMap<_, _>, String>>()
    };
    let kind = raw.kind.as_deref().map(str::to_ascii_lowercase);
    let transport = match (&raw.command, &raw.url) {
        (Some(_), Some(_)) => {
            return Err(
                "has both \"command\" and \"url\"; keep one (command for stdio, url for HTTP)"
                    .into(),
            );
        }
        (None, None) => {
            return Err("needs \"command\" (a stdio server) or \"url\" (an HTTP server)".into());
        }
        (Some(command), None) => {
            if let Some(k) = kind.as_deref()
                && k != "stdio"
            {
                return Err(format!(
                    "\"type\": \"{k}\" needs a \"url\", but this server has a \"command\""
                ));
            }
            Transport::Stdio {
                command: sub("command", command)?,
                args: raw
                    .args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| sub(&format!("args[{i}]"), a))
                    .collect::<Result<_, _>>()?,
                env: sub_map("env", &raw.env)?,
                cwd: raw
                    .cwd
                    .as_deref()
                    .map(|c| sub("cwd", c))
                    .transpose()?
                    .map(PathBuf::from),
            }
        }
        (None, Some(url)) => {
            let url = sub("url", url)?;
            let headers = sub_map("headers", &raw.headers)?;
            match kind.as_deref() {
                None | Some("http") | Some("streamable-http") | Some("streamablehttp") => {
                    Transport::Http { url, headers }
                }
                Some("sse") => Transport::Sse { url, headers },
                Some(other) => {
                    return Err(format!(
                        "unknown \"type\": \"{other}\"; use \"http\" (Streamable HTTP) or \"sse\" (legacy HTTP+SSE)"
                    ));
                }
            }
        }
    };
    let duration = |field: &str, value: &Option<RawDuration>, default: Duration| {
        value
            .as_ref()
            .map(|d| d.to_duration().map_err(|e| format!("{field}: {e}")))
            .transpose()
            .map(|d| d.unwrap_or(default))
    };
    Ok(ServerConfig {
        name: name.to_string(),
        transport,
        timeout: duration("timeout", &raw.timeout, DEFAULT_REQUEST_TIMEOUT)?,
        startup_timeout: duration(
            "startupTimeout",
            &raw.startup_timeout,
            DEFAULT_STARTUP_TIMEOUT,
        )?,
        disabled: raw.disabled,
        allowed_tools: raw.allowed_tools,
        disabled_tools: raw.disabled_tools,
        sampling: match raw.sampling {
            None => SamplingPolicy::Ask,
            Some(value) => serde_json::from_value(value.clone()).map_err(|_| {
                format!("sampling: is {value}; expected \"ask\", \"allow\" or \"deny\"")
            })?,
        },
        protocol_version: match raw.protocol_version {
            Some(version) if !PROTOCOL_VERSIONS.contains(&version.as_str()) => {
                return Err(format!(
                    "protocolVersion: \"{version}\" is not an MCP revision Tether speaks; use one of {}",
                    PROTOCOL_VERSIONS.join(", ")
                ));
            }
            version => version,
        },
        oauth: match raw.oauth {
            None => OAuthSettings::default(),
            Some(value) => {
                let mut settings: OAuthSettings = serde_json::from_value(value)
                    .map_err(|e| format!("oauth: {e}; expected {{\"clientId\", \"clientSecret\", \"scopes\", \"clientMetadataUrl\", \"allowPrivateAddresses\", \"allowInsecureHttp\"}}"))?;
                settings.client_secret = settings
                    .client_secret
                    .map(|secret| sub("oauth.clientSecret", &secret))
                    .transpose()?;
                settings
            }
        },
        always_load: raw.always_load,
        trust_hints: raw.trust_hints,
    })
}

/// Expands `${VAR}` and `${VAR:-default}`; `$$` is a literal dollar. An unset variable with no
/// default is an error, because silently sending an empty token is worse than stopping.
pub fn substitute(value: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('{') {
            let Some(end) = body.find('}') else {
                return Err(format!("unclosed \"${{\" in \"{value}\""));
            };
            let inner = &body[..end];
            let (var, default) = match inner.split_once(":-") {
                Some((v, d)) => (v, Some(d)),
                None => (inner, None),
            };
            match (
                env(var).filter(|v| !v.is_empty() || default.is_none()),
                default,
            ) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => {
                    return Err(format!(
                        "environment variable {var} is not set; export it or write ${{{var}:-default}}"
                    ));
                }
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `"oauth"` of an HTTP server: how Tether identifies itself to the authorization server.
/// Everything is optional; with nothing set Tether registers itself dynamically.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OAuthSettings {
    /// A client id registered with the authorization server beforehand.
    pub client_id: Option<String>,
    /// Its secret, for confidential clients (use `${VAR}`).
    pub client_secret: Option<String>,
    /// Scopes to ask for instead of the ones the server advertises.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// An HTTPS URL of a client ID metadata document describing Tether.
    pub client_metadata_url: Option<String>,
    /// Let discovery reach an authorization server on a private network although the MCP
    /// server is not on one (see [`crate::oauth_guard`]).
    #[serde(default)]
    pub allow_private_addresses: bool,
    /// Let discovered OAuth URLs be plain http away from loopback.
    #[serde(default)]
    pub allow_insecure_http: bool,
}

impl OAuthSettings {
    /// The network guard's relaxations.
    pub fn guard(&self) -> crate::oauth_guard::GuardSettings {
        crate::oauth_guard::GuardSettings {
            allow_private_addresses: self.allow_private_addresses,
            allow_insecure_http: self.allow_insecure_http,
        }
    }
}

#[cfg(test)]
mod tests;
