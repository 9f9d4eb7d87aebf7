//! What each tester command asks its servers and prints: `servers`, `tools` (with
//! `--search` and `--tokens`), `call`, `resources`, `read`, `prompts`, `prompt`, `pins`.

use std::sync::Arc;

use futures::future::join_all;
use serde_json::{Map, Value, json};
use tether_catalog::ToolCatalog;
use tether_mcp::{HostHandler, McpError, ServerConfig, ServerRegistry, ServerState};

use tether_agent::Settings;

use crate::Failure;
use crate::render;

pub(crate) async fn servers_command(
    servers: &[ServerConfig],
    json: bool,
    host: Arc<dyn HostHandler>,
) -> Result<(), Failure> {
    if servers.is_empty() {
        return Err(Failure::usage(
            "no MCP servers configured; pass --stdio \"COMMAND ARGS\" or --url URL, or write .tether.json (see README)",
        ));
    }
    let registry = ServerRegistry::start(servers.to_vec(), host).await;
    let rows = join_all(registry.entries().iter().map(|entry| async move {
        let mut row = json!({
            "name": entry.name(),
            "endpoint": entry.config.endpoint(),
        });
        match entry.state() {
            ServerState::Connected(c) => {
                let (tools, resources, templates, prompts) = tokio::join!(
                    c.list_tools(),
                    c.list_resources(),
                    c.list_resource_templates(),
                    c.list_prompts()
                );
                let summary = c.summary();
                row["status"] = json!("connected");
                row["implementation"] = json!(summary.implementation);
                row["version"] = json!(summary.version);
                row["protocolVersion"] = json!(summary.protocol_version);
                row["era"] = json!(summary.era);
                row["capabilities"] = json!(summary.capabilities);
                row["startMs"] = json!(c.startup_time().as_millis() as u64);
                let count = |r: Result<usize, McpError>, key: &str, row: &mut Value| match r {
                    Ok(n) => row[key] = json!(n),
                    Err(e) => {
                        row[key] = Value::Null;
                        row["error"] = json!(e.to_string());
                    }
                };
                count(tools.map(|v| v.len()), "tools", &mut row);
                count(resources.map(|v| v.len()), "resources", &mut row);
                count(templates.map(|v| v.len()), "resourceTemplates", &mut row);
                count(prompts.map(|v| v.len()), "prompts", &mut row);
                // A server that died after its handshake was started again for the listings.
                row["restarts"] = json!(c.restarts());
            }
            ServerState::Failed(error) => {
                row["status"] = json!("failed");
                row["startMs"] = json!(entry.elapsed().as_millis() as u64);
                row["error"] = json!(error.to_string());
            }
            ServerState::Disabled => row["status"] = json!("disabled"),
            // `servers` waits for every server, so none is left starting.
            ServerState::Starting => row["status"] = json!("starting"),
        }
        row
    }))
    .await;
    registry.shutdown().await;
    if json {
        render::print_json(&Value::Array(rows.clone()));
    } else {
        render::servers(&rows);
    }
    let failed: Vec<String> = rows
        .iter()
        .filter(|r| {
            r["status"] == "failed" || (r["status"] == "connected" && r.get("error").is_some())
        })
        .map(|r| r["error"].as_str().unwrap_or("failed").to_string())
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(Failure::partial(format!(
            "{} of {} servers failed; see {}",
            failed.len(),
            rows.len(),
            if json {
                "their \"error\" fields"
            } else {
                "the table above"
            }
        )))
    }
}

pub(crate) async fn tools_command(
    registry: &ServerRegistry,
    only: Option<&str>,
    json: bool,
    schema: bool,
) -> Result<(), Failure> {
    let (router, list_errors) = registry.tool_router().await;
    let tools: Vec<_> = router
        .tools()
        .iter()
        .filter(|t| only.is_none_or(|only| t.server == only))
        .cloned()
        .collect();
    if json {
        render::print_json(&json!(tools));
    } else {
        render::tools(&tools, schema, registry.connections().count() > 0);
    }
    let mut errors: Vec<String> = registry.failures().map(|e| e.to_string()).collect();
    errors.extend(list_errors.iter().map(|e| e.to_string()));
    partial_failure(errors)
}

/// `tools --search`: the catalogue's ranking for a query, best first.
pub(crate) async fn tools_search_command(
    registry: &ServerRegistry,
    query: &str,
    limit: usize,
    json: bool,
    semantic: bool,
) -> Result<(), Failure> {
    let (catalog, list_errors) = ToolCatalog::load(registry).await;
    if let Some(warning) = crate::semantic::attach(&catalog, semantic).await {
        safe_eprintln!("warning: {warning}");
    }
    let snapshot = catalog.snapshot();
    let hits = snapshot.search(query, limit.max(1));
    let rows: Vec<Value> = hits
        .iter()
        .map(|hit| {
            let tool = &snapshot.tools()[hit.index];
            json!({
                "name": tool.qualified_name,
                "server": tool.server,
                "tool": tool.tool.name,
                "score": (hit.score * 1000.0).round() / 1000.0,
                "exact": hit.exact,
                "description": tool.tool.description.clone().unwrap_or_default(),
            })
        })
        .collect();
    if json {
        render::print_json(&Value::Array(rows));
    } else if rows.is_empty() {
        safe_println!(
            "(no tool matches \"{query}\" among {} tools)",
            snapshot.tools().len()
        );
    } else {
        for (hit, row) in hits.iter().zip(&rows) {
            safe_println!(
                "{:>8.3}{} {}  {}",
                hit.score,
                if hit.exact { "=" } else { " " },
                row["name"].as_str().unwrap_or_default(),
                tether_catalog::one_line(row["description"].as_str().unwrap_or_default(), 100)
            );
        }
    }
    if let Some(names) = query.trim().strip_prefix("select:") {
        let missing = snapshot.unknown_selections(names);
        if !missing.is_empty() {
            safe_eprintln!("warning: no tool is named {}", missing.join(", "));
        }
    }
    let mut errors: Vec<String> = registry.failures().map(|e| e.to_string()).collect();
    errors.extend(list_errors.iter().map(|e| e.to_string()));
    partial_failure(errors)
}

/// `tools --tokens`: what tool definitions cost, per server and per request in each mode.
pub(crate) async fn tools_tokens_command(
    registry: &ServerRegistry,
    settings: &Settings,
    json: bool,
) -> Result<(), Failure> {
    let (catalog, list_errors) = ToolCatalog::load(registry).await;
    let snapshot = catalog.snapshot();
    let window = settings
        .context_window
        .unwrap_or(tether_catalog::selection::DEFAULT_CONTEXT_WINDOW);
    let servers: Vec<Value> = snapshot
        .servers()
        .iter()
        .map(|server| {
            let definitions: Vec<_> = snapshot
                .tools()
                .iter()
                .zip(snapshot.definitions())
                .filter(|(tool, _)| tool.server == server.server)
                .map(|(_, definition)| definition.clone())
                .collect();
            json!({
                "server": server.server,
                "tools": definitions.len(),
                "tokens": tether_catalog::estimate_tokens(&definitions),
                "alwaysLoad": server.always_load,
            })
        })
        .collect();
    let total = tether_catalog::estimate_tokens(snapshot.definitions());
    let modes = tether_catalog::tokens_per_mode(&snapshot, window);
    if json {
        let modes: Map<String, Value> = modes
            .iter()
            .map(|(mode, tokens)| (mode.as_str().to_string(), json!(tokens)))
            .collect();
        render::print_json(&json!({
            "servers": servers,
            "total": {"tools": snapshot.tools().len(), "tokens": total},
            "modes": modes,
            "contextWindow": window,
        }));
    } else {
        safe_println!("{:<24} {:>6} {:>9}", "server", "tools", "tokens");
        for server in &servers {
            safe_println!(
                "{:<24} {:>6} {:>9}{}",
                server["server"].as_str().unwrap_or_default(),
                server["tools"].as_u64().unwrap_or_default(),
                server["tokens"].as_u64().unwrap_or_default(),
                if server["alwaysLoad"] == true {
                    "  (alwaysLoad)"
                } else {
                    ""
                }
            );
        }
        safe_println!("{:<24} {:>6} {:>9}", "total", snapshot.tools().len(), total);
        safe_println!();
        safe_println!("tokens of tool definitions per request, before a search loads any tool:");
        for (mode, tokens) in &modes {
            let note = match mode {
                tether_catalog::SelectionMode::Auto => format!(
                    "  (all while the tools fit in {} tokens, a tenth of a {window}-token context window)",
                    window / 10
                ),
                tether_catalog::SelectionMode::Search => "  (+ each loaded tool)".to_string(),
                _ => String::new(),
            };
            safe_println!("  --tools {:<7} {:>9}{note}", mode.as_str(), tokens);
        }
    }
    let mut errors: Vec<String> = registry.failures().map(|e| e.to_string()).collect();
    errors.extend(list_errors.iter().map(|e| e.to_string()));
    partial_failure(errors)
}

pub(crate) async fn call_command(
    registry: &ServerRegistry,
    server: &str,
    tool: &str,
    words: &[String],
    json: bool,
) -> Result<(), Failure> {
    single_failure(registry, server)?;
    let connection = registry.connection(server)?;
    let spec = connection.find_tool(tool).await?;
    let arguments = crate::arguments::tool_arguments(words, &spec.input_schema)
        .map_err(|e| Failure::usage(format!("server \"{server}\": tool \"{tool}\": {e}")))?;
    let (progress_tx, mut progress_rx) =
        tokio::sync::mpsc::unbounded_channel::<tether_mcp::Progress>();
    let show_progress = async {
        let mut bar = render::ProgressBar::new(tool);
        while let Some(progress) = progress_rx.recv().await {
            // A task's steps are events of their own under --json, one line each before
            // the result.
            if json && let Some(task) = &progress.task {
                safe_println!(
                    "{}",
                    json!({"type": "task", "taskId": task.task_id, "status": task.status, "message": progress.message})
                );
            }
            bar.update(&progress);
        }
        bar.finish();
    };
    let (result, ()) = tokio::join!(
        connection.call_tool(tool, Some(arguments), Some(progress_tx)),
        show_progress
    );
    let result = result?;
    if json {
        render::print_json(&json!(result));
    } else {
        render::tool_result(server, tool, &result);
    }
    if result.is_error {
        if !json {
            safe_eprintln!(
                "error: server \"{server}\": tool \"{tool}\" returned an error (isError)"
            );
        }
        return Err(Failure::tool_error());
    }
    Ok(())
}

pub(crate) async fn resources_command(
    registry: &ServerRegistry,
    only: Option<&str>,
    json: bool,
) -> Result<(), Failure> {
    let connections = registry
        .connections()
        .filter(|c| only.is_none_or(|only| c.name() == only));
    let listings = join_all(connections.map(|c| async move {
        let (resources, templates) = tokio::join!(c.list_resources(), c.list_resource_templates());
        (c.name().to_string(), resources, templates)
    }))
    .await;
    let mut errors: Vec<String> = registry.failures().map(|e| e.to_string()).collect();
    let mut out = Vec::new();
    for (name, resources, templates) in listings {
        match (resources, templates) {
            (Ok(resources), Ok(templates)) => out.push((name, resources, templates)),
            (Err(e), _) | (_, Err(e)) => errors.push(e.to_string()),
        }
    }
    if json {
        let value: Vec<Value> = out
            .iter()
            .map(|(name, r, t)| json!({"server": name, "resources": r, "resourceTemplates": t}))
            .collect();
        render::print_json(&Value::Array(value));
    } else {
        render::resources(&out);
    }
    partial_failure(errors)
}

pub(crate) async fn read_command(
    registry: &ServerRegistry,
    server: &str,
    uri: &str,
    json: bool,
) -> Result<(), Failure> {
    single_failure(registry, server)?;
    let contents = registry.connection(server)?.read_resource(uri).await?;
    if json {
        render::print_json(&json!({ "contents": contents }));
    } else {
        render::resource_contents(server, &contents);
    }
    Ok(())
}

pub(crate) async fn prompts_command(
    registry: &ServerRegistry,
    only: Option<&str>,
    json: bool,
) -> Result<(), Failure> {
    let listings = join_all(
        registry
            .connections()
            .filter(|c| only.is_none_or(|only| c.name() == only))
            .map(|c| async move { (c.name().to_string(), c.list_prompts().await) }),
    )
    .await;
    let mut errors: Vec<String> = registry.failures().map(|e| e.to_string()).collect();
    let mut out = Vec::new();
    for (name, prompts) in listings {
        match prompts {
            Ok(prompts) => out.push((name, prompts)),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if json {
        let value: Vec<Value> = out
            .iter()
            .map(|(name, p)| json!({"server": name, "prompts": p}))
            .collect();
        render::print_json(&Value::Array(value));
    } else {
        render::prompts(&out);
    }
    partial_failure(errors)
}

pub(crate) async fn prompt_command(
    registry: &ServerRegistry,
    server: &str,
    name: &str,
    words: &[String],
    json: bool,
) -> Result<(), Failure> {
    single_failure(registry, server)?;
    let connection = registry.connection(server)?;
    let declared = crate::chat_input::declared_prompt_arguments(connection, name).await;
    let arguments = crate::arguments::prompt_arguments(words, &declared)
        .map_err(|e| Failure::usage(format!("server \"{server}\": prompt \"{name}\": {e}")))?;
    let result = connection.get_prompt(name, arguments).await?;
    if json {
        render::print_json(&json!(result));
    } else {
        render::prompt_result(server, &result);
    }
    Ok(())
}

/// `tether pins list|accept|reset`.
pub(crate) async fn pins_command(
    servers: &[ServerConfig],
    action: crate::PinsAction,
    json: bool,
    host: Arc<dyn HostHandler>,
) -> Result<(), Failure> {
    let path = crate::session::pins_path()
        .ok_or_else(|| Failure::usage("no data dir for tool pins; set TETHER_DATA_DIR"))?;
    let mut book =
        tether_catalog::PinBook::load(&path).map_err(|e| Failure::usage(e.to_string()))?;
    match action {
        crate::PinsAction::List => {
            if json {
                let rows: Vec<Value> = book
                    .servers()
                    .iter()
                    .map(|(name, pins)| {
                        json!({"server": name, "endpoint": pins.endpoint, "pinnedAt": pins.pinned_at,
                               "tools": pins.tools.iter().map(|(tool, pin)| json!({"name": tool, "sha256": pin.sha256})).collect::<Vec<_>>()})
                    })
                    .collect();
                safe_println!("{}", Value::Array(rows));
            } else if book.servers().is_empty() {
                safe_eprintln!(
                    "no pins yet ({}); they are taken the first time `run`, `chat` or `serve` sees a server",
                    path.display()
                );
            } else {
                for (name, pins) in book.servers() {
                    let line = format!(
                        "{name}  {} tools  pinned {}  {}",
                        pins.tools.len(),
                        pins.pinned_at,
                        pins.endpoint
                    );
                    safe_println!("{}", crate::render::terminal_safe(&line));
                }
            }
            Ok(())
        }
        crate::PinsAction::Accept { server } => {
            let registry = ServerRegistry::start_one(servers, &server, host).await?;
            let connection = registry.connection(&server)?;
            let listed = connection.list_tools().await;
            let endpoint = connection.config().endpoint();
            let instructions = connection.summary().instructions.clone();
            registry.shutdown().await;
            let tools = listed?;
            book.accept(&server, &endpoint, &tools, instructions.as_deref());
            book.save().map_err(|e| Failure::usage(e.to_string()))?;
            safe_eprintln!(
                "pinned {} tools of \"{server}\" as they are now",
                tools.len()
            );
            Ok(())
        }
        crate::PinsAction::Reset { server } => {
            if book.reset(server.as_deref()) {
                book.save().map_err(|e| Failure::usage(e.to_string()))?;
                safe_eprintln!(
                    "forgot the pins of {}; they are taken again on the next run",
                    server.map_or("every server".into(), |s| format!("\"{s}\""))
                );
            } else {
                safe_eprintln!(
                    "nothing was pinned{}",
                    server.map_or(String::new(), |s| format!(" for \"{s}\""))
                );
            }
            Ok(())
        }
    }
}

/// Fails with exit code 2 after the output if any server could not be used.
pub(crate) fn partial_failure(errors: Vec<String>) -> Result<(), Failure> {
    if errors.is_empty() {
        return Ok(());
    }
    let count = errors.len();
    for error in &errors[..count - 1] {
        crate::render::print_error(error, None);
    }
    Err(Failure::partial(errors[count - 1].clone()))
}

/// For a single-server command: the failure of that server, if it failed to start.
pub(crate) fn single_failure(registry: &ServerRegistry, server: &str) -> Result<(), Failure> {
    registry
        .connection(server)
        .map(|_| ())
        .map_err(Failure::from)
}
