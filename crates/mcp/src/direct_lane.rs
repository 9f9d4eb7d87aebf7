//! A second way onto a stdio server's pipes, beside rmcp's session: the gateway's hot path
//! sends a `tools/call` it has not decoded as one line and gets the server's answer back as
//! the line the server wrote, so a proxied call is parsed once at each end instead of through
//! rmcp's typed models and the session's tasks (docs/decisions.md, "The gateway's hot path").
//!
//! Lines never interleave: rmcp writes through a [`LineSink`], which hands on whole lines only
//! to the stdin task, and whoever writes holds the pipe until its line is whole (a direct call
//! writes its own line when the pipe is free, else the stdin task does). Answers are told apart by their id: a
//! number from 2^40 up, which rmcp (counting in 32 bits) never reaches and JavaScript servers
//! still read exactly. Numbers, not strings: some servers mishandle string ids.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::process::ChildStdin;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::oneshot;

use crate::client::Progress;

/// The first id of a direct call.
const ID_BASE: u64 = 1 << 40;

/// Bytes that may wait for the child to read its stdin before writers are held back (rmcp) or
/// refused (direct calls): a server that stops reading cannot make the gateway buffer without
/// end.
const QUEUE_BUDGET: usize = 16 * 1024 * 1024;

/// The most bytes written to the child in one write when several lines wait.
const BATCH_BYTES: usize = 64 * 1024;

/// The lines waiting for the child's stdin, counted against [`QUEUE_BUDGET`].
#[derive(Default)]
struct Queue {
    bytes: AtomicUsize,
    /// rmcp's writer, held back while the queue is over budget.
    writer: AtomicWaker,
}

impl Queue {
    fn over_budget(&self) -> bool {
        self.bytes.load(Ordering::Acquire) >= QUEUE_BUDGET
    }

    fn add(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::AcqRel);
    }

    fn release(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::AcqRel);
        self.writer.wake();
    }
}

/// One message for the stdin task: whole lines, or the end of input.
enum Outgoing {
    Lines(Vec<u8>),
    Close,
}

/// The direct calls of one stdio session: where their lines go and who waits for which answer.
pub struct DirectLane {
    outbox: UnboundedSender<Outgoing>,
    /// The child's stdin; whoever holds it writes whole lines only. A call writes its line
    /// itself when the pipe is free and takes it at once (no hand-off to the stdin task), else
    /// through the stdin task. `None` once closed.
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    queue: Arc<Queue>,
    waiting: Mutex<HashMap<u64, oneshot::Sender<Vec<u8>>>>,
    /// Where the progress of calls that asked for it goes, by call (the call's id is its
    /// progress token). Claimed in the same pass as answers, so progress a server sent before
    /// its answer arrives before it.
    progress: Mutex<HashMap<u64, UnboundedSender<Progress>>>,
    /// How many calls wait, read before each line from the server so that, with none
    /// waiting, rmcp's traffic pays one atomic load.
    pending: AtomicUsize,
    next: AtomicU64,
}

/// Why a direct call got no answer line.
#[derive(Debug, PartialEq, Eq)]
pub enum LaneError {
    /// The server's stdin or stdout closed (it exited, or the session ended).
    Closed,
    /// The server has not read what it was sent; more would only pile up.
    NotReading,
}

impl DirectLane {
    /// The lane for a child's `stdin`, and the writer rmcp is given instead of it.
    pub(crate) fn start(stdin: ChildStdin) -> (Arc<DirectLane>, LineSink) {
        let (outbox, lines) = unbounded_channel();
        let queue = Arc::new(Queue::default());
        let stdin = Arc::new(tokio::sync::Mutex::new(Some(stdin)));
        tokio::spawn(pump_stdin(stdin.clone(), lines, queue.clone()));
        let lane = Arc::new(DirectLane {
            outbox: outbox.clone(),
            stdin,
            queue: queue.clone(),
            waiting: Mutex::default(),
            progress: Mutex::default(),
            pending: AtomicUsize::new(0),
            next: AtomicU64::new(1),
        });
        let sink = LineSink {
            partial: Vec::new(),
            outbox,
            queue,
        };
        (lane, sink)
    }

    /// Sends the request `write` puts into a line (given the JSON id to use, which is also the
    /// progress token when `progress` is given) and waits for the server's answer to it; its
    /// progress reports go to `progress`. Dropping the future before the answer tells the server
    /// the request was cancelled.
    pub async fn call(
        &self,
        write: impl FnOnce(&mut Vec<u8>, &str),
        progress: Option<UnboundedSender<Progress>>,
    ) -> Result<Vec<u8>, LaneError> {
        if self.queue.over_budget() {
            return Err(LaneError::NotReading);
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let id = (ID_BASE + n).to_string();
        let mut line = Vec::with_capacity(256);
        write(&mut line, &id);
        line.push(b'\n');
        let (answer, answered) = oneshot::channel();
        {
            let Ok(mut waiting) = self.waiting.lock() else {
                return Err(LaneError::Closed);
            };
            waiting.insert(n, answer);
            self.pending.fetch_add(1, Ordering::AcqRel);
        }
        if let Some(progress) = progress
            && let Ok(mut routes) = self.progress.lock()
        {
            routes.insert(n, progress);
        }
        let mut guard = Waiting {
            lane: self,
            n,
            id,
            answered: false,
        };
        if !self.write_now(&line)? {
            self.queue.add(line.len());
            if self.outbox.send(Outgoing::Lines(line)).is_err() {
                return Err(LaneError::Closed);
            }
        }
        let line = answered.await.map_err(|_| LaneError::Closed)?;
        guard.answered = true;
        Ok(line)
    }

    /// Writes `line` to the child now, when nobody else is writing and the pipe takes at least
    /// part of it without waiting (true); the rest of a part-written line is finished by a task
    /// of its own that keeps the pipe meanwhile, so no other line can come between, and that a
    /// cancelled call cannot stop. False: nothing was written; send it through the stdin task.
    fn write_now(&self, line: &[u8]) -> Result<bool, LaneError> {
        let Ok(mut stdin) = self.stdin.clone().try_lock_owned() else {
            return Ok(false);
        };
        let Some(pipe) = stdin.as_mut() else {
            return Err(LaneError::Closed);
        };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match Pin::new(pipe).poll_write(&mut cx, line) {
            Poll::Ready(Ok(n)) if n == line.len() => Ok(true),
            Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => Err(LaneError::Closed),
            Poll::Ready(Ok(n)) => {
                let rest = line[n..].to_vec();
                tokio::spawn(async move {
                    if let Some(pipe) = stdin.as_mut() {
                        let _ = pipe.write_all(&rest).await;
                    }
                });
                Ok(true)
            }
            Poll::Pending => Ok(false),
        }
    }

    /// Whether any direct call waits for its answer: only then are lines from the server
    /// looked at for their id.
    pub(crate) fn waits(&self) -> bool {
        self.pending.load(Ordering::Acquire) > 0
    }

    /// Takes `line`, whose top-level id is `id` (JSON text), when it answers a direct call
    /// (true); rmcp gets every other line.
    pub(crate) fn claim(&self, id: &str, line: &[u8]) -> bool {
        let Some(n) = id
            .parse::<u64>()
            .ok()
            .and_then(|id| id.checked_sub(ID_BASE))
        else {
            return false;
        };
        // Only an answer someone waits for is taken: a late one (its call was cancelled) goes
        // on to rmcp, which ignores a response to no request of its own, and so does a
        // server's own request that happens to use such an id, which rmcp then answers.
        match self.forget(n) {
            Some(answer) => {
                let _ = answer.send(line.to_vec());
                true
            }
            None => false,
        }
    }

    /// Takes `line` when it is a progress notification for a direct call (true).
    pub(crate) fn claim_progress(&self, line: &[u8]) -> bool {
        #[derive(serde::Deserialize)]
        struct Notification {
            method: String,
            params: Params,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Params {
            progress_token: serde_json::Value,
            progress: f64,
            total: Option<f64>,
            message: Option<String>,
        }
        let Ok(notification) = serde_json::from_slice::<Notification>(line) else {
            return false;
        };
        let Some(n) = notification
            .params
            .progress_token
            .as_u64()
            .and_then(|token| token.checked_sub(ID_BASE))
        else {
            return false;
        };
        if notification.method != "notifications/progress" {
            return false;
        }
        if let Ok(routes) = self.progress.lock()
            && let Some(route) = routes.get(&n)
        {
            let _ = route.send(Progress {
                progress: notification.params.progress,
                total: notification.params.total,
                message: notification.params.message,
                task: None,
            });
        }
        true
    }

    /// The server's output ended: every waiting call hears so now, not at its timeout.
    pub(crate) fn close(&self) {
        if let Ok(mut routes) = self.progress.lock() {
            routes.clear();
        }
        if let Ok(mut waiting) = self.waiting.lock() {
            self.pending.fetch_sub(waiting.len(), Ordering::AcqRel);
            waiting.clear();
        }
    }

    fn forget(&self, n: u64) -> Option<oneshot::Sender<Vec<u8>>> {
        if let Ok(mut routes) = self.progress.lock() {
            routes.remove(&n);
        }
        let answer = self.waiting.lock().ok()?.remove(&n)?;
        self.pending.fetch_sub(1, Ordering::AcqRel);
        Some(answer)
    }
}

/// A call waiting for its answer; dropped before it, it tells the server to stop.
struct Waiting<'a> {
    lane: &'a DirectLane,
    n: u64,
    id: String,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.answered || self.lane.forget(self.n).is_none() {
            return;
        }
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{{\"requestId\":{},\"reason\":\"the client went away or the call timed out\"}}}}\n",
            self.id
        );
        self.lane.queue.add(line.len());
        let _ = self.lane.outbox.send(Outgoing::Lines(line.into_bytes()));
    }
}

/// What rmcp writes to instead of the child's stdin: whole lines go on to the stdin task,
/// a line's start waits here for its end.
pub(crate) struct LineSink {
    partial: Vec<u8>,
    outbox: UnboundedSender<Outgoing>,
    queue: Arc<Queue>,
}

impl AsyncWrite for LineSink {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.queue.over_budget() {
            self.queue.writer.register(cx.waker());
            if self.queue.over_budget() {
                return Poll::Pending;
            }
        }
        let Some(last) = buf.iter().rposition(|b| *b == b'\n') else {
            self.partial.extend_from_slice(buf);
            return Poll::Ready(Ok(buf.len()));
        };
        let mut lines = std::mem::take(&mut self.partial);
        lines.extend_from_slice(&buf[..=last]);
        self.partial.extend_from_slice(&buf[last + 1..]);
        self.queue.add(lines.len());
        if self.outbox.send(Outgoing::Lines(lines)).is_err() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the server's stdin is closed",
            )));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let _ = self.outbox.send(Outgoing::Close);
        Poll::Ready(Ok(()))
    }
}

/// rmcp ends a session by dropping its writer, not shutting it down: that is the end of the
/// server's input too, which a server that exits on end of input (as the spec asks) reads
/// at once instead of waiting out the grace before SIGTERM.
impl Drop for LineSink {
    fn drop(&mut self) {
        let _ = self.outbox.send(Outgoing::Close);
    }
}

/// Writes what rmcp and the direct calls send to the child, several waiting lines at once.
async fn pump_stdin(
    stdin: Arc<tokio::sync::Mutex<Option<ChildStdin>>>,
    mut outgoing: UnboundedReceiver<Outgoing>,
    queue: Arc<Queue>,
) {
    let mut batch = Vec::new();
    while let Some(message) = outgoing.recv().await {
        let Outgoing::Lines(first) = message else {
            break;
        };
        let mut close = false;
        let mut pipe = stdin.lock().await;
        let Some(pipe) = pipe.as_mut() else {
            break;
        };
        let written = if first.len() >= BATCH_BYTES {
            pipe.write_all(&first).await.map(|()| first.len())
        } else {
            batch.clear();
            batch.extend_from_slice(&first);
            while batch.len() < BATCH_BYTES {
                match outgoing.try_recv() {
                    Ok(Outgoing::Lines(more)) => batch.extend_from_slice(&more),
                    Ok(Outgoing::Close) => {
                        close = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            pipe.write_all(&batch).await.map(|()| batch.len())
        };
        match written {
            Ok(n) => queue.release(n),
            Err(_) => break,
        }
        if close {
            break;
        }
    }
    // Closing stdin: the server reads the end of its input.
    if let Some(mut pipe) = stdin.lock().await.take() {
        let _ = pipe.shutdown().await;
    }
    queue.writer.wake();
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, BufReader};

    type Echoed = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

    /// A lane onto `cat`, which echoes each line: a direct call's answer is its own request.
    fn echoing_lane() -> (tokio::process::Child, Arc<DirectLane>, LineSink, Echoed) {
        let mut child = tokio::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (lane, sink) = DirectLane::start(child.stdin.take().unwrap());
        let echoed = BufReader::new(child.stdout.take().unwrap()).lines();
        (child, lane, sink, echoed)
    }

    #[tokio::test]
    async fn direct_calls_and_rmcp_lines_reach_the_child_whole_and_answers_find_their_callers() {
        let (_child, lane, mut sink, mut echoed) = echoing_lane();
        let reader_lane = lane.clone();
        let rmcp_lines = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Ok(Some(line)) = echoed.next_line().await {
                let id =
                    serde_json::from_str::<serde_json::Value>(&line).unwrap()["id"].to_string();
                if !reader_lane.claim(&id, line.as_bytes()) {
                    seen.push(line);
                }
            }
            seen
        });
        // rmcp's line arrives in pieces; direct calls go out meanwhile.
        sink.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,")
            .await
            .unwrap();
        let calls: Vec<_> = (0..20)
            .map(|i| {
                let lane = lane.clone();
                tokio::spawn(async move {
                    lane.call(
                        |line, id| {
                            line.extend_from_slice(format!("{{\"id\":{id},\"n\":{i}}}").as_bytes())
                        },
                        None,
                    )
                    .await
                })
            })
            .collect();
        for (i, call) in calls.into_iter().enumerate() {
            let line = String::from_utf8(call.await.unwrap().unwrap()).unwrap();
            assert!(line.ends_with(&format!(",\"n\":{i}}}")), "{line}");
        }
        sink.write_all(b"\"method\":\"ping\"}\n").await.unwrap();
        sink.shutdown().await.unwrap();
        let seen = rmcp_lines.await.unwrap();
        assert_eq!(
            seen,
            vec!["{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"]
        );
        assert_eq!(lane.pending.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_dropped_call_tells_the_server_it_was_cancelled() {
        let (_child, lane, _sink, mut echoed) = echoing_lane();
        // Never claimed: `cat` echoes the request, and the call is dropped before it is read.
        let call = lane.call(
            |line, id| line.extend_from_slice(format!("{{\"id\":{id}}}").as_bytes()),
            None,
        );
        let _ = tokio::time::timeout(std::time::Duration::from_millis(1), call).await;
        let request = echoed.next_line().await.unwrap().unwrap();
        let cancelled = echoed.next_line().await.unwrap().unwrap();
        assert_eq!(request, "{\"id\":1099511627777}");
        assert!(
            cancelled.contains("notifications/cancelled")
                && cancelled.contains("\"requestId\":1099511627777"),
            "{cancelled}"
        );
        assert_eq!(lane.pending.load(Ordering::Acquire), 0);
    }
}
