//! Servers given on the command line (`--stdio "COMMAND ARGS"`, `--url URL`): their names,
//! derived from the command or the address unless written as `name=…`, never one already taken.

use super::*;

/// Splits an optional `NAME=` prefix off an ad-hoc server argument.
pub(super) fn split_explicit_name(arg: &str) -> (Option<&str>, &str) {
    match arg.split_once('=') {
        Some((name, rest))
            if !name.is_empty()
                && !rest.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
        {
            (Some(name), rest)
        }
        _ => (None, arg),
    }
}

/// Builds an ad-hoc stdio server from one shell-quoted command line (`--stdio "npx -y pkg"`),
/// optionally named explicitly (`--stdio "files=npx -y pkg"`).
pub fn adhoc_stdio(arg: &str, taken: &[String]) -> Result<ServerConfig, McpError> {
    let (explicit, command_line) = split_explicit_name(arg);
    let words = shlex::split(command_line)
        .filter(|w| !w.is_empty())
        .ok_or_else(|| McpError::Config {
            place: "--stdio".into(),
            message: format!("cannot split \"{command_line}\" into words; check the quotes"),
        })?;
    let (command, args) = words.split_first().ok_or_else(|| McpError::Config {
        place: "--stdio".into(),
        message: "the command is empty; write --stdio \"COMMAND ARGS\"".into(),
    })?;
    let base = explicit
        .map(str::to_string)
        .unwrap_or_else(|| derive_server_name(&words));
    let name = unique_name(&base, taken);
    Ok(ServerConfig::stdio(name, command.clone(), args.to_vec()))
}

/// Builds an ad-hoc Streamable HTTP server from `--url URL` or `--url NAME=URL`.
pub fn adhoc_url(arg: &str, taken: &[String]) -> Result<ServerConfig, McpError> {
    let (explicit, url) = split_explicit_name(arg);
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(McpError::Config {
            place: "--url".into(),
            message: format!("\"{url}\" is not an http:// or https:// URL"),
        });
    }
    let host = url.split("://").nth(1).unwrap_or(url);
    let host = host.split(['/', ':']).next().unwrap_or_default();
    let first_label = host.split('.').next().unwrap_or_default();
    let is_local = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok();
    let base = if let Some(name) = explicit {
        name.to_string()
    } else if is_local || first_label.is_empty() {
        "http".to_string()
    } else {
        sanitize_name(first_label)
    };
    Ok(ServerConfig::http(unique_name(&base, taken), url))
}

pub(super) fn unique_name(base: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == base) {
        return base.to_string();
    }
    (2..)
        .map(|n| format!("{base}-{n}"))
        .find(|candidate| !taken.iter().any(|t| t == candidate))
        .unwrap_or_else(|| base.to_string())
}

/// Guesses a short server name from a command line: the package or program, without runner
/// words (`npx -y`, `node`, `uvx`), scopes, versions and `mcp-server-` style prefixes, so
/// `npx -y @modelcontextprotocol/server-everything@2026.8.31` becomes `everything`.
pub fn derive_server_name(words: &[String]) -> String {
    const RUNNERS: &[&str] = &[
        "npx", "node", "bunx", "bun", "deno", "uvx", "uv", "pipx", "python", "python3", "run",
        "exec", "dlx", "pnpm", "yarn", "npm", "docker",
    ];
    // An entry file (`node …/filesystem/dist/index.js`) is named by the directory it belongs
    // to, past build directories; without that the next word (often a path such as `/tmp`)
    // named the server.
    const ENTRY_FILES: &[&str] = &[
        "index.js",
        "index.mjs",
        "index.cjs",
        "index.ts",
        "main.js",
        "cli.js",
        "server.js",
        "main.py",
        "server.py",
        "__main__.py",
    ];
    const BUILD_DIRS: &[&str] = &["dist", "build", "out", "lib", "src", "bin", "."];
    let candidate = words.iter().find_map(|w| {
        let base = w.rsplit('/').next().unwrap_or(w);
        if w.starts_with('-') || RUNNERS.contains(&base) || matches!(base, "dist" | "stdio") {
            return None;
        }
        if ENTRY_FILES.contains(&base) {
            // No project directory to go by: "server", not a later argument.
            let dir = w
                .rsplit('/')
                .skip(1)
                .find(|dir| !dir.is_empty() && !BUILD_DIRS.contains(dir));
            return Some(dir.unwrap_or_default().to_string());
        }
        Some(w.to_string())
    });
    let Some(word) = candidate else {
        return "server".into();
    };
    let mut name = word.as_str();
    // Scoped npm package "@scope/pkg@ver" or a path: keep the last segment.
    if let Some(rest) = name.strip_prefix('@') {
        name = rest;
    }
    name = name.rsplit('/').next().unwrap_or(name);
    name = name.split('@').next().unwrap_or(name);
    name = name.split("==").next().unwrap_or(name);
    for suffix in [".js", ".mjs", ".cjs", ".py", ".ts"] {
        name = name.strip_suffix(suffix).unwrap_or(name);
    }
    for prefix in ["mcp-server-", "server-", "mcp_server_", "mcp-"] {
        name = name.strip_prefix(prefix).unwrap_or(name);
    }
    for suffix in ["-mcp-server", "-mcp", "-server"] {
        name = name.strip_suffix(suffix).unwrap_or(name);
    }
    let name = sanitize_name(name);
    if name.is_empty() {
        "server".into()
    } else {
        name
    }
}

pub(super) fn sanitize_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect::<String>()
        .trim_matches('-')
        .to_string()
}
