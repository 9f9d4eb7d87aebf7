//! The HTTP gateway's connections, before any request is read: how many may be open, which one
//! gives way when a new one arrives at the cap, how the accept loop behaves when the process is
//! out of file descriptors, and when a client that stopped reading its answers is let go.
//!
//! Everything here runs before authentication, so it must hold against a client that opens
//! sockets and sends nothing, sends headers one byte at a time, or never reads what it asked
//! for: idle connections are the ones that give way, a connection whose answer the client has
//! not read for [`WRITE_STALL_TIMEOUT`] is closed (freeing the answer), and running out of
//! descriptors pauses the accept loop instead of spinning it.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

/// How long an answer may sit unread (the socket accepting no byte of it) before the
/// connection is closed and the answer dropped, unless told otherwise.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// File descriptors kept back from the connection cap for everything else the gateway opens
/// (upstream servers' pipes and sockets, key-set fetches, logs).
const RESERVED_DESCRIPTORS: u64 = 128;

/// The connection cap when none is given: what the descriptor limit leaves after the reserve,
/// at least 16 and at most 10,000. Raises the soft descriptor limit to the hard one first
/// (as most servers do), so a low default `ulimit -n` does not make the cap needlessly small.
pub fn default_max_connections() -> usize {
    #[cfg(unix)]
    {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            let limit = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
                hard
            } else {
                soft
            };
            return usize::try_from(limit.saturating_sub(RESERVED_DESCRIPTORS))
                .unwrap_or(usize::MAX)
                .clamp(16, 10_000);
        }
    }
    1_024
}

/// A warning said at most every 10 s, however often its cause recurs, counting the times in
/// between: what a hostile client can make happen thousands of times a second must not flood
/// the log.
#[derive(Default)]
pub(crate) struct OccasionalWarning(Mutex<(u64, Option<Instant>)>);

impl OccasionalWarning {
    /// Counts one occurrence; `Some(occurrences since the last warning)` when one is due.
    pub(crate) fn due(&self) -> Option<u64> {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        state.0 += 1;
        if state
            .1
            .is_some_and(|at| at.elapsed() < Duration::from_secs(10))
        {
            return None;
        }
        let times = state.0;
        *state = (0, Some(Instant::now()));
        Some(times)
    }
}

/// The accept loop's pause after a failed accept: 10 ms, doubling to 1 s while accepts keep
/// failing, with a warning at most every 10 s that counts the failures in between.
pub(crate) struct AcceptBackoff {
    pause: Duration,
    warning: OccasionalWarning,
}

impl Default for AcceptBackoff {
    fn default() -> AcceptBackoff {
        AcceptBackoff {
            pause: Duration::from_millis(10),
            warning: OccasionalWarning::default(),
        }
    }
}

impl AcceptBackoff {
    /// An accept failed with `error`: how long to wait before the next.
    pub(crate) fn failed(&mut self, error: &io::Error) -> Duration {
        if let Some(failures) = self.warning.due() {
            tracing::warn!(
                %error,
                failures,
                "accepting a connection failed; waiting before the next accept (out of file descriptors? raise `ulimit -n`)"
            );
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(Duration::from_secs(1));
        pause
    }

    /// An accept succeeded: the next failure starts short again.
    pub(crate) fn reset(&mut self) {
        self.pause = Duration::from_millis(10);
    }
}

/// What one connection is doing, shared between its task, its requests and the table.
#[derive(Debug)]
pub(crate) struct Activity {
    /// Requests whose answers are not yet fully handed to the socket.
    busy: AtomicUsize,
    /// When the connection last became idle (or was opened), in ms since the table's epoch.
    idle_since_ms: AtomicU64,
    /// Since when a write has been waiting for the client to read, in ms since the epoch plus
    /// one; 0 while writes go through.
    write_blocked_ms: AtomicU64,
    epoch: Instant,
}

impl Activity {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Marks a request as started on this connection until the guard (held by its answer's
    /// body) is dropped.
    pub(crate) fn busy(self: &Arc<Self>) -> BusyGuard {
        self.busy.fetch_add(1, Ordering::SeqCst);
        BusyGuard(self.clone())
    }

    /// Resolves once a write has waited on the client for `limit`.
    pub(crate) async fn stalled_for(&self, limit: Duration) {
        let tick = (limit / 6).max(Duration::from_millis(10));
        loop {
            tokio::time::sleep(tick).await;
            let since = self.write_blocked_ms.load(Ordering::SeqCst);
            if since > 0 && self.now_ms().saturating_sub(since - 1) >= limit.as_millis() as u64 {
                return;
            }
        }
    }
}

/// One request in progress on a connection (see [`Activity::busy`]).
pub(crate) struct BusyGuard(Arc<Activity>);

impl Drop for BusyGuard {
    fn drop(&mut self) {
        if self.0.busy.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0
                .idle_since_ms
                .store(self.0.now_ms(), Ordering::SeqCst);
        }
    }
}

struct Entry {
    stop: CancellationToken,
    activity: Arc<Activity>,
}

/// The open connections, capped: at the cap a new connection closes the one that has been idle
/// longest (no request in progress); when every connection is busy the new one is refused.
/// A closed connection counts until its task has let its socket go, and the accept loop waits
/// for that ([`ConnectionTable::within_cap`]), so descriptors never run past the cap by more
/// than the one just accepted.
pub(crate) struct ConnectionTable {
    max: usize,
    /// Signalled whenever a connection's socket is let go.
    released: tokio::sync::Notify,
    epoch: Instant,
    next: AtomicU64,
    open: Mutex<HashMap<u64, Entry>>,
    /// Refusals and evictions, said now and then.
    warning: OccasionalWarning,
}

/// A connection's place in the [`ConnectionTable`], given up when dropped.
pub(crate) struct Registered {
    table: Arc<ConnectionTable>,
    id: u64,
    /// Cancelled when a newer connection takes this one's place.
    pub(crate) stop: CancellationToken,
    pub(crate) activity: Arc<Activity>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut open) = self.table.open.lock() {
            open.remove(&self.id);
        }
        self.table.released.notify_waiters();
    }
}

impl ConnectionTable {
    pub(crate) fn new(max: usize) -> Arc<ConnectionTable> {
        Arc::new(ConnectionTable {
            max: max.max(1),
            released: tokio::sync::Notify::new(),
            epoch: Instant::now(),
            next: AtomicU64::new(0),
            open: Mutex::default(),
            warning: OccasionalWarning::default(),
        })
    }

    /// Connections open now.
    pub(crate) fn len(&self) -> usize {
        self.open.lock().map_or(0, |open| open.len())
    }

    /// A place for a new connection, closing the longest-idle one at the cap; `None` when the
    /// table is full of busy connections.
    pub(crate) fn register(self: &Arc<Self>) -> Option<Registered> {
        let activity = Arc::new(Activity {
            busy: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
            write_blocked_ms: AtomicU64::new(0),
            epoch: self.epoch,
        });
        activity
            .idle_since_ms
            .store(activity.now_ms(), Ordering::SeqCst);
        let stop = CancellationToken::new();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut open = self.open.lock().ok()?;
        if open.len() >= self.max {
            let oldest_idle = open
                .iter()
                .filter(|(_, e)| {
                    !e.stop.is_cancelled() && e.activity.busy.load(Ordering::SeqCst) == 0
                })
                .min_by_key(|(_, e)| e.activity.idle_since_ms.load(Ordering::SeqCst))
                .map(|(_, e)| e.stop.clone());
            let Some(oldest) = oldest_idle else {
                drop(open);
                self.warn("refused a connection: every connection is busy");
                return None;
            };
            // Still counted until its task lets the socket go.
            oldest.cancel();
            self.warn("closed the longest-idle connection to make room for a new one");
        }
        open.insert(
            id,
            Entry {
                stop: stop.clone(),
                activity: activity.clone(),
            },
        );
        Some(Registered {
            table: self.clone(),
            id,
            stop,
            activity,
        })
    }

    /// Resolves once the open connections (closing ones included) are within the cap again.
    pub(crate) async fn within_cap(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.len() <= self.max {
                return;
            }
            released.await;
        }
    }

    /// One warning every 10 s at most, counting what happened in between.
    fn warn(&self, what: &str) {
        if let Some(times) = self.warning.due() {
            tracing::warn!(
                times,
                cap = self.max,
                "{what} (at the connection cap; raise it with --max-connections)"
            );
        }
    }
}

/// A connection's socket that notes when a write waits on the client (see
/// [`Activity::stalled_for`]).
pub(crate) struct StallWatch<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> StallWatch<T> {
    pub(crate) fn new(inner: T, activity: Arc<Activity>) -> StallWatch<T> {
        StallWatch { inner, activity }
    }

    fn note<R>(&self, poll: &Poll<R>) {
        let blocked = &self.activity.write_blocked_ms;
        match poll {
            Poll::Pending => {
                if blocked.load(Ordering::Relaxed) == 0 {
                    blocked.store(self.activity.now_ms() + 1, Ordering::SeqCst);
                }
            }
            Poll::Ready(_) => {
                if blocked.load(Ordering::Relaxed) != 0 {
                    blocked.store(0, Ordering::SeqCst);
                }
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallWatch<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallWatch<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note(&poll);
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note(&poll);
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.note(&poll);
        poll
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_longest_idle_connection_gives_way_and_busy_ones_never_do() {
        let table = ConnectionTable::new(2);
        let first = table.register().unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let second = table.register().unwrap();
        // The third takes the place of the first (idle longest).
        let third = table.register().unwrap();
        assert!(first.stop.is_cancelled());
        assert!(!second.stop.is_cancelled());
        // The closed one counts until its socket is let go.
        assert_eq!(table.len(), 3);
        drop(first);
        assert_eq!(table.len(), 2);
        // With both open connections busy, a new one is refused and nothing is closed.
        let _busy_second = second.activity.busy();
        let _busy_third = third.activity.busy();
        assert!(table.register().is_none());
        assert!(!second.stop.is_cancelled() && !third.stop.is_cancelled());
    }

    #[test]
    fn an_occasional_warning_is_due_once_and_then_counts() {
        let warning = OccasionalWarning::default();
        assert_eq!(warning.due(), Some(1));
        assert_eq!(warning.due(), None);
        assert_eq!(warning.due(), None);
    }

    #[tokio::test]
    async fn the_accept_loop_waits_until_a_closed_connection_lets_its_socket_go() {
        let table = ConnectionTable::new(1);
        let first = table.register().unwrap();
        let _second = table.register().unwrap();
        let waiting = tokio::spawn({
            let table = table.clone();
            async move { table.within_cap().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("within the cap once the socket is let go")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_blocked_past_the_limit_is_a_stall_and_one_that_went_through_is_not() {
        let table = ConnectionTable::new(1);
        let registered = table.register().unwrap();
        let activity = registered.activity.clone();
        activity
            .write_blocked_ms
            .store(activity.now_ms() + 1, Ordering::SeqCst);
        tokio::time::timeout(
            Duration::from_secs(2),
            activity.stalled_for(Duration::from_secs(1)),
        )
        .await
        .expect("a write blocked for 1 s is a stall");
        activity.write_blocked_ms.store(0, Ordering::SeqCst);
        assert!(
            tokio::time::timeout(
                Duration::from_secs(5),
                activity.stalled_for(Duration::from_secs(1))
            )
            .await
            .is_err(),
            "writes that go through are no stall"
        );
    }
}
