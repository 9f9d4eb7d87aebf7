//! Stdio servers as child processes we own: spawned with an explicit environment, stdout
//! filtered so only JSON-RPC reaches the protocol layer, stderr captured to the logs, and the
//! process killed and reaped when the connection ends.
//!
//! We spawn the child ourselves instead of using rmcp's child-process transport because a
//! server that misbehaves must be explained, not just dropped: we remember its exit status,
//! its last stderr lines and any non-JSON it printed on stdout, and put them in the error.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream};
use tokio::process::Command;

use crate::direct_lane::DirectLane;
use tokio::sync::{oneshot, watch};

use crate::error::McpError;

/// Environment variables a stdio server inherits from us; everything else it gets must be
/// configured explicitly, so a server never sees API keys it was not given.
const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
];
const STDERR_TAIL_LINES: usize = 20;
/// How long a server has to exit by itself after its stdin closes before it is asked to
/// (SIGTERM). Short: many servers (Node ones) never exit on end of input, and a tester command
/// that waited half a second after printing its answer felt stuck.
const EXIT_GRACE: Duration = Duration::from_millis(50);
/// How long a server asked to stop (SIGTERM) has before it is killed.
const TERM_GRACE: Duration = Duration::from_millis(500);
/// How long to wait for an exit status once the pipe has closed, to name it in the error.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(2);

/// Process groups of the servers we started and have not yet reaped, for
/// [`kill_all_servers`] on a signal that ends Tether before the normal stop path runs.
static LIVE_GROUPS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// One server's process group: tracked while alive, killed (the whole group) on drop.
struct ProcessGroup(u32);

impl ProcessGroup {
    fn track(pid: u32) -> ProcessGroup {
        if let Ok(mut live) = LIVE_GROUPS.lock() {
            live.push(pid);
        }
        ProcessGroup(pid)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        kill_group(self.0);
        if let Ok(mut live) = LIVE_GROUPS.lock() {
            live.retain(|pid| *pid != self.0);
        }
    }
}

fn kill_group(pid: u32) {
    signal_group(pid, true);
}

/// Sends SIGKILL (`kill`) or SIGTERM to a process group.
fn signal_group(pid: u32, kill: bool) {
    #[cfg(unix)]
    if let Ok(pid) = i32::try_from(pid) {
        let signal = if kill {
            nix::sys::signal::Signal::SIGKILL
        } else {
            nix::sys::signal::Signal::SIGTERM
        };
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal);
    }
    #[cfg(not(unix))]
    let _ = (pid, kill);
}

/// Kills every stdio server Tether started, with everything each one started in turn. For
/// the way out on SIGTERM, SIGHUP or an unhandled Ctrl-C, where destructors do not run.
pub fn kill_all_servers() {
    let groups = LIVE_GROUPS
        .lock()
        .map(|live| live.clone())
        .unwrap_or_default();
    for pid in groups {
        kill_group(pid);
    }
    crate::process_ties::stop_escaped_descendants();
}

/// What a child process did that helps explain a failure.
#[derive(Default)]
struct Diagnostics {
    /// Why a message without an id could not be read (the first such).
    unreadable: Option<String>,
    stderr_tail: VecDeque<String>,
    first_bad_stdout: Option<String>,
    bad_stdout_lines: usize,
}

/// A running stdio server process. Dropping it kills the process.
pub(crate) struct StdioProcess {
    diagnostics: Arc<Mutex<Diagnostics>>,
    kill: Option<oneshot::Sender<()>>,
    exit: watch::Receiver<Option<String>>,
    /// The process group (the leader's pid), to ask it to stop.
    group: Option<u32>,
    /// The way past rmcp onto the same pipes, for the gateway's plain calls.
    lane: Arc<DirectLane>,
}

/// The two ends rmcp talks through: filtered stdout and the child's stdin.
pub(crate) type StdioPipes = (DuplexStream, crate::direct_lane::LineSink);

impl StdioProcess {
    /// Starts `command` and its pumps.
    pub(crate) fn spawn(
        server: &str,
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&PathBuf>,
    ) -> Result<(StdioProcess, StdioPipes), McpError> {
        let path = env
            .get("PATH")
            .map(std::ffi::OsString::from)
            .or_else(|| std::env::var_os("PATH"));
        let (program, args) = crate::process_ties::tied_command(
            command,
            args,
            path.as_deref(),
            cwd.map(PathBuf::as_path),
        );
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(
                INHERITED_ENV
                    .iter()
                    .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
            )
            .envs(env)
            .env(
                crate::process_ties::HOST_PID_VAR,
                std::process::id().to_string(),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Its own process group, so the whole tree (an `npx` wrapper and the node process
        // under it, a shell script's children) can be killed at once, and so a Ctrl-C in the
        // terminal reaches Tether, which decides, instead of killing every server mid-call.
        #[cfg(unix)]
        cmd.process_group(0);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd.spawn().map_err(|e| McpError::Unreachable {
            server: server.to_string(),
            detail: format!(
                "cannot start `{command}`: {e}{}",
                if e.kind() == std::io::ErrorKind::NotFound {
                    "; is it installed and on PATH?"
                } else {
                    ""
                }
            ),
        })?;
        let unreachable = |what: &str| McpError::Unreachable {
            server: server.to_string(),
            detail: format!("cannot open the child's {what}"),
        };
        let stdin = child.stdin.take().ok_or_else(|| unreachable("stdin"))?;
        let stdout = child.stdout.take().ok_or_else(|| unreachable("stdout"))?;
        let stderr = child.stderr.take().ok_or_else(|| unreachable("stderr"))?;
        let diagnostics = Arc::new(Mutex::new(Diagnostics::default()));

        // Only lines that parse as JSON go on to rmcp; anything else is remembered for the
        // error message and logged, so one stray print does not kill the session.
        let (json_writer, json_reader) = tokio::io::duplex(256 * 1024);
        let (lane, sink) = DirectLane::start(stdin);
        tokio::spawn(pump_stdout(
            server.to_string(),
            stdout,
            json_writer,
            diagnostics.clone(),
            lane.clone(),
        ));
        tokio::spawn(pump_stderr(server.to_string(), stderr, diagnostics.clone()));

        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        let (exit_tx, exit_rx) = watch::channel(None);
        let group_id = child.id();
        let group = group_id.map(ProcessGroup::track);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                // Fires on an explicit kill and when the handle is dropped.
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
            // The leader is gone (exited or killed); what it left running in its group goes
            // with it.
            drop(group);
            let text = match status {
                Ok(s) => match s.code() {
                    Some(code) => format!("exited with status {code}"),
                    None => format!("was stopped ({s})"),
                },
                Err(e) => format!("could not be waited for: {e}"),
            };
            let _ = exit_tx.send(Some(text));
        });

        let process = StdioProcess {
            diagnostics,
            kill: Some(kill_tx),
            exit: exit_rx,
            group: group_id,
            lane,
        };
        Ok((process, (json_reader, sink)))
    }

    /// The direct lane onto this process's pipes.
    pub(crate) fn lane(&self) -> &Arc<DirectLane> {
        &self.lane
    }

    /// What the process did that is worth telling the user, if anything.
    pub(crate) fn hint(&self) -> Option<String> {
        let diagnostics = self.diagnostics.lock().ok()?;
        if let Some(why) = &diagnostics.unreadable {
            return Some(format!("a message from it could not be read: {why}"));
        }
        if let Some(line) = &diagnostics.first_bad_stdout {
            return Some(format!(
                "it wrote non-JSON to stdout ({} line{}, first: \"{}\"); an MCP stdio server must write only JSON-RPC to stdout and log to stderr",
                diagnostics.bad_stdout_lines,
                if diagnostics.bad_stdout_lines == 1 {
                    ""
                } else {
                    "s"
                },
                clip(line, 80)
            ));
        }
        diagnostics
            .stderr_tail
            .back()
            .map(|line| format!("last stderr line: {}", clip(line, 160)))
    }

    /// Whether the process has exited (or was killed) and been reaped.
    pub(crate) fn has_exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Explains why the connection ended: exit status plus the hint. Waits briefly for the
    /// exit status, because the pipe closes a moment before the process is reaped.
    pub(crate) async fn death_note(&self) -> String {
        let mut exit = self.exit.clone();
        let status = tokio::time::timeout(EXIT_STATUS_WAIT, exit.wait_for(Option::is_some))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|s| s.clone()));
        let what = status.unwrap_or_else(|| "closed the connection".to_string());
        match self.hint() {
            Some(hint) => format!("the server {what}; {hint}"),
            None => format!("the server {what}"),
        }
    }

    /// Stops the process as the spec's stdio shutdown says: its stdin is already closed; if
    /// it does not exit by itself, SIGTERM, then SIGKILL.
    pub(crate) async fn stop(mut self) {
        let mut exit = self.exit.clone();
        let exited = tokio::time::timeout(EXIT_GRACE, exit.wait_for(Option::is_some))
            .await
            .is_ok();
        if !exited && let Some(group) = self.group {
            signal_group(group, false);
            let _ = tokio::time::timeout(TERM_GRACE, exit.wait_for(Option::is_some)).await;
        }
        if let Some(kill) = self.kill.take() {
            let _ = kill.send(());
        }
        let _ = tokio::time::timeout(EXIT_STATUS_WAIT, exit.wait_for(Option::is_some)).await;
    }
}

fn clip(text: &str, max: usize) -> String {
    let text = text.trim();
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The longest message a server may send: rmcp's own line limit, which drops longer lines
/// without a word. We stop buffering there and answer the waiting call ourselves instead.
const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// The longest stderr line kept; the rest of a longer one is skipped, not buffered.
const MAX_STDERR_LINE_BYTES: usize = 64 * 1024;

async fn pump_stdout(
    server: String,
    stdout: tokio::process::ChildStdout,
    mut json_writer: DuplexStream,
    diagnostics: Arc<Mutex<Diagnostics>>,
    lane: Arc<DirectLane>,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        let total = match read_line_capped(&mut reader, &mut line, MAX_MESSAGE_BYTES).await {
            Ok(Some(total)) => total,
            Ok(None) | Err(_) => break,
        };
        // A byte order mark is not JSON, but says nothing wrong about what follows it.
        let trimmed = line.trim_ascii();
        let trimmed = trimmed.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(trimmed);
        if trimmed.is_empty() {
            continue;
        }
        let verdict = if total > line.len() {
            Verdict::Unreadable(format!(
                "its message was {}, over the {} a message may have",
                megabytes(total),
                megabytes(MAX_MESSAGE_BYTES)
            ))
        } else {
            judge(trimmed)
        };
        let forwarded = match verdict {
            Verdict::Message => Some(
                crate::legacy_fields::keep_legacy_task_fields(trimmed)
                    .unwrap_or_else(|| trimmed.to_vec()),
            ),
            Verdict::Unreadable(why) => {
                tracing::warn!(server = %server, "unreadable message on stdout: {why}");
                match top_level_id(trimmed) {
                    // Answer the call it was meant for at once, instead of letting it wait
                    // out its timeout.
                    Some(id) => Some(unreadable_answer(&id, &why)),
                    None => {
                        if let Ok(mut d) = diagnostics.lock() {
                            d.unreadable.get_or_insert(why);
                        }
                        // Without an id nothing can be answered; the session cannot be
                        // trusted any more, so it ends and every waiting call hears why.
                        if total > line.len() {
                            break;
                        }
                        None
                    }
                }
            }
            Verdict::Stray => {
                let text = String::from_utf8_lossy(trimmed).into_owned();
                if let Ok(mut d) = diagnostics.lock() {
                    // Warn once; a chatty server would otherwise drown the terminal.
                    if d.bad_stdout_lines == 0 {
                        tracing::warn!(server = %server, "ignored non-JSON output on stdout: {}", clip(&text, 200));
                    } else {
                        tracing::debug!(server = %server, "ignored non-JSON output on stdout: {}", clip(&text, 200));
                    }
                    d.bad_stdout_lines += 1;
                    d.first_bad_stdout.get_or_insert(text);
                }
                None
            }
        };
        if let Some(message) = forwarded
            && !(lane.waits() && claimed(&lane, &message))
            && (json_writer.write_all(&message).await.is_err()
                || json_writer.write_all(b"\n").await.is_err())
        {
            break;
        }
    }
    lane.close();
    let _ = json_writer.shutdown().await;
}

/// Whether the direct lane takes `message`: an answer to one of its calls, or their progress.
fn claimed(lane: &DirectLane, message: &[u8]) -> bool {
    match top_level_id(message) {
        Some(id) => lane.claim(&id, message),
        None => lane.claim_progress(message),
    }
}

/// What one stdout line is.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// A JSON-RPC message rmcp can read.
    Message,
    /// Meant as a message but unreadable, and why.
    Unreadable(String),
    /// Not JSON at all: a log line printed to the wrong stream.
    Stray,
}

/// The fields of a JSON-RPC message we check before rmcp sees it; the rest is only
/// validated as JSON, not kept.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    jsonrpc: Option<std::borrow::Cow<'a, str>>,
    id: Option<serde::de::IgnoredAny>,
    method: Option<serde::de::IgnoredAny>,
    /// Parsed whole: error objects are small, and rmcp drops one that is misshapen.
    error: Option<serde_json::Value>,
}

/// What is wrong with a JSON-RPC error object, if anything.
fn error_shape_problem(error: &serde_json::Value) -> Option<&'static str> {
    use serde_json::Value;
    match error {
        Value::Object(fields) if !fields.get("code").is_some_and(Value::is_i64) => {
            Some("its error object has no integer \"code\"")
        }
        Value::Object(fields) if !fields.get("message").is_some_and(Value::is_string) => {
            Some("its error object has no \"message\" text")
        }
        Value::Object(_) => None,
        _ => Some("its \"error\" is not an object"),
    }
}

/// serde_json (and so rmcp) refuses JSON nested deeper than this.
const MAX_DEPTH: usize = 127;

fn judge(line: &[u8]) -> Verdict {
    let object = match line.first() {
        Some(b'{') => true,
        Some(b'[') => false,
        _ => return Verdict::Stray,
    };
    if let Some(depth) = too_deep(line) {
        return Verdict::Unreadable(format!(
            "its message is nested more than {depth} levels deep"
        ));
    }
    if !object {
        // A batch (2025-03-26); rmcp reads those itself.
        return match serde_json::from_slice::<serde::de::IgnoredAny>(line) {
            Ok(_) => Verdict::Message,
            Err(_) => Verdict::Stray,
        };
    }
    // Validated once here and parsed as text: serde_json skips ignored strings without
    // checking them, and rmcp would then drop the whole message.
    let Ok(text) = std::str::from_utf8(line) else {
        return Verdict::Unreadable("its message is not valid UTF-8".into());
    };
    let envelope = serde_json::from_str::<Envelope<'_>>(text);
    if let Some(problem) = envelope
        .as_ref()
        .ok()
        .and_then(|e| e.error.as_ref())
        .and_then(error_shape_problem)
    {
        return Verdict::Unreadable(problem.into());
    }
    match envelope {
        Ok(envelope) if envelope.jsonrpc.as_deref() == Some("2.0") => Verdict::Message,
        Ok(envelope) if envelope.id.is_none() && envelope.method.is_none() => {
            // JSON, but not JSON-RPC: treat it as stray output like any other log line.
            Verdict::Stray
        }
        Ok(_) => Verdict::Unreadable("its message lacks \"jsonrpc\": \"2.0\"".into()),
        Err(error) => Verdict::Unreadable(format!("its message is not valid JSON ({error})")),
    }
}

/// The value of the top-level `"id"` of a JSON object, as JSON text, found by scanning the
/// raw bytes (the line may be cut short, too deep or not UTF-8, so it cannot be parsed).
fn top_level_id(line: &[u8]) -> Option<String> {
    let mut depth = 0usize;
    let mut at = 0;
    while at < line.len() {
        match line[at] {
            b'"' => {
                let end = string_end(line, at)?;
                if depth == 1 && &line[at..=end] == b"\"id\"" {
                    let rest = &line[end + 1..];
                    let colon = rest.iter().position(|b| !b.is_ascii_whitespace())?;
                    if rest[colon] != b':' {
                        at = end + 1;
                        continue;
                    }
                    let value = &rest[colon + 1..];
                    let start = value.iter().position(|b| !b.is_ascii_whitespace())?;
                    let value = &value[start..];
                    let len = if value.first() == Some(&b'"') {
                        string_end(value, 0)? + 1
                    } else {
                        value
                            .iter()
                            .position(|b| !(b.is_ascii_digit() || *b == b'-'))
                            .unwrap_or(value.len())
                    };
                    let id = std::str::from_utf8(&value[..len]).ok()?;
                    // Only ids JSON-RPC allows: a number or a string.
                    return serde_json::from_str::<serde_json::Value>(id)
                        .ok()
                        .filter(|v| v.is_number() || v.is_string())
                        .map(|v| v.to_string());
                }
                at = end + 1;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
        at += 1;
    }
    None
}

/// `Some(MAX_DEPTH)` when brackets outside strings nest deeper than [`MAX_DEPTH`].
fn too_deep(line: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in line {
        if in_string {
            match (escaped, byte) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Some(MAX_DEPTH);
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// Index of the quote closing the string that opens at `start`.
fn string_end(line: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    while at < line.len() {
        match line[at] {
            b'\\' => at += 2,
            b'"' => return Some(at),
            _ => at += 1,
        }
    }
    None
}

/// A JSON-RPC error for request `id` (JSON text), standing in for an unreadable answer.
fn unreadable_answer(id: &str, why: &str) -> Vec<u8> {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32603,"message":{}}}}}"#,
        serde_json::Value::from(format!("the server's answer could not be read: {why}"))
    )
    .into_bytes()
}

fn megabytes(bytes: usize) -> String {
    if bytes >= 1024 * 1024 && bytes.is_multiple_of(1024 * 1024) {
        format!("{} MiB", bytes / (1024 * 1024))
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

/// Reads one line into `line`, keeping at most `cap` bytes of it and skipping the rest
/// without buffering. Returns the line's whole length, or `None` at the end of input.
async fn read_line_capped<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<usize>> {
    let mut total = 0;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok((total > 0).then_some(total));
        }
        let (taken, done) = match available.iter().position(|b| *b == b'\n') {
            Some(at) => (at + 1, true),
            None => (available.len(), false),
        };
        let room = cap.saturating_sub(line.len());
        line.extend_from_slice(&available[..taken.min(room)]);
        total += taken;
        reader.consume(taken);
        if done {
            return Ok(Some(total));
        }
    }
}

async fn pump_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    diagnostics: Arc<Mutex<Diagnostics>>,
) {
    let mut reader = BufReader::new(stderr);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        match read_line_capped(&mut reader, &mut line, MAX_STDERR_LINE_BYTES).await {
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
        let text = String::from_utf8_lossy(line.trim_ascii_end()).into_owned();
        if text.is_empty() {
            continue;
        }
        tracing::debug!(target: "tether::server_stderr", server = %server, "{text}");
        if let Ok(mut d) = diagnostics.lock() {
            if d.stderr_tail.len() == STDERR_TAIL_LINES {
                d.stderr_tail.pop_front();
            }
            d.stderr_tail.push_back(text);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_judged_before_rmcp_sees_them() {
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Verdict::Message
        );
        assert_eq!(judge(b"Server starting..."), Verdict::Stray);
        assert_eq!(judge(br#"{"level":"info","msg":"up"}"#), Verdict::Stray);
        assert!(matches!(
            judge(br#"{"id":1,"result":{}}"#),
            Verdict::Unreadable(why) if why.contains("jsonrpc")
        ));
        // rmcp drops a misshapen error object without a word; the call must hear why.
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"no"}}"#),
            Verdict::Message
        );
        for (line, why) in [
            (
                &br#"{"jsonrpc":"2.0","id":1,"error":{"code":"E"}}"#[..],
                "integer",
            ),
            (br#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#, "message"),
            (
                br#"{"jsonrpc":"2.0","id":1,"error":"bad"}"#,
                "not an object",
            ),
        ] {
            assert!(matches!(judge(line), Verdict::Unreadable(w) if w.contains(why)));
        }
        let deep = format!(
            r#"{{"jsonrpc":"2.0","id":7,"result":{}{}}}"#,
            "[".repeat(1000),
            "]".repeat(1000)
        );
        assert!(matches!(judge(deep.as_bytes()), Verdict::Unreadable(_)));
        let bad_utf8 = b"{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"t\":\"\xff\xfe\"}}";
        assert!(matches!(judge(bad_utf8), Verdict::Unreadable(_)));
    }

    #[test]
    fn the_top_level_id_is_found_in_broken_lines() {
        assert_eq!(
            top_level_id(br#"{"jsonrpc":"2.0","id":42,"result":{"x"#).as_deref(),
            Some("42")
        );
        assert_eq!(
            top_level_id(br#"{"result":{"id":1,"s":""id":9"},"id" : "abc"}"#).as_deref(),
            Some(r#""abc""#)
        );
        assert_eq!(top_level_id(br#"{"result":{"id":1}"#), None);
        assert_eq!(top_level_id(br#"{"id":{"x":1}}"#), None);
    }

    #[tokio::test]
    async fn a_long_line_is_cut_without_being_buffered() {
        let input = [vec![b'x'; 10_000], b"\nnext\n".to_vec()].concat();
        let mut reader = BufReader::with_capacity(64, &input[..]);
        let mut line = Vec::new();
        let total = read_line_capped(&mut reader, &mut line, 100).await.unwrap();
        assert_eq!((total, line.len()), (Some(10_001), 100));
        line.clear();
        let total = read_line_capped(&mut reader, &mut line, 100).await.unwrap();
        assert_eq!((total, line.as_slice()), (Some(5), &b"next\n"[..]));
        line.clear();
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 100).await.unwrap(),
            None
        );
    }

    proptest::proptest! {
        /// Whatever bytes a server writes, judging them never panics.
        #[test]
        fn any_line_is_judged_without_panicking(line in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = judge(&line);
            let _ = top_level_id(&line);
        }

        /// The id of an answer is found even when the rest of the line is cut anywhere or
        /// spoiled, which is what lets an unreadable answer fail its own call.
        #[test]
        fn the_id_survives_whatever_follows_it(id in 0u64..1_000_000_000, tail in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let mut line = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#).into_bytes();
            line.extend(tail);
            proptest::prop_assert_eq!(top_level_id(&line), Some(id.to_string()));
        }

        /// Every well-formed JSON-RPC message goes through.
        #[test]
        fn well_formed_messages_pass(id in 0u64..1_000_000, text in "\\PC{0,64}", nested in 0usize..100) {
            let value = (0..nested).fold(serde_json::json!(text), |v, _| serde_json::json!([v]));
            let line = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": {"content": value}}).to_string();
            proptest::prop_assert_eq!(judge(line.as_bytes()), Verdict::Message);
        }
    }
}
