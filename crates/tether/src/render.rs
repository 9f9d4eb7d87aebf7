//! Human-readable output of the tester commands, and the JSON printer for `--json`.
//! Binary content (images, audio, blobs) is saved to files and mentioned by path, so a
//! terminal never receives raw base64.

use std::borrow::Cow;
use std::path::PathBuf;

use base64::Engine;
use serde_json::Value;
use tether_protocol::{
    ContentBlock, Prompt, PromptResult, QualifiedTool, Resource, ResourceContents,
    ResourceTemplate, Role, ToolResult,
};

// The binary's terminal sink. Every line the binary prints goes through one of these three
// macros (clippy's `disallowed-macros` in crates/tether/clippy.toml refuses std's print
// macros everywhere else), so what a server or a model wrote never reaches the terminal with
// its escape sequences, and a closed stdout or stderr (`tether … | head -1`) drops the write
// instead of panicking. Our own styling (colours, a line redrawn in place) goes through the
// functions below, which make the text safe themselves.

/// A line on stdout, terminal-safe.
macro_rules! safe_println {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "{}", $crate::render::terminal_safe(&format!($($arg)*)));
    }};
}

/// Text on stdout, terminal-safe, flushed (a prompt, a streamed answer).
macro_rules! safe_print {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout();
        let _ = write!(out, "{}", $crate::render::terminal_safe(&format!($($arg)*)));
        let _ = out.flush();
    }};
}

/// A line on stderr, terminal-safe.
macro_rules! safe_eprintln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "{}", $crate::render::terminal_safe(&format!($($arg)*)));
    }};
}

/// Redraws the current stderr line with `text` (a spinner, a download's progress): the line
/// is cleared first, `text` made terminal-safe, no newline.
pub fn redraw_status(text: &str) {
    use std::io::Write as _;
    let _ = write!(std::io::stderr(), "\r\x1b[2K{}", terminal_safe(text));
}

/// Clears the current stderr line (a spinner or progress line that is done).
pub fn clear_status() {
    redraw_status("");
}

/// A line on stderr in red (a failed call in a coloured chat), terminal-safe.
pub fn eprintln_red(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "\x1b[31m{}\x1b[0m", terminal_safe(line));
}

/// `text` without what a terminal would act on instead of showing: escape sequences
/// (screen clears, clipboard writes through OSC 52, hidden or recoloured text, titles) and
/// other control characters but newline and tab. A server's description or result, or a
/// model's answer repeating one, must not be able to drive the user's terminal.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    let is_control = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.contains(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            match chars.next() {
                // CSI: parameters, then one final byte in @..~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC, DCS, SOS, PM, APC: up to BEL or ESC \.
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    while let Some(c) = chars.next() {
                        if c == '\x07' {
                            break;
                        }
                        if c == '\x1b' {
                            chars.next_if_eq(&'\\');
                            break;
                        }
                    }
                }
                // Two-byte sequences (ESC c resets the terminal).
                _ => {}
            }
        } else if c == '\r' && chars.peek() == Some(&'\n') {
            // A Windows line end is a line end; a lone return would overwrite the line.
        } else if !is_control(c) {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Prints a value as pretty JSON on stdout (JSON escapes control characters itself).
pub fn print_json(value: &Value) {
    safe_println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

fn dash(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The `servers` table.
pub fn servers(rows: &[Value]) {
    let header = [
        "NAME",
        "STATUS",
        "PROTOCOL",
        "START",
        "TOOLS",
        "RESOURCES",
        "PROMPTS",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for row in rows {
        let start = row
            .get("startMs")
            .and_then(Value::as_u64)
            .map(|ms| format!("{ms}ms"))
            .unwrap_or("-".into());
        let resources = match (row.get("resources"), row.get("resourceTemplates")) {
            (Some(Value::Number(r)), Some(Value::Number(t))) => format!("{r}+{t}t"),
            _ => "-".into(),
        };
        let status = match row.get("restarts").and_then(Value::as_u64) {
            Some(restarts) if restarts > 0 => {
                format!("{} ({restarts} restarts)", dash(&row["status"]))
            }
            _ => dash(&row["status"]),
        };
        table.push(vec![
            dash(&row["name"]),
            status,
            dash(row.get("protocolVersion").unwrap_or(&Value::Null)),
            start,
            dash(row.get("tools").unwrap_or(&Value::Null)),
            resources,
            dash(row.get("prompts").unwrap_or(&Value::Null)),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|col| {
            table
                .iter()
                .map(|r| r[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for (index, cells) in table.iter().enumerate() {
        let line: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        safe_println!("{}", line.join("  ").trim_end());
        if index == 0 {
            continue;
        }
        let row = &rows[index - 1];
        if let Some(Value::Array(caps)) = row.get("capabilities") {
            let names: Vec<&str> = caps.iter().filter_map(Value::as_str).collect();
            let who = match (row.get("implementation"), row.get("version")) {
                (Some(Value::String(n)), Some(Value::String(v))) if !v.is_empty() => {
                    format!("{n} {v}, ")
                }
                (Some(Value::String(n)), _) => format!("{n}, "),
                _ => String::new(),
            };
            safe_println!("    {who}capabilities: {}", names.join(", "));
        }
        if let Some(Value::String(error)) = row.get("error") {
            safe_println!("    error: {error}");
        }
    }
}

fn hints(tool: &QualifiedTool) -> Vec<&'static str> {
    let a = &tool.tool.annotations;
    let mut out = Vec::new();
    if a.read_only_hint == Some(true) {
        out.push("read-only");
    }
    if a.destructive_hint == Some(true) {
        out.push("destructive");
    }
    if a.idempotent_hint == Some(true) {
        out.push("idempotent");
    }
    if a.open_world_hint == Some(true) {
        out.push("open-world");
    }
    out
}

/// The `tools` listing.
pub fn tools(tools: &[QualifiedTool], schema: bool, any_connected: bool) {
    if tools.is_empty() && any_connected {
        safe_println!("(no tools)");
    }
    for tool in tools {
        let title = tool.tool.display_title();
        if title != tool.tool.name {
            safe_println!("{}  ({title})", tool.qualified_name);
        } else {
            safe_println!("{}", tool.qualified_name);
        }
        if let Some(description) = &tool.tool.description {
            for line in description.trim().lines() {
                safe_println!("    {line}");
            }
        }
        let hints = hints(tool);
        if !hints.is_empty() {
            safe_println!("    hints: {}", hints.join(", "));
        }
        if let Some(app) = tool.tool.app_resource() {
            let audience = if tool.tool.for_model() {
                ""
            } else {
                "; called by the app only, never offered to a model"
            };
            safe_println!("    app: {app}{audience}");
        }
        if schema {
            print_indented("input schema", &tool.tool.input_schema);
            if let Some(output) = &tool.tool.output_schema {
                print_indented("output schema", output);
            }
        }
    }
}

fn print_indented(label: &str, value: &Value) {
    safe_println!("    {label}:");
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    for line in text.lines() {
        safe_println!("      {line}");
    }
}

/// Saves base64 `data` under the temp dir and returns the path, or why it could not.
fn save_binary(
    stem: &str,
    mime_type: Option<&str>,
    data: &str,
) -> Result<(PathBuf, usize), String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("invalid base64: {e}"))?;
    let extension = mime_type
        .and_then(|m| m.split('/').nth(1))
        .map(|sub| sub.split(['+', ';']).next().unwrap_or(sub))
        .map(|sub| match sub {
            "jpeg" => "jpg",
            "mpeg" => "mp3",
            "plain" => "txt",
            "octet-stream" => "bin",
            other => other,
        })
        .unwrap_or("bin");
    let dir = saved_files_dir();
    tether_mcp::private_files::private_dir(&dir)
        .map_err(|e| format!("cannot use {}: {e}", dir.display()))?;
    let safe: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    // A unique, exclusively created name: a shared temporary directory may hold a symlink
    // planted where a predictable name would go.
    let (mut file, path) = tether_mcp::private_files::create_unique(&dir, &safe, extension)
        .map_err(|e| format!("cannot create a file in {}: {e}", dir.display()))?;
    std::io::Write::write_all(&mut file, &bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok((path, bytes.len()))
}

/// Where images and audio from tools are saved: a directory of the user's own under the
/// system's temporary directory.
fn saved_files_dir() -> std::path::PathBuf {
    let user = std::env::var("USER").unwrap_or_default();
    let safe: String = user.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    std::env::temp_dir().join(format!("tether-{safe}"))
}

fn binary_note(kind: &str, stem: &str, mime_type: Option<&str>, data: &str) -> String {
    let mime = mime_type.unwrap_or("application/octet-stream");
    match save_binary(stem, mime_type, data) {
        Ok((path, size)) => format!("[{kind} {mime}, {size} bytes, saved to {}]", path.display()),
        Err(why) => format!("[{kind} {mime}, not saved: {why}]"),
    }
}

fn print_contents(stem: &str, contents: &ResourceContents) {
    let mime = contents
        .mime_type
        .as_deref()
        .map(|m| format!(" ({m})"))
        .unwrap_or_default();
    safe_println!("[resource {}{mime}]", contents.uri);
    if let Some(text) = &contents.text {
        safe_println!("{}", text.trim_end());
    } else if let Some(blob) = &contents.blob {
        safe_println!(
            "{}",
            binary_note("blob", stem, contents.mime_type.as_deref(), blob)
        );
    }
}

fn print_block(stem: &str, block: &ContentBlock) {
    match block {
        ContentBlock::Text { text } => safe_println!("{}", text.trim_end()),
        ContentBlock::Image { data, mime_type } => {
            safe_println!("{}", binary_note("image", stem, Some(mime_type), data))
        }
        ContentBlock::Audio { data, mime_type } => {
            safe_println!("{}", binary_note("audio", stem, Some(mime_type), data))
        }
        ContentBlock::ResourceLink(link) => print_link(link),
        ContentBlock::Resource { resource } => print_contents(stem, resource),
    }
}

fn print_link(link: &Resource) {
    let mut line = format!("[resource link] {}", link.uri);
    if !link.name.is_empty() {
        line.push_str(&format!("  {}", link.name));
    }
    if let Some(mime) = &link.mime_type {
        line.push_str(&format!(" ({mime})"));
    }
    safe_println!("{line}");
    if let Some(description) = &link.description {
        safe_println!("    {description}");
    }
}

/// A tool result: every block in order, then `structuredContent` unless a text block already
/// says the same (as the spec asks tools to do, so it would print twice).
pub fn tool_result(server: &str, tool: &str, result: &ToolResult) {
    for (index, block) in result.content.iter().enumerate() {
        print_block(&format!("{server}-{tool}-{}", index + 1), block);
    }
    if let Some(structured) = result
        .structured_content
        .as_ref()
        .filter(|s| !repeats_text(&result.content, s))
    {
        safe_println!("structuredContent:");
        let text = serde_json::to_string_pretty(structured).unwrap_or_default();
        for line in text.lines() {
            safe_println!("  {line}");
        }
    }
}

/// Whether a text block of `content` already carries `structured`: the same JSON, or, for
/// the `{"result": …}` wrapper FastMCP puts around a plain return value, that value.
fn repeats_text(content: &[ContentBlock], structured: &Value) -> bool {
    let unwrapped = structured
        .as_object()
        .filter(|object| object.len() == 1)
        .and_then(|object| object.get("result"));
    content.iter().any(|block| match block {
        ContentBlock::Text { text } => {
            let parsed = serde_json::from_str::<Value>(text).ok();
            parsed.as_ref() == Some(structured)
                || unwrapped.is_some_and(|inner| {
                    parsed.as_ref() == Some(inner) || inner.as_str() == Some(text.as_str())
                })
        }
        _ => false,
    })
}

/// The `resources` listing.
pub fn resources(servers: &[(String, Vec<Resource>, Vec<ResourceTemplate>)]) {
    for (server, resources, templates) in servers {
        safe_println!(
            "{server}: {} resources, {} templates",
            resources.len(),
            templates.len()
        );
        for resource in resources {
            let mime = resource
                .mime_type
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            safe_println!("  {}  {}{mime}", resource.uri, resource.name);
        }
        for template in templates {
            let mime = template
                .mime_type
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            safe_println!(
                "  {}  {} [template]{mime}",
                template.uri_template,
                template.name
            );
        }
    }
}

/// The `read` output.
pub fn resource_contents(server: &str, contents: &[ResourceContents]) {
    for (index, item) in contents.iter().enumerate() {
        print_contents(&format!("{server}-resource-{}", index + 1), item);
    }
}

/// The `prompts` listing.
pub fn prompts(servers: &[(String, Vec<Prompt>)]) {
    for (server, prompts) in servers {
        safe_println!("{server}: {} prompts", prompts.len());
        for prompt in prompts {
            let args: Vec<String> = prompt
                .arguments
                .iter()
                .map(|a| {
                    if a.required {
                        format!("{}*", a.name)
                    } else {
                        a.name.clone()
                    }
                })
                .collect();
            let args = if args.is_empty() {
                String::new()
            } else {
                format!(" [{}]", args.join(" "))
            };
            safe_println!("  {}{args}", prompt.name);
            if let Some(description) = &prompt.description {
                safe_println!("      {description}");
            }
        }
    }
    safe_println!("(* = required argument)");
}

/// An expanded prompt: one block per message with its role.
pub fn prompt_result(server: &str, result: &PromptResult) {
    if let Some(description) = &result.description {
        safe_println!("# {description}");
    }
    for (index, message) in result.messages.iter().enumerate() {
        let role = match message.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        safe_println!("[{role}]");
        print_block(&format!("{server}-prompt-{}", index + 1), &message.content);
    }
}

/// A live progress line on stderr for one tool call: redrawn in place on a terminal, one
/// line per update otherwise (so logs and pipes keep every step).
pub struct ProgressBar {
    label: String,
    live: bool,
    drawn: bool,
}

impl ProgressBar {
    /// A bar for the call of `label`; nothing is drawn until the first update.
    pub fn new(label: &str) -> ProgressBar {
        ProgressBar {
            label: label.to_string(),
            live: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            drawn: false,
        }
    }

    /// Draws the latest progress.
    pub fn update(&mut self, progress: &tether_mcp::Progress) {
        let line = progress_line(
            &self.label,
            progress.progress,
            progress.total,
            progress.message.as_deref(),
        );
        let line = terminal_safe(&line);
        if self.live {
            redraw_status(&line);
        } else {
            safe_eprintln!("{line}");
        }
        self.drawn = true;
    }

    /// Clears the live line, if one was drawn.
    pub fn finish(&mut self) {
        if self.live && self.drawn {
            clear_status();
        }
        self.drawn = false;
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.finish();
    }
}

/// `label [#####.....] 50% (5/10) message`, or `label 5 message` without a total.
pub fn progress_line(
    label: &str,
    progress: f64,
    total: Option<f64>,
    message: Option<&str>,
) -> String {
    const WIDTH: usize = 20;
    let message = message.map(|m| format!(" {m}")).unwrap_or_default();
    match total {
        Some(total) if total > 0.0 => {
            let fraction = (progress / total).clamp(0.0, 1.0);
            let filled = (fraction * WIDTH as f64).round() as usize;
            format!(
                "{label} [{}{}] {:>3.0}% ({progress}/{total}){message}",
                "#".repeat(filled),
                ".".repeat(WIDTH - filled),
                fraction * 100.0
            )
        }
        _ => format!("{label} {progress}{message}"),
    }
}

/// Whether errors are written as JSON (`--json`), set once at start.
pub(crate) static JSON_ERRORS: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Writes one error to stderr: `error: …`, or under `--json` one JSON object per line,
/// `{"error": {"message": …}}` (with `"exitCode"` on the last one), so a script reading
/// stderr never has to parse prose.
pub(crate) fn print_error(message: &str, exit_code: Option<u8>) {
    if JSON_ERRORS.load(std::sync::atomic::Ordering::Relaxed) {
        let mut error = serde_json::json!({ "message": message });
        if let Some(code) = exit_code {
            error["exitCode"] = serde_json::json!(code);
        }
        safe_eprintln!("{}", serde_json::json!({ "error": error }));
    } else {
        // Errors quote servers (their messages, URLs, last stderr lines).
        safe_eprintln!("error: {}", terminal_safe(message));
    }
}

#[cfg(test)]
mod terminal_safe_tests {
    use super::terminal_safe;

    #[test]
    fn escape_sequences_and_controls_are_removed_text_kept() {
        let nasty = "\x1b[2J\x1b]52;c;cm0gLXJmIH4K\x07visible\x1b[8mhidden\x1b[0m\r\nnext\tcol\x1b]0;title\x1b\\ end\rover\x07\u{9b}";
        assert_eq!(terminal_safe(nasty), "visiblehidden\nnext\tcol endover");
        assert!(matches!(
            terminal_safe("plain ünïcode\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}

#[cfg(test)]
mod progress_tests {
    use super::progress_line;

    #[test]
    fn progress_lines_show_bar_percentage_and_message() {
        assert_eq!(
            progress_line("slow", 2.0, Some(4.0), Some("step 2")),
            "slow [##########..........]  50% (2/4) step 2"
        );
        assert_eq!(progress_line("slow", 3.0, None, None), "slow 3");
        assert_eq!(
            progress_line("x", 9.0, Some(4.0), None),
            "x [####################] 100% (9/4)"
        );
    }
}

#[cfg(test)]
mod structured_tests {
    use super::repeats_text;
    use serde_json::json;
    use tether_protocol::ContentBlock;

    #[test]
    fn structured_content_that_repeats_a_text_block_is_recognised() {
        let text = |t: &str| vec![ContentBlock::Text { text: t.into() }];
        assert!(repeats_text(&text(r#"{"a": 1}"#), &json!({"a": 1})));
        // FastMCP's wrapper around a plain value, a string or a number.
        assert!(repeats_text(
            &text("It is sunny"),
            &json!({"result": "It is sunny"})
        ));
        assert!(repeats_text(&text("42"), &json!({"result": 42})));
        assert!(!repeats_text(
            &text("It is sunny"),
            &json!({"result": "It rains"})
        ));
        assert!(!repeats_text(
            &text("42"),
            &json!({"result": 42, "unit": "C"})
        ));
    }
}
