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
use tether_mcp::client::{ElicitationAnswer, ElicitationRequest};

/// Largest file `read_file` returns, in bytes.
const MAX_FILE_BYTES: u64 = 100_000;

/// The built-in tools, confined to `root` for file access.
#[derive(Debug, Clone)]
pub struct BuiltinServer {
    /// Resolved once (symlinks and all), so each call compares against the real directory.
    root: PathBuf,
    /// Whether `root` is a project directory; outside one, every read asks first.
    in_project: bool,
}

impl BuiltinServer {
    /// A server whose file tools see only `root` and below.
    pub fn new(root: PathBuf) -> BuiltinServer {
        let root = root.canonicalize().unwrap_or(root);
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let in_project = is_project_dir(&root, home.as_deref());
        BuiltinServer { root, in_project }
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
        execution: None,
        icons: None,
        meta: None,
    })
}

fn numbers_schema() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})
}

/// A short digest of the built-in tools' definitions, which Tether puts in the built-in
/// server's command line (`builtin-server --tools DIGEST`). The pin book keys a server's pins
/// to its command line and pins a server anew, saying what differs, when the command line
/// changes, as it does when a person upgrades a server. The built-in tools change only with
/// Tether itself, so a Tether whose built-in tools changed is such an upgrade, not a rug pull
/// whose tools must wait for `tether pins accept builtin`.
pub fn tools_digest() -> String {
    let listed = serde_json::to_vec(&builtin_tools()).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &listed);
    digest
        .as_ref()
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The names of `builtin_tools`, in the same order: checking a call against them costs
/// nothing, where building the list (schemas and all) cost more than the call itself.
const TOOL_NAMES: [&str; 7] = [
    "add",
    "subtract",
    "multiply",
    "divide",
    "current_time",
    "read_file",
    "list_files",
];

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
            "Divide two numbers: a / b (a divided by b, the quotient: a shared or split equally into b parts).",
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
        if !canonical.starts_with(&self.root) {
            return Err(format!("\"{path}\" leads outside the current directory"));
        }
        Ok(canonical)
    }

    /// Reads a text file under the root. The path is checked, then opened once without
    /// following a final symlink and without blocking (a named pipe would wedge the server),
    /// and what was opened is checked again: a symlink swapped in between cannot lead out.
    fn read_file(&self, path: &str) -> Result<String, String> {
        use std::io::Read;
        // Checked where the file really is; `call_tool` has refused the given name already.
        let full = self.confined(path)?;
        if let Some(kind) = secret_kind(&full) {
            return Err(secret_refusal(path, kind));
        }
        let cannot = |e: std::io::Error| format!("cannot read \"{path}\": {e}");
        let mut options = std::fs::OpenOptions::new();
        options.read(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK);
        }
        let file = options.open(&full).map_err(cannot)?;
        let meta = file.metadata().map_err(cannot)?;
        if !meta.is_file() {
            return Err(format!(
                "\"{path}\" is not a regular file (a pipe, socket or device); read_file reads files only"
            ));
        }
        self.check_opened(&file, &full, path)?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(format!(
                "\"{path}\" is {} bytes; read_file returns files up to {MAX_FILE_BYTES} bytes",
                meta.len()
            ));
        }
        let mut bytes = Vec::new();
        file.take(MAX_FILE_BYTES)
            .read_to_end(&mut bytes)
            .map_err(cannot)?;
        String::from_utf8(bytes).map_err(|_| format!("\"{path}\" is not a text file"))
    }

    /// Where the open file really is, asked of the kernel (Linux), must be under the root.
    /// Elsewhere the file must still be the one the checked path names.
    fn check_opened(&self, file: &std::fs::File, checked: &Path, path: &str) -> Result<(), String> {
        let escaped = || format!("\"{path}\" leads outside the current directory");
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            let opened = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
                .map_err(|e| format!("cannot check \"{path}\": {e}"))?;
            if !opened.starts_with(&self.root) {
                return Err(escaped());
            }
            // The secret check before `open` looked at a path that a directory swapped for a
            // symlink meanwhile could send elsewhere inside the project (to a `.kube` there):
            // what counts is the file actually opened.
            if let Some(kind) = secret_kind(&opened) {
                return Err(secret_refusal(path, kind));
            }
        }
        #[cfg(all(unix, not(target_os = "linux")))]
        {
            use std::os::unix::fs::MetadataExt;
            let opened = file.metadata().map_err(|e| e.to_string())?;
            let named = std::fs::metadata(checked).map_err(|e| e.to_string())?;
            if (opened.dev(), opened.ino()) != (named.dev(), named.ino()) {
                return Err(escaped());
            }
        }
        let _ = (checked, escaped);
        Ok(())
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
                self.read_file(path)
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

/// What kind of secret a path looks like, if any: keys, credentials and tokens the built-in
/// tools never hand to a model, wherever Tether was started.
fn secret_kind(path: &Path) -> Option<&'static str> {
    const SECRET_DIRS: &[(&str, &str)] = &[
        (".ssh", "SSH key"),
        (".gnupg", "GnuPG key"),
        (".aws", "AWS credential"),
        (".azure", "Azure credential"),
        (".kube", "Kubernetes credential"),
        (".docker", "Docker credential"),
        (".password-store", "password store"),
        ("gcloud", "Google Cloud credential"),
    ];
    const SECRET_FILES: &[(&str, &str)] = &[
        (".netrc", "login file"),
        (".npmrc", "npm token"),
        (".pypirc", "PyPI token"),
        (".git-credentials", "git credential"),
        ("credentials.json", "credential"),
        ("credentials", "credential"),
        (".env", "environment secret"),
        (".pgpass", "database password"),
        (".bash_history", "shell history"),
        (".zsh_history", "shell history"),
    ];
    for component in path.components() {
        let name = component.as_os_str().to_string_lossy().to_lowercase();
        if let Some((_, kind)) = SECRET_DIRS.iter().find(|(dir, _)| name == *dir) {
            return Some(kind);
        }
    }
    let name = path.file_name()?.to_string_lossy().to_lowercase();
    if let Some((_, kind)) = SECRET_FILES.iter().find(|(file, _)| name == *file) {
        return Some(kind);
    }
    let harmless_env = [".example", ".sample", ".template", ".dist"]
        .iter()
        .any(|suffix| name.ends_with(suffix));
    if name.starts_with(".env.") && !harmless_env {
        return Some("environment secret");
    }
    if ["id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"]
        .iter()
        .any(|key| name.starts_with(key))
    {
        return Some("SSH key");
    }
    if [".pem", ".key", ".p12", ".pfx", ".kdbx", ".keystore", ".jks"]
        .iter()
        .any(|ext| name.ends_with(ext))
    {
        return Some("key");
    }
    None
}

fn secret_refusal(path: &str, kind: &str) -> String {
    format!(
        "refused: \"{path}\" looks like a {kind} file, and the built-in tools never read keys or credentials; read it yourself if the model needs it"
    )
}

/// Whether `root` is a place where reading files is expected: not the home directory, not
/// one of its ancestors and not the filesystem root, where every secret of the user lives.
fn is_project_dir(root: &Path, home: Option<&Path>) -> bool {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    if root.parent().is_none() {
        return false;
    }
    match home.and_then(|h| h.canonicalize().ok()) {
        Some(home) => !home.starts_with(&root),
        None => true,
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

    async fn list_tools(&self, _caller: &Caller) -> Result<Vec<Tool>, ServeError> {
        Ok(builtin_tools())
    }

    async fn call_tool(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        caller: &Caller,
    ) -> Result<ToolResult, ServeError> {
        if !TOOL_NAMES.contains(&name) {
            return Err(ServeError::NotFound {
                what: "tool",
                name: name.to_string(),
            });
        }
        let reads_files = matches!(name, "read_file" | "list_files");
        let path = arguments.get("path").and_then(Value::as_str).unwrap_or(".");
        if let Some(kind) = secret_kind(Path::new(path)).filter(|_| name == "read_file") {
            // Not worth asking about: refused wherever Tether runs.
            return Ok(text_result(secret_refusal(path, kind), true));
        }
        if reads_files && !self.in_project {
            // Started from the home directory (or above it), every file of the user is in
            // reach: ask the user, through the client, before each read.
            let question = ElicitationRequest::Form {
                message: format!(
                    "{name} wants to read \"{path}\" in {}, which is not a project directory (Tether was started there). Allow it?",
                    self.root.display()
                ),
                schema: json!({"type": "object", "properties": {}}),
            };
            if !matches!(caller.elicit(question).await, ElicitationAnswer::Accept(_)) {
                return Ok(text_result(
                    format!(
                        "refused: {} is not a project directory and the user did not allow reading \"{path}\" there; start Tether in a project directory",
                        self.root.display()
                    ),
                    true,
                ));
            }
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
    fn the_names_checked_are_the_tools_listed() {
        let listed: Vec<String> = builtin_tools().into_iter().map(|t| t.name).collect();
        assert_eq!(listed, TOOL_NAMES);
    }

    /// The secret check holds for the file actually opened, whatever path was checked before
    /// (a directory swapped for a symlink between the check and the open).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_opened_file_is_checked_for_secrets_not_only_the_path() {
        let dir = std::env::temp_dir().join(format!("tether-builtin-race-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".kube")).unwrap();
        std::fs::create_dir_all(dir.join("docs")).unwrap();
        std::fs::write(dir.join(".kube/config"), "token: secret").unwrap();
        std::fs::write(dir.join("docs/config"), "harmless").unwrap();
        let root = dir.canonicalize().unwrap();
        let server = BuiltinServer::new(root.clone());
        // As if the swap happened after the check of docs/config: the open got .kube/config.
        let opened = std::fs::File::open(root.join(".kube/config")).unwrap();
        let refused = server
            .check_opened(&opened, &root.join("docs/config"), "docs/config")
            .unwrap_err();
        assert!(refused.contains("Kubernetes credential"), "{refused}");
        let harmless = std::fs::File::open(root.join("docs/config")).unwrap();
        assert!(
            server
                .check_opened(&harmless, &root.join("docs/config"), "docs/config")
                .is_ok()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

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

    #[test]
    fn secrets_pipes_and_symlinks_out_are_refused() {
        let dir = std::env::temp_dir().join(format!("tether-builtin-guard-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".ssh")).unwrap();
        std::fs::write(dir.join(".ssh/id_rsa"), "KEY").unwrap();
        std::fs::write(dir.join(".env"), "TOKEN=1").unwrap();
        std::fs::write(dir.join(".env.example"), "TOKEN=").unwrap();
        let server = BuiltinServer::new(dir.clone());
        let read =
            |path: &str| server.call("read_file", json!({"path": path}).as_object().unwrap());
        for secret in [".ssh/id_rsa", ".env"] {
            let error = read(secret).unwrap_err();
            assert!(error.contains("never read keys or credentials"), "{error}");
        }
        assert_eq!(read(".env.example").unwrap(), "TOKEN=");
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc/hostname", dir.join("link")).unwrap();
            assert!(read("link").unwrap_err().contains("outside"));
            let fifo = dir.join("pipe");
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
            assert!(read("pipe").unwrap_err().contains("not a regular file"));
        }
    }

    #[test]
    fn home_and_above_are_not_projects() {
        let home = std::env::temp_dir().join(format!("tether-home-{}", std::process::id()));
        std::fs::create_dir_all(home.join("code/app")).unwrap();
        assert!(!is_project_dir(&home, Some(&home)));
        assert!(!is_project_dir(home.parent().unwrap(), Some(&home)));
        assert!(!is_project_dir(Path::new("/"), Some(&home)));
        assert!(is_project_dir(&home.join("code/app"), Some(&home)));
    }
}
