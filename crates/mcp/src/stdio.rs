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
use tokio::process::{ChildStdin, Command};
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
/// How long a server has to exit by itself after its stdin closes before it is killed.
const EXIT_GRACE: Duration = Duration::from_millis(500);
/// How long to wait for an exit status once the pipe has closed, to name it in the error.
const EXIT_STATUS_WAIT: Duration = Duration::from_secs(2);

/// What a child process did that helps explain a failure.
#[derive(Default)]
struct Diagnostics {
    stderr_tail: VecDeque<String>,
    first_bad_stdout: Option<String>,
    bad_stdout_lines: usize,
}

/// A running stdio server process. Dropping it kills the process.
pub(crate) struct StdioProcess {
    diagnostics: Arc<Mutex<Diagnostics>>,
    kill: Option<oneshot::Sender<()>>,
    exit: watch::Receiver<Option<String>>,
}

/// The two ends rmcp talks through: filtered stdout and the child's stdin.
pub(crate) type StdioPipes = (DuplexStream, ChildStdin);

impl StdioProcess {
    /// Starts `command` and its pumps.
    pub(crate) fn spawn(
        server: &str,
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        cwd: Option<&PathBuf>,
    ) -> Result<(StdioProcess, StdioPipes), McpError> {
        let mut cmd = Command::new(command);
        cmd.args(args)
            .env_clear()
            .envs(
                INHERITED_ENV
                    .iter()
                    .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
            )
            .envs(env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
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
        tokio::spawn(pump_stdout(
            server.to_string(),
            stdout,
            json_writer,
            diagnostics.clone(),
        ));
        tokio::spawn(pump_stderr(server.to_string(), stderr, diagnostics.clone()));

        let (kill_tx, kill_rx) = oneshot::channel::<()>();
        let (exit_tx, exit_rx) = watch::channel(None);
        tokio::spawn(async move {
            let status = tokio::select! {
                status = child.wait() => status,
                // Fires on an explicit kill and when the handle is dropped.
                _ = kill_rx => {
                    let _ = child.start_kill();
                    child.wait().await
                }
            };
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
        };
        Ok((process, (json_reader, stdin)))
    }

    /// What the process did that is worth telling the user, if anything.
    pub(crate) fn hint(&self) -> Option<String> {
        let diagnostics = self.diagnostics.lock().ok()?;
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

    /// Lets the process exit by itself (its stdin is already closed), then kills it.
    pub(crate) async fn stop(mut self) {
        let mut exit = self.exit.clone();
        let _ = tokio::time::timeout(EXIT_GRACE, exit.wait_for(Option::is_some)).await;
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

async fn pump_stdout(
    server: String,
    stdout: tokio::process::ChildStdout,
    mut json_writer: DuplexStream,
    diagnostics: Arc<Mutex<Diagnostics>>,
) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let trimmed = line.trim_ascii();
        if trimmed.is_empty() {
            continue;
        }
        if serde_json::from_slice::<serde::de::IgnoredAny>(trimmed).is_ok() {
            if json_writer.write_all(trimmed).await.is_err()
                || json_writer.write_all(b"\n").await.is_err()
            {
                break;
            }
        } else {
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
        }
    }
    let _ = json_writer.shutdown().await;
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
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
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
