//! A server's request deadline that stops while the host works on that server's own question.
//!
//! When a server asks the host something during a call (an elicitation form, sampling that
//! needs consent), the answer may come from a person who takes minutes to read and reply. That
//! time is the server's doing, not the call's: charging it to the call's `timeout` would fail
//! the call with the form still on screen. [`PausingHost`] wraps a connection's host and holds
//! the connection's [`PauseClock`] paused while any such question is open; [`PauseClock::limit`]
//! is the call deadline that does not count paused time.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::client::{ElicitationAnswer, ElicitationRequest, HostHandler, Root, ServerNotice};

/// Time spent on one server's questions to the host; shared by the connection (whose deadlines
/// read it) and its [`PausingHost`] (which pauses it).
#[derive(Debug, Default)]
pub struct PauseClock {
    state: Mutex<PauseState>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct PauseState {
    /// Questions open now.
    open: usize,
    /// When the first of the open questions was asked.
    since: Option<Instant>,
    /// Paused time of questions already answered.
    total: Duration,
}

/// Keeps the clock paused while it lives.
pub struct Paused {
    clock: Arc<PauseClock>,
}

impl Drop for Paused {
    fn drop(&mut self) {
        if let Ok(mut state) = self.clock.state.lock() {
            state.open = state.open.saturating_sub(1);
            if state.open == 0
                && let Some(since) = state.since.take()
            {
                state.total += since.elapsed();
            }
        }
        self.clock.changed.notify_waiters();
    }
}

impl PauseClock {
    /// Pauses the clock until the returned guard is dropped.
    pub fn pause(self: &Arc<Self>) -> Paused {
        if let Ok(mut state) = self.state.lock() {
            state.open += 1;
            if state.open == 1 {
                state.since = Some(Instant::now());
            }
        }
        self.changed.notify_waiters();
        Paused {
            clock: self.clone(),
        }
    }

    /// Paused time so far (open questions included) and whether a question is open now.
    fn read(&self) -> (Duration, bool) {
        match self.state.lock() {
            Ok(state) => (
                state.total + state.since.map_or(Duration::ZERO, |s| s.elapsed()),
                state.open > 0,
            ),
            Err(_) => (Duration::ZERO, false),
        }
    }

    /// Runs `future` for at most `limit` of time not spent paused; `Err(())` when that ran out.
    pub async fn limit<F: Future>(&self, limit: Duration, future: F) -> Result<F::Output, ()> {
        let started = Instant::now();
        let (paused_before, _) = self.read();
        tokio::pin!(future);
        loop {
            // Created before the state is read, so a change in between still wakes it.
            let changed = self.changed.notified();
            let (paused, open) = self.read();
            let deadline = started + limit + paused.saturating_sub(paused_before);
            if open {
                tokio::select! {
                    output = &mut future => return Ok(output),
                    _ = changed => continue,
                }
            }
            tokio::select! {
                output = &mut future => return Ok(output),
                _ = changed => continue,
                _ = tokio::time::sleep_until(deadline) => {
                    let (paused, open) = self.read();
                    if !open && Instant::now() >= started + limit + paused.saturating_sub(paused_before) {
                        return Err(());
                    }
                }
            }
        }
    }
}

/// A connection's host, with its clock paused while a server's question is being answered.
pub(crate) struct PausingHost {
    pub(crate) inner: Arc<dyn HostHandler>,
    pub(crate) clock: Arc<PauseClock>,
}

impl HostHandler for PausingHost {
    fn roots(&self) -> Vec<Root> {
        self.inner.roots()
    }

    fn sample<'a>(
        &'a self,
        server: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            let _paused = self.clock.pause();
            self.inner.sample(server, params).await
        })
    }

    fn elicit<'a>(
        &'a self,
        server: &'a str,
        request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            let _paused = self.clock.pause();
            self.inner.elicit(server, request).await
        })
    }

    fn notify(&self, server: &str, notice: ServerNotice) {
        self.inner.notify(server, notice);
    }

    fn log_level(&self) -> Option<String> {
        self.inner.log_level()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_time_is_not_charged_to_the_limit() {
        let clock = Arc::new(PauseClock::default());
        let pauser = clock.clone();
        // The work takes 3 s, 2 of them while a person answers: within a 2 s limit.
        let work = async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let paused = pauser.pause();
            tokio::time::sleep(Duration::from_secs(2)).await;
            drop(paused);
            tokio::time::sleep(Duration::from_millis(500)).await;
            "done"
        };
        assert_eq!(clock.limit(Duration::from_secs(2), work).await, Ok("done"));
    }

    #[tokio::test(start_paused = true)]
    async fn unpaused_work_still_times_out() {
        let clock = Arc::new(PauseClock::default());
        let work = tokio::time::sleep(Duration::from_secs(3));
        assert_eq!(clock.limit(Duration::from_secs(2), work).await, Err(()));
        // Time paused before a call began is not credited to it.
        let before = clock.pause();
        tokio::time::sleep(Duration::from_secs(5)).await;
        drop(before);
        let work = tokio::time::sleep(Duration::from_secs(3));
        assert_eq!(clock.limit(Duration::from_secs(2), work).await, Err(()));
    }
}
