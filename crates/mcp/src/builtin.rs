//! The built-in MCP server for the zero-config demo: a few safe, read-only tools (date and
//! time, arithmetic, reading files under the working directory). It runs as
//! `tether builtin-server` and Tether talks to it over stdio like any other server, so the
//! demo exercises the real protocol path.

use std::path::{Component, Path, PathBuf};

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value, json};
use tether_protocol::{ContentBlock, Tool, ToolResult};

use crate::serve::{Caller, McpService, ServeError, ServiceInfo, serve_stdio};

/// Largest file `read_file` returns, in bytes.
const MAX_FILE_BYTES: u64 = 100_000;

/// The built-in tools, confined to `root` for file access.
#[derive(Debug, Clone)]
pub struct BuiltinServer {
    root: PathBuf,
}

impl BuiltinServer {
    /// A server whose file tools see only `root` and below.
    pub fn new(root: PathBuf) -> BuiltinServer {
        BuiltinServer { root }
    }

    /// Serves MCP on stdin/stdout until the client goes away.
    pub async fn serve_stdio(self) -> Result<(), String> {
        serve_stdio(Arc::new(self)).await
    }
}

fn tool(name: &str, title: &str, description: &str, schema: Value) -> Tool {
    let value = json!({
        "name": name,
        "title": title,
        "description": description,
        "inputSchema": schema,
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false},
    });
    // The literal above is a valid Tool by construction; a failure would be a bug here.
    serde_json::from_value(value).unwrap_or_else(|_| Tool {
        name: name.to_string(),
        title: None,
        description: Some(description.to_string()),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        annotations: Default::default(),
    })
}

fn numbers_schema() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})
}

/// The tool list, in a fixed order.
fn builtin_tools() -> Vec<Tool> {
    vec![
        tool(
            "add",
            "Add",
            "Add two numbers: a + b (a plus b, their sum).",
            numbers_schema(),
        ),
        tool(
            "subtract",
            "Subtract",
            "Subtract two numbers: a - b (a minus b, the difference).",
            numbers_schema(),
        ),
        tool(
            "multiply",
            "Multiply",
            "Multiply two numbers: a * b (a times b, their product).",
            numbers_schema(),
        ),
        tool(
            "divide",
            "Divide",
            "Divide two numbers: a / b (a divided by b, the quotient).",
            numbers_schema(),
        ),
        tool(
            "current_time",
            "Current time",
            "The current date, time and weekday, in UTC or the machine's local time zone.",
            json!({"type": "object", "properties": {"zone": {"type": "string", "enum": ["utc", "local"]}}}),
        ),
        tool(
            "read_file",
            "Read file",
            "Read a text file under the current directory and show what is in it (read-only).",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        ),
        tool(
            "list_files",
            "List files",
            "List the files in a directory under the current directory.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        ),
    ]
}

fn text_result(text: String, is_error: bool) -> ToolResult {
    ToolResult {
        content: vec![ContentBlock::Text { text }],
        is_error,
        ..ToolResult::default()
    }
}

fn number(arguments: &Map<String, Value>, key: &str) -> Result<f64, String> {
    arguments
        .get(key)
        .and_then(|v| {
            v.as_f64()
                .or_else(|| v.as_str().and_then(|s| s.trim().parse().ok()))
        })
        .ok_or_else(|| format!("argument \"{key}\" must be a number"))
}

fn format_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

impl BuiltinServer {
    /// Resolves `path` inside the root, refusing anything that escapes it.
    fn confined(&self, path: &str) -> Result<PathBuf, String> {
        let relative = Path::new(path);
        if relative.is_absolute()
            || relative
                .components()
                .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(format!(
                "\"{path}\" is outside the current directory; give a relative path without \"..\""
            ));
        }
        let full = self.root.join(relative);
        let canonical = full
            .canonicalize()
            .map_err(|e| format!("cannot open \"{path}\": {e}"))?;
        let root = self
            .root
            .canonicalize()
            .map_err(|e| format!("cannot resolve the working directory: {e}"))?;
        if !canonical.starts_with(&root) {
            return Err(format!("\"{path}\" leads outside the current directory"));
        }
        Ok(canonical)
    }

    /// Runs one tool; errors are tool errors (`isError`), not protocol errors.
    pub fn call(&self, name: &str, arguments: &Map<String, Value>) -> Result<String, String> {
        match name {
            "add" | "subtract" | "multiply" | "divide" => {
                let (a, b) = (number(arguments, "a")?, number(arguments, "b")?);
                let value = match name {
                    "add" => a + b,
                    "subtract" => a - b,
                    "multiply" => a * b,
                    _ if b == 0.0 => return Err("cannot divide by zero".into()),
                    _ => a / b,
                };
                Ok(format_number(value))
            }
            "current_time" => {
                let local = arguments.get("zone").and_then(Value::as_str) == Some("local");
                Ok(if local {
                    chrono::Local::now()
                        .format("%Y-%m-%d %H:%M:%S %:z (%A)")
                        .to_string()
                } else {
                    chrono::Utc::now()
                        .format("%Y-%m-%d %H:%M:%S UTC (%A)")
                        .to_string()
                })
            }
            "read_file" => {
                let path = arguments
                    .get("path")
                    .and_then(Value::as_str)
                    .ok_or("argument \"path\" is required")?;
                let full = self.confined(path)?;
                let size = std::fs::metadata(&full)
                    .map_err(|e| format!("cannot read \"{path}\": {e}"))?
                    .len();
                if size > MAX_FILE_BYTES {
                    return Err(format!(
                        "\"{path}\" is {size} bytes; read_file returns files up to {MAX_FILE_BYTES} bytes"
                    ));
                }
                let bytes =
                    std::fs::read(&full).map_err(|e| format!("cannot read \"{path}\": {e}"))?;
                String::from_utf8(bytes).map_err(|_| format!("\"{path}\" is not a text file"))
            }
            "list_files" => {
                let path = arguments.get("path").and_then(Value::as_str).unwrap_or(".");
                let full = self.confined(path)?;
                let mut names: Vec<String> = std::fs::read_dir(&full)
                    .map_err(|e| format!("cannot list \"{path}\": {e}"))?
                    .filter_map(Result::ok)
                    .map(|e| {
                        let name = e.file_name().to_string_lossy().into_owned();
                        if e.path().is_dir() {
                            format!("{name}/")
                        } else {
                            name
                        }
                    })
                    .collect();
                names.sort();
                Ok(names.join("\n"))
            }
            other => Err(format!("unknown tool \"{other}\"")),
        }
    }
}

#[async_trait]
impl McpService for BuiltinServer {
    fn info(&self) -> ServiceInfo {
        ServiceInfo {
            name: "tether-builtin".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            instructions: Some("Built-in tools: arithmetic (add, subtract, multiply, divide), the current time, and reading files under the current directory.".into()),
            ..ServiceInfo::default()
        }
    }

    async fn list_tools(&self) -> Result<Vec<Tool>, ServeError> {
        Ok(builtin_tools())
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        _caller: &Caller,
    ) -> Result<ToolResult, ServeError> {
        if !builtin_tools().iter().any(|t| t.name == name) {
            return Err(ServeError::NotFound {
                what: "tool",
                name: name.to_string(),
            });
        }
        Ok(match self.call(name, &arguments) {
            Ok(text) => text_result(text, false),
            Err(message) => text_result(message, true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_and_confinement() {
        let dir = std::env::temp_dir().join(format!("tether-builtin-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/a.txt"), "hello").unwrap();
        let server = BuiltinServer::new(dir.clone());
        let args = |v: Value| v.as_object().cloned().unwrap();
        assert_eq!(
            server
                .call("add", &args(json!({"a": 10, "b": 20})))
                .unwrap(),
            "30"
        );
        assert_eq!(
            server
                .call("divide", &args(json!({"a": 1, "b": 4})))
                .unwrap(),
            "0.25"
        );
        assert!(
            server
                .call("divide", &args(json!({"a": 1, "b": 0})))
                .is_err()
        );
        assert_eq!(
            server
                .call("read_file", &args(json!({"path": "sub/a.txt"})))
                .unwrap(),
            "hello"
        );
        assert_eq!(server.call("list_files", &args(json!({}))).unwrap(), "sub/");
        assert!(
            server
                .call("read_file", &args(json!({"path": "../etc/passwd"})))
                .unwrap_err()
                .contains("outside")
        );
        assert!(
            server
                .call("read_file", &args(json!({"path": "/etc/passwd"})))
                .unwrap_err()
                .contains("outside")
        );
    }
}
