//! The tester commands: each starts only the servers it needs, asks them, prints through
//! `render`, and shuts the servers down before returning.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tether_mcp::config::{adhoc_stdio, adhoc_url};
use tether_mcp::{Completion, Config, HostHandler, McpError, Root, ServerConfig, ServerRegistry};

use tether_agent::Settings;

use crate::host::{LOG_LEVELS, TerminalHost};

use crate::render;
use crate::{Command, Failure, GlobalArgs};

/// The roots offered to servers: `--root` flags, then `"roots"` in the config (paths relative to
/// the config file). None unless the user names some.
fn roots(
    global: &GlobalArgs,
    settings: &Settings,
    source: Option<&std::path::Path>,
) -> Result<Vec<Root>, Failure> {
    let mut dirs: Vec<(std::path::PathBuf, String)> = global
        .roots
        .iter()
        .map(|dir| (dir.clone(), format!("--root {}", dir.display())))
        .collect();
    {
        let base = source.and_then(std::path::Path::parent);
        for item in &settings.roots {
            let path = match item.strip_prefix("~/") {
                Some(rest) => dirs::home_dir().unwrap_or_default().join(rest),
                None => std::path::PathBuf::from(item),
            };
            let path = match base {
                Some(base) if path.is_relative() => base.join(path),
                _ => path,
            };
            dirs.push((path, format!("config: \"roots\": {item}")));
        }
    }
    let mut roots: Vec<Root> = Vec::new();
    for (dir, place) in dirs {
        let dir = std::path::absolute(&dir).map_err(|e| Failure::usage(format!("{place}: {e}")))?;
        let root = Root::directory(&dir);
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    Ok(roots)
}

/// Runs one command to completion.
pub async fn run(global: GlobalArgs, command: Command) -> Result<(), Failure> {
    let (servers, settings, source) = server_configs(&global)?;
    // The built-in server is added later, where a command needs it; --timeout holds for it too.
    let timeout = cli_timeout(&global)?;
    let json = global.json;
    let roots = roots(&global, &settings, source.as_deref())?;
    let log_level = LOG_LEVELS
        .iter()
        .position(|l| *l == global.log_level)
        .unwrap_or(1);
    let host = || TerminalHost::new(roots.clone(), log_level);
    let shared: Arc<dyn HostHandler> = Arc::new(host());
    match command {
        Command::Run {
            question,
            model,
            input,
        } => {
            if input.is_some() && question == "-" {
                return Err(Failure::usage(
                    "--input jsonl reads ops from standard input, so the question cannot come from there too; give it as an argument",
                ));
            }
            let question = if question == "-" {
                question_from_stdin()?
            } else {
                question
            };
            let servers = with_builtin(servers, timeout)?;
            let host = host();
            let ops_from_stdin = input == Some(crate::InputFormat::Jsonl);
            if json {
                let (args, question) = (model, question);
                return crate::json_run::run(
                    servers,
                    settings,
                    args,
                    question,
                    host,
                    ops_from_stdin,
                )
                .await;
            }
            if ops_from_stdin {
                return Err(Failure::usage(
                    "--input jsonl reads ops for the JSON event stream; add --json",
                ));
            }
            crate::run::run(servers, settings, model, question, host, source).await
        }
        Command::Chat { model, resume } => {
            let servers = with_builtin(servers, timeout)?;
            let host = host();
            let resume = resume.map(|id| Some(id).filter(|id| !id.is_empty()));
            crate::chat::chat(servers, settings, model, host, resume, source).await
        }
        Command::Sessions { action } => {
            let export = action.map(|crate::SessionsAction::Export { id }| id);
            crate::sessions::sessions_command(export, json)
        }
        Command::Model { action } => crate::models::model_command(&action).await,
        Command::Acp { model } => {
            crate::acp::serve(crate::acp::AcpConfig {
                servers,
                settings,
                args: model,
                log_level,
                timeout,
            })
            .await
        }
        Command::Serve { args } => {
            let servers = with_builtin(servers, timeout)?;
            crate::serve::serve(servers, &settings, args).await
        }
        Command::BuiltinServer { .. } => {
            let root = std::env::current_dir()
                .map_err(|e| Failure::usage(format!("cannot read the working directory: {e}")))?;
            tether_serve::builtin::BuiltinServer::new(root)
                .serve_stdio()
                .await
                .map_err(Failure::partial)
        }
        Command::ConformanceClient { url } => crate::conformance::run(url).await,
        Command::Auth { action } => crate::auth::command(&servers, action, json).await,
        Command::Servers if servers.is_empty() => {
            crate::tester::servers_command(&builtin_when_unconfigured(true, timeout)?, json, shared)
                .await
        }
        Command::Servers => crate::tester::servers_command(&servers, json, shared).await,
        Command::Pins { action } => {
            crate::tester::pins_command(&servers, action, json, shared).await
        }
        Command::Completions { .. } => Ok(()),
        Command::Batch { file } => {
            batch_command(
                &servers,
                &settings,
                &file,
                (json, global.strict),
                timeout,
                &shared,
            )
            .await
        }
        tester => {
            let only = tester_server(&tester).map(str::to_string);
            let registry = start(&servers, only.as_deref(), &shared, timeout).await?;
            let outcome = tester_command(&registry, &settings, tester, json).await;
            registry.shutdown().await;
            outcome
        }
    }
}

/// The one server a tester command names, if it names one.
fn tester_server(command: &Command) -> Option<&str> {
    match command {
        Command::Tools { server, .. }
        | Command::Resources { server }
        | Command::Prompts { server } => server.as_deref(),
        Command::Call { server, .. }
        | Command::Read { server, .. }
        | Command::Complete { server, .. }
        | Command::Prompt { server, .. } => Some(server),
        _ => None,
    }
}

/// Runs one tester command (tools, call, resources, read, complete, prompts, prompt) against
/// servers already started: one command's, or a whole batch's.
async fn tester_command(
    registry: &ServerRegistry,
    settings: &Settings,
    command: Command,
    json: bool,
) -> Result<(), Failure> {
    if let Some(server) = tester_server(&command) {
        crate::tester::single_failure(registry, server)?;
    }
    match command {
        Command::Tools {
            server,
            schema,
            search,
            limit,
            tokens,
        } => match (search, tokens) {
            (Some(query), _) => {
                let semantic = settings.semantic_search;
                crate::tester::tools_search_command(registry, &query, limit, json, semantic).await
            }
            (None, true) => crate::tester::tools_tokens_command(registry, settings, json).await,
            (None, false) => {
                crate::tester::tools_command(registry, server.as_deref(), json, schema).await
            }
        },
        Command::Call { server, tool, args } => {
            crate::tester::call_command(registry, &server, &tool, &args, json).await
        }
        Command::Resources { server } => {
            crate::tester::resources_command(registry, server.as_deref(), json).await
        }
        Command::Read { server, uri } => {
            crate::tester::read_command(registry, &server, &uri, json).await
        }
        Command::Complete {
            server,
            prompt,
            template,
            argument,
            value,
            context,
        } => {
            let context = context
                .iter()
                .map(|pair| match pair.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
                    _ => Err(Failure::usage(format!(
                        "--context \"{pair}\" is not NAME=VALUE"
                    ))),
                })
                .collect::<Result<std::collections::HashMap<_, _>, _>>()?;
            let target = match (&prompt, &template) {
                (Some(prompt), _) => Completion::Prompt(prompt),
                (None, Some(template)) => Completion::Template(template),
                (None, None) => {
                    return Err(Failure::usage(
                        "pass --prompt NAME or --template URI_TEMPLATE",
                    ));
                }
            };
            crate::tester::single_failure(registry, &server)?;
            let values = registry
                .connection(&server)?
                .complete(target, &argument, &value, &context)
                .await?;
            if json {
                render::print_json(&json!(values));
            } else {
                values.iter().for_each(|v| safe_println!("{v}"));
            }
            Ok(())
        }
        Command::Prompts { server } => {
            crate::tester::prompts_command(registry, server.as_deref(), json).await
        }
        Command::Prompt { server, name, args } => {
            crate::tester::prompt_command(registry, &server, &name, &args, json).await
        }
        other => Err(Failure::usage(format!(
            "`{}` cannot run in a batch; a batch runs tools, call, resources, read, complete, prompts and prompt",
            command_name(&other)
        ))),
    }
}

fn command_name(command: &Command) -> String {
    format!("{command:?}")
        .split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_lowercase()
}

/// `tether batch FILE`: every line a tester command, run in order against servers started once
/// (so a stateful server keeps its state from line to line). Blank lines and `#` comments are
/// skipped. A failing line prints its error, naming the line, and the batch goes on; the exit
/// code is the first failure's. Under `--strict` the first failure stops the batch.
async fn batch_command(
    servers: &[ServerConfig],
    settings: &Settings,
    file: &std::path::Path,
    (json, strict): (bool, bool),
    timeout: Option<Duration>,
    host: &Arc<dyn HostHandler>,
) -> Result<(), Failure> {
    let label = file.display().to_string();
    let text = if label == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| Failure::usage(format!("batch: cannot read standard input: {e}")))?;
        text
    } else {
        std::fs::read_to_string(file).map_err(|e| Failure::usage(format!("batch {label}: {e}")))?
    };
    // Every line is parsed before anything runs: a typo on line 9 should not come after
    // eight calls with side effects.
    let mut commands = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let place = format!("{label}:{}", index + 1);
        let words = shlex::split(line)
            .ok_or_else(|| Failure::usage(format!("{place}: unbalanced quotes in \"{line}\"")))?;
        let parsed = <crate::Cli as clap::Parser>::try_parse_from(
            std::iter::once("tether".to_string()).chain(words),
        )
        .map_err(|e| {
            let first = e.to_string();
            let first = first
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ");
            Failure::usage(format!("{place}: {first}"))
        })?;
        let command = parsed
            .command
            .ok_or_else(|| Failure::usage(format!("{place}: no command")))?;
        if tester_server(&command).is_none()
            && !matches!(
                command,
                Command::Tools { .. } | Command::Resources { .. } | Command::Prompts { .. }
            )
        {
            return Err(Failure::usage(format!(
                "{place}: `{}` cannot run in a batch; a batch runs tools, call, resources, read, complete, prompts and prompt",
                command_name(&command)
            )));
        }
        commands.push((place, line.to_string(), parsed.global.json || json, command));
    }
    let registry = start(servers, None, host, timeout).await?;
    let mut first_failure: Option<u8> = None;
    for (place, line, json, command) in commands {
        if !json {
            // On stderr, so standard output stays the commands' own output.
            safe_eprintln!("── {place}: {}", render::terminal_safe(&line));
        }
        if let Err(failure) = tester_command(&registry, settings, command, json).await {
            let message = failure
                .message
                .map(|m| format!("{place}: {m}"))
                .unwrap_or_else(|| format!("{place}: failed"));
            crate::render::print_error(&message, Some(failure.code));
            first_failure.get_or_insert(failure.code);
            if strict {
                break;
            }
        }
    }
    registry.shutdown().await;
    match first_failure {
        Some(code) => Err(Failure {
            code,
            message: None,
        }),
        None => Ok(()),
    }
}

/// The question of `tether run -`: standard input, whole, up to 1 MiB. Approvals then cannot be
/// asked at the terminal (its input is the question), so `ask` rules deny as with any pipe.
fn question_from_stdin() -> Result<String, Failure> {
    use std::io::Read;
    const LIMIT: u64 = 1 << 20;
    let mut question = String::new();
    std::io::stdin()
        .take(LIMIT + 1)
        .read_to_string(&mut question)
        .map_err(|e| {
            Failure::usage(format!(
                "run -: cannot read the question from standard input: {e}"
            ))
        })?;
    if question.len() as u64 > LIMIT {
        return Err(Failure::usage(
            "run -: the question on standard input is over 1 MiB; attach large text as a resource instead",
        ));
    }
    let question = question.trim().to_string();
    if question.is_empty() {
        return Err(Failure::usage(
            "run -: standard input was empty; pipe the question in (echo \"What is 2+3?\" | tether run -)",
        ));
    }
    Ok(question)
}

/// The servers of this run: ad-hoc flags, plus the config file when it is named or when no
/// ad-hoc server is given.
type Loaded = (Vec<ServerConfig>, Settings, Option<std::path::PathBuf>);

fn server_configs(global: &GlobalArgs) -> Result<Loaded, Failure> {
    let adhoc = !global.stdio.is_empty() || !global.url.is_empty();
    let (mut servers, settings, source) = if !adhoc || global.config.is_some() {
        let config = Config::discover(global.config.as_deref())?;
        // A file named on the command line with no ad-hoc server is there for its servers:
        // without any, the command would quietly use the built-in server instead.
        if let Some(path) = &global.config
            && !adhoc
            && !config.declares_servers
        {
            return Err(McpError::Config {
                place: path.display().to_string(),
                message: "no \"mcpServers\" key; Tether reads Claude Desktop's shape: {\"mcpServers\": {\"name\": {\"command\": …}}}".into(),
            }
            .into());
        }
        if global.strict
            && let Some(warning) = config.warnings.first()
        {
            return Err(Failure::usage(format!(
                "{warning} (--strict makes config warnings errors)"
            )));
        }
        for warning in &config.warnings {
            tracing::warn!("{warning}");
        }
        let settings = Settings::from_map(&config.settings).map_err(|error| {
            let place = config
                .source
                .as_ref()
                .map_or("config".to_string(), |p| p.display().to_string());
            Failure::usage(format!("{place}: {error}"))
        })?;
        (config.servers, settings, config.source)
    } else {
        (Vec::new(), Settings::default(), None)
    };
    let timeout = cli_timeout(global)?;
    let names =
        |servers: &[ServerConfig]| servers.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    for line in &global.stdio {
        let server = adhoc_stdio(line, &names(&servers))?;
        servers.push(server);
    }
    for url in &global.url {
        let server = adhoc_url(url, &names(&servers))?;
        servers.push(server);
    }
    if let Some(limit) = timeout {
        for server in &mut servers {
            server.timeout = limit;
            server.startup_timeout = limit;
        }
    }
    Ok((servers, settings, source))
}

/// `--timeout`, checked: every server's request and start-up limit, the built-in server's too.
fn cli_timeout(global: &GlobalArgs) -> Result<Option<Duration>, Failure> {
    global
        .timeout
        .map(|secs| {
            tether_mcp::config::duration_from_seconds(secs)
                .map_err(|why| Failure::usage(format!("--timeout {secs:e}: {why}")))
        })
        .transpose()
}

/// With no servers configured, `run` and `chat` get the built-in tools, spoken to over MCP
/// like any other server.
fn with_builtin(
    mut servers: Vec<ServerConfig>,
    timeout: Option<Duration>,
) -> Result<Vec<ServerConfig>, Failure> {
    if servers.is_empty() {
        servers.push(crate::engine::builtin_server(timeout)?);
    }
    Ok(servers)
}

/// The built-in server, for a tester command run where no servers are configured; `say` tells
/// the user so (not when they named `builtin` themselves).
fn builtin_when_unconfigured(
    say: bool,
    timeout: Option<Duration>,
) -> Result<Vec<ServerConfig>, Failure> {
    if say {
        safe_eprintln!(
            "note: no MCP servers configured, so this is the built-in server `run` and `chat` use here; pass --stdio \"COMMAND ARGS\" or --url URL, or write .tether.json (see README), to test your own"
        );
    }
    with_builtin(Vec::new(), timeout)
}

/// Starts one named server, or all of them.
async fn start(
    servers: &[ServerConfig],
    only: Option<&str>,
    host: &Arc<dyn HostHandler>,
    timeout: Option<Duration>,
) -> Result<ServerRegistry, Failure> {
    // With nothing configured the tester sees what `run` and `chat` would use: the built-in
    // tools.
    let builtin;
    let servers = if servers.is_empty() {
        builtin = builtin_when_unconfigured(only.is_none(), timeout)?;
        &builtin[..]
    } else {
        servers
    };
    match only {
        Some(name) => Ok(ServerRegistry::start_one(servers, name, host.clone()).await?),
        None => Ok(ServerRegistry::start(servers.to_vec(), host.clone()).await),
    }
}
