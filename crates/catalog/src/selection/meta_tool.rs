//! `meta` mode: one `mcp_query` tool in front of every server, its description listing them
//! in as much detail as fits; for the embedded model, narrowed to the tools pre-selected for
//! the message, one grammar alternative each.

use std::sync::Mutex;

use serde_json::{Value, json};
use tether_protocol::chat::ToolDefinition;

use super::{
    META_DESCRIPTION_BUDGET, META_TOOL, Resolved, SelectionMode, SelectionOptions, ToolSelection,
    pre_selection, resolve_direct, servers_of,
};
use crate::catalog::{Snapshot, one_line, schema_problems};

/// One `mcp_query` tool in front of every server.
#[derive(Debug)]
pub struct MetaTool {
    options: SelectionOptions,
    /// Without search (the embedded model): the tools pre-selected for this turn, which
    /// `mcp_query` is narrowed to.
    preselected: Mutex<Vec<String>>,
}

impl MetaTool {
    /// The meta-tool selection.
    pub fn new(options: SelectionOptions) -> MetaTool {
        MetaTool {
            options,
            preselected: Mutex::new(Vec::new()),
        }
    }

    /// `mcp_query` narrowed to `names`: the description lists only them, and the parameters
    /// are one alternative per tool (`server` and `tool` fixed, `params` that tool's schema),
    /// which a grammar can follow exactly. A small model then fills in one shape instead of
    /// choosing a server and a tool name from free text.
    pub fn narrowed_definition(snapshot: &Snapshot, names: &[String]) -> ToolDefinition {
        let mut description = String::from(
            "Call a tool of one of the connected MCP servers: give \"server\", \"tool\" and \"params\" (the tool's arguments). Tools:",
        );
        let mut alternatives = Vec::new();
        for name in names {
            let Some(position) = snapshot.position(name) else {
                continue;
            };
            let tool = &snapshot.tools()[position];
            description.push_str(&format!(
                "\n- server \"{}\", tool \"{}\": {}",
                tool.server,
                tool.tool.name,
                one_line(tool.tool.description.as_deref().unwrap_or(""), 120)
            ));
            let schema = &snapshot.definitions()[position].parameters;
            // A tool without required arguments gets `{}`, as a direct call in the grammar does.
            let params = if schema["required"].as_array().is_some_and(|r| !r.is_empty()) {
                schema.clone()
            } else {
                json!({"const": {}})
            };
            alternatives.push(json!({
                "type": "object",
                "properties": {
                    "server": {"const": tool.server},
                    "tool": {"const": tool.tool.name},
                    "params": params,
                },
                "required": ["server", "tool", "params"]
            }));
        }
        ToolDefinition {
            name: META_TOOL.into(),
            description,
            parameters: json!({"type": "object", "oneOf": alternatives}),
        }
    }

    /// `mcp_query`'s definition: its description lists servers and tools, in as much detail
    /// as fits the budget (one-line descriptions, else names, else counts and the search).
    pub fn definition(snapshot: &Snapshot) -> ToolDefinition {
        let servers: Vec<&str> = snapshot
            .servers()
            .iter()
            .filter(|s| !s.tools.is_empty())
            .map(|s| s.server.as_str())
            .collect();
        let head = "Call a tool of one of the connected MCP servers: give \"server\", \"tool\" (its name on that \
                    server) and \"params\" (the tool's arguments). To find a tool or see its parameters, call with \
                    only \"query\" (words saying what it should do, or the tool's name).";
        let mut description = String::new();
        for detail in [2, 1, 0] {
            description = format!("{head}\n{}", listing(snapshot, detail));
            if description.len().div_ceil(4) <= META_DESCRIPTION_BUDGET {
                break;
            }
        }
        ToolDefinition {
            name: META_TOOL.into(),
            description,
            parameters: json!({
                "type": "object",
                "properties": {
                    "server": {"type": "string", "enum": servers, "description": "The server that has the tool"},
                    "tool": {"type": "string", "description": "The tool's name on that server"},
                    "params": {"type": "object", "description": "The tool's arguments, as its schema says"},
                    "query": {"type": "string", "description": "Instead of calling: find tools and their parameters"}
                }
            }),
        }
    }

    fn query(&self, snapshot: &Snapshot, query: &str) -> Resolved {
        let hits = snapshot.search(query, self.options.search_limit);
        if hits.is_empty() {
            return Resolved::Answered {
                text: format!("No tool matches \"{query}\"; try other words."),
                loaded: Vec::new(),
            };
        }
        let mut text =
            String::from("Matching tools (call mcp_query with server, tool and params):\n");
        for hit in hits {
            let tool = &snapshot.tools()[hit.index];
            text.push_str(&format!(
                "- server \"{}\", tool \"{}\": {} Parameters: {}\n",
                tool.server,
                tool.tool.name,
                one_line(tool.tool.description.as_deref().unwrap_or(""), 160),
                tool.tool.input_schema
            ));
        }
        Resolved::Answered {
            text: text.trim_end().to_string(),
            loaded: Vec::new(),
        }
    }
}

/// Servers and their tools at three levels of detail: 2 one-line descriptions, 1 names, 0
/// counts.
fn listing(snapshot: &Snapshot, detail: u8) -> String {
    let mut text = String::from("Servers:");
    for server in snapshot.servers().iter().filter(|s| !s.tools.is_empty()) {
        match detail {
            2 => {
                text.push_str(&format!("\n{}:", server.server));
                for tool in &server.tools {
                    text.push_str(&format!(
                        "\n- {}: {}",
                        tool.name,
                        one_line(tool.description.as_deref().unwrap_or(""), 80)
                    ));
                }
            }
            1 => {
                let names: Vec<&str> = server.tools.iter().map(|t| t.name.as_str()).collect();
                text.push_str(&format!("\n{}: {}", server.server, names.join(", ")));
            }
            _ => text.push_str(&format!(
                "\n{} ({} tools; find them with \"query\")",
                server.server,
                server.tools.len()
            )),
        }
    }
    text
}

impl ToolSelection for MetaTool {
    fn mode(&self) -> SelectionMode {
        SelectionMode::Meta
    }

    fn start_turn(&self, snapshot: &Snapshot, user_text: &str) -> Vec<String> {
        if self.options.search_tool || self.options.preload == 0 {
            return Vec::new();
        }
        let (hits, _) = pre_selection(&self.options, snapshot, user_text);
        let names: Vec<String> = hits
            .into_iter()
            .filter(|h| !snapshot.always_loaded(h.index))
            .map(|h| snapshot.tools()[h.index].qualified_name.clone())
            .collect();
        if let Ok(mut preselected) = self.preselected.lock() {
            preselected.clone_from(&names);
        }
        names
    }

    fn offer(&self, snapshot: &Snapshot) -> Vec<ToolDefinition> {
        let mut offered = snapshot.always_loaded_definitions();
        let preselected = self.loaded();
        if !preselected.is_empty() {
            offered.push(MetaTool::narrowed_definition(snapshot, &preselected));
        } else if !snapshot.tools().is_empty() {
            offered.push(MetaTool::definition(snapshot));
        }
        offered
    }

    fn loaded(&self) -> Vec<String> {
        self.preselected
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    fn reachable_servers(&self, snapshot: &Snapshot) -> Option<Vec<String>> {
        let preselected = self.loaded();
        (!self.options.search_tool && !preselected.is_empty())
            .then(|| servers_of(snapshot, &preselected))
    }

    fn resolve(&self, snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved {
        if name != META_TOOL {
            return resolve_direct(snapshot, name, arguments);
        }
        let text = |key: &str| {
            arguments
                .get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
        };
        let (server, tool) = (text("server"), text("tool"));
        if let (Some(query), None) = (text("query"), tool) {
            return self.query(snapshot, query);
        }
        let servers: Vec<&str> = snapshot
            .servers()
            .iter()
            .map(|s| s.server.as_str())
            .collect();
        let Some(tool) = tool else {
            return Resolved::Refused(
                "mcp_query needs \"server\", \"tool\" and \"params\" to call a tool, or \"query\" to find one".into(),
            );
        };
        // A model may put the qualified name in "tool" and leave "server" out.
        let found = match server {
            Some(server) => snapshot.find(server, tool),
            None => snapshot.resolve(tool),
        };
        let Some(found) = found else {
            if let Some(server) = server
                && !servers.contains(&server)
            {
                return Resolved::Refused(format!(
                    "unknown server \"{server}\"; the servers are {}",
                    servers.join(", ")
                ));
            }
            let suggestions = snapshot.search(tool, 3);
            let near: Vec<String> = suggestions
                .iter()
                .map(|h| {
                    let t = &snapshot.tools()[h.index];
                    format!("server \"{}\" tool \"{}\"", t.server, t.tool.name)
                })
                .collect();
            return Resolved::Refused(format!(
                "no tool \"{tool}\"{}; {}",
                server
                    .map(|s| format!(" on server \"{s}\""))
                    .unwrap_or_default(),
                if near.is_empty() {
                    "find it with {\"query\": \"what it does\"}".to_string()
                } else {
                    format!("did you mean {}?", near.join(", or "))
                }
            ));
        };
        let params = match arguments.get("params") {
            None | Some(Value::Null) => Value::Object(Default::default()),
            Some(Value::String(text)) => {
                // Some models send the params object as a JSON string.
                serde_json::from_str(text).unwrap_or(Value::String(text.clone()))
            }
            Some(other) => other.clone(),
        };
        if !params.is_object() {
            return Resolved::Refused(format!(
                "\"params\" must be an object of the tool's arguments; {} takes {}",
                found.tool.name, found.tool.input_schema
            ));
        }
        if let Some(problems) = schema_problems(&found.tool.input_schema, &params) {
            return Resolved::Refused(format!(
                "params do not match the input schema of server \"{}\" tool \"{}\": {problems}. Its schema is {}; call again with params that match it.",
                found.server, found.tool.name, found.tool.input_schema
            ));
        }
        Resolved::Tool {
            tool: Box::new(found.clone()),
            arguments: params,
        }
    }
}
