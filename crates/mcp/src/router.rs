//! Qualified tool names and the router that maps them back to a server and a tool.
//!
//! Every provider accepts tool names matching `^[a-zA-Z0-9_-]{1,64}$`, and tools from
//! different servers may share a name, so the model sees `server__tool`: both parts with
//! other characters replaced by `_`. When that is longer than 64 characters, or two tools
//! sanitise to the same string, the name is shortened and given an 8-hex-digit hash of the
//! original pair, which keeps it stable across runs and unique.

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use tether_protocol::{QualifiedTool, Tool};

/// Longest name every provider accepts.
pub const MAX_TOOL_NAME_LEN: usize = 64;
const SEPARATOR: &str = "__";

/// Maps qualified names to the server and tool they stand for.
#[derive(Debug, Clone, Default)]
pub struct ToolRouter {
    tools: Vec<QualifiedTool>,
    by_name: HashMap<String, usize>,
}

impl ToolRouter {
    /// Builds the router from each server's tools, in order; earlier tools keep the plain
    /// name when two collide.
    pub fn new<'a>(servers: impl IntoIterator<Item = (&'a str, Vec<Tool>)>) -> ToolRouter {
        let mut router = ToolRouter::default();
        for (server, tools) in servers {
            for tool in tools {
                let mut name = qualify(server, &tool.name);
                if router.by_name.contains_key(&name) {
                    name = hashed(server, &tool.name);
                }
                router.by_name.insert(name.clone(), router.tools.len());
                router.tools.push(QualifiedTool {
                    qualified_name: name,
                    server: server.to_string(),
                    tool,
                });
            }
        }
        router
    }

    /// Every tool, in server then tool order.
    pub fn tools(&self) -> &[QualifiedTool] {
        &self.tools
    }

    /// The tool a qualified name stands for.
    pub fn resolve(&self, qualified_name: &str) -> Option<&QualifiedTool> {
        self.by_name.get(qualified_name).map(|&i| &self.tools[i])
    }

    /// Every qualified name, for suggestions.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.iter().map(|t| t.qualified_name.as_str())
    }
}

fn sanitize(part: &str) -> String {
    part.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The plain qualified name `server__tool`, hashed only if it is too long.
pub fn qualify(server: &str, tool: &str) -> String {
    let name = format!("{}{SEPARATOR}{}", sanitize(server), sanitize(tool));
    if name.len() <= MAX_TOOL_NAME_LEN && !name.is_empty() {
        name
    } else {
        hashed(server, tool)
    }
}

/// A name shortened to fit, ending in `_` and 8 hex digits of the original pair's hash.
fn hashed(server: &str, tool: &str) -> String {
    let digest = Sha256::digest(format!("{server}\0{tool}").as_bytes());
    let suffix: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let mut base = format!("{}{SEPARATOR}{}", sanitize(server), sanitize(tool));
    // Sanitised names are ASCII, so byte truncation stays on a char boundary.
    base.truncate(MAX_TOOL_NAME_LEN - suffix.len() - 1);
    format!("{base}_{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Tool {
        serde_json::from_value(json!({"name": name})).unwrap()
    }

    fn valid(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn plain_names_are_server_double_underscore_tool() {
        assert_eq!(qualify("everything", "get-sum"), "everything__get-sum");
        assert_eq!(qualify("my files", "read.file"), "my_files__read_file");
    }

    #[test]
    fn long_and_colliding_names_get_a_stable_hash() {
        let long = "x".repeat(80);
        let q = qualify("srv", &long);
        assert!(valid(&q) && q.len() == 64, "{q}");
        assert_eq!(q, qualify("srv", &long), "stable across calls");

        let router = ToolRouter::new([("a", vec![tool("read.file"), tool("read_file")])]);
        let names: Vec<&str> = router.names().collect();
        assert_eq!(names[0], "a__read_file");
        assert_ne!(names[0], names[1]);
        assert!(names.iter().all(|n| valid(n)), "{names:?}");
        assert_eq!(router.resolve(names[1]).unwrap().tool.name, "read_file");
    }

    #[test]
    fn router_maps_back_across_servers() {
        let router = ToolRouter::new([("a", vec![tool("echo")]), ("b", vec![tool("echo")])]);
        assert_eq!(router.resolve("b__echo").unwrap().server, "b");
        assert!(router.resolve("c__echo").is_none());
    }
}
