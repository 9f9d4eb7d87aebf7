//! The set of servers a run uses: started in parallel, each either connected or failed with
//! its reason, so one broken server never takes the others down. A front end that should not
//! wait for its slowest server starts them with `start_settling`: it goes on once the others
//! are ready, and a straggler joins when its start finishes.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::join_all;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::client::{HostHandler, ServerNotice};
use crate::config::ServerConfig;
use crate::connection::ServerConnection;
use crate::error::{McpError, near_matches};
use crate::router::ToolRouter;

/// The least time `start_settling` waits for more servers once one is ready and none has
/// finished since: long enough for fast servers started together to finish together, short
/// enough that a slow one costs the first model request well under 100 ms. The wait grows to
/// a quarter of the time spent so far, so servers that take a second each to start (Node on
/// two busy cores) still join the first request though they finish far apart.
pub const SETTLE_AFTER: Duration = Duration::from_millis(60);

/// The longest `start_settling` keeps waiting, after the first server is connected, for
/// servers that are still busy starting.
pub const SETTLE_AT_MOST: Duration = Duration::from_secs(2);

/// The machine's processor time so far (`/proc/stat`), to tell servers still starting (busy
/// processors) from servers waiting on something (idle ones).
#[derive(Debug, Clone, Copy)]
struct CpuTimes {
    busy: u64,
    total: u64,
    processors: u64,
}

impl CpuTimes {
    /// Now; `None` where `/proc/stat` cannot be read (then only the clock decides).
    fn now() -> Option<CpuTimes> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let processors = stat
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count()
            .max(1) as u64;
        let fields: Vec<u64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal …: idle and iowait are not busy.
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
        Some(CpuTimes {
            busy: total.saturating_sub(idle),
            total,
            processors,
        })
    }
}

/// Whether at least half a processor's worth of work was done since `before` was taken: one
/// interpreter starting keeps a whole processor busy, an idle machine stays well under.
fn busy_since(before: Option<CpuTimes>) -> bool {
    let (Some(before), Some(now)) = (before, CpuTimes::now()) else {
        return false;
    };
    let total = now.total.saturating_sub(before.total);
    total > 0 && now.busy.saturating_sub(before.busy) * now.processors * 2 >= total
}

/// Where one configured server stands.
#[derive(Debug)]
pub enum ServerState {
    /// Connected and usable.
    Connected(Box<ServerConnection>),
    /// Could not be started or reached.
    Failed(McpError),
    /// `"disabled": true` in the config.
    Disabled,
    /// Still starting: the run went on without it and it joins when ready.
    Starting,
}

/// What a pending entry reads as; the other states are set once per entry and never change.
static STARTING: ServerState = ServerState::Starting;

#[derive(Debug)]
struct Outcome {
    state: ServerState,
    elapsed: Duration,
}

/// One configured server and its state.
#[derive(Debug)]
pub struct ServerEntry {
    /// Its config.
    pub config: ServerConfig,
    /// Set once, when its start ends; shared with the task that starts it.
    outcome: Arc<OnceLock<Outcome>>,
}

impl ServerEntry {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// Connected, failed, disabled, or still starting.
    pub fn state(&self) -> &ServerState {
        self.outcome.get().map_or(&STARTING, |o| &o.state)
    }

    /// Wall time its start took; zero when disabled or still starting.
    pub fn elapsed(&self) -> Duration {
        self.outcome.get().map_or(Duration::ZERO, |o| o.elapsed)
    }
}

/// Servers that finished starting after `start_settling` returned, not yet listed.
#[derive(Debug, Default)]
struct Late {
    settled: bool,
    joined: Vec<String>,
    /// Woken each time a start ends, for `wait_started`.
    ended: Arc<tokio::sync::Notify>,
}

/// All servers of a run.
#[derive(Debug, Default)]
pub struct ServerRegistry {
    entries: Vec<ServerEntry>,
    /// The background starts of servers; aborted on shutdown or drop.
    starts: Vec<JoinHandle<()>>,
    late: Arc<Mutex<Late>>,
}

impl ServerRegistry {
    /// Starts every enabled server concurrently and waits for all of them; each has its own
    /// startup timeout. What the servers ask of the host goes to `host`.
    pub async fn start(
        servers: impl IntoIterator<Item = ServerConfig>,
        host: Arc<dyn HostHandler>,
    ) -> ServerRegistry {
        ServerRegistry::start_waiting(servers, host, None).await
    }

    /// Starts every enabled server concurrently and returns once all have finished, or once
    /// at least one is connected and no other has finished for `SETTLE_AFTER` (or a quarter
    /// of the time spent so far, when that is longer). A server
    /// still starting then reads as `ServerState::Starting`; when it finishes, `host` hears
    /// `ServerNotice::JoinedLate` and `take_joined` names it, so its tools can be listed.
    pub async fn start_settling(
        servers: impl IntoIterator<Item = ServerConfig>,
        host: Arc<dyn HostHandler>,
    ) -> ServerRegistry {
        ServerRegistry::start_waiting(servers, host, Some(SETTLE_AFTER)).await
    }

    async fn start_waiting(
        servers: impl IntoIterator<Item = ServerConfig>,
        host: Arc<dyn HostHandler>,
        settle_after: Option<Duration>,
    ) -> ServerRegistry {
        let late = Arc::new(Mutex::new(Late::default()));
        let (done, mut finished) = mpsc::unbounded_channel::<bool>();
        let mut entries = Vec::new();
        let mut starts = Vec::new();
        let mut in_place = Vec::new();
        for config in servers {
            let outcome = Arc::new(OnceLock::new());
            if config.disabled {
                let _ = outcome.set(Outcome {
                    state: ServerState::Disabled,
                    elapsed: Duration::ZERO,
                });
            } else {
                let start = start_one_server(
                    config.clone(),
                    host.clone(),
                    outcome.clone(),
                    late.clone(),
                    done.clone(),
                );
                if settle_after.is_some() {
                    starts.push(tokio::spawn(start));
                } else {
                    in_place.push(start);
                }
            }
            entries.push(ServerEntry { config, outcome });
        }
        drop(done);
        if !in_place.is_empty() {
            // Nothing outlives this call: the starts run in this task, so a gateway's
            // connections are not spread over every worker thread's allocator arena.
            join_all(in_place).await;
            return ServerRegistry {
                entries,
                starts,
                late,
            };
        }
        let mut remaining = starts.len();
        let mut connected = 0;
        let began = Instant::now();
        let mut first_connected: Option<Instant> = None;
        while remaining > 0 {
            let next = match settle_after {
                Some(least) if connected > 0 => {
                    let wait = least.max(began.elapsed() / 4);
                    let busy_before = CpuTimes::now();
                    match tokio::time::timeout(wait, finished.recv()).await {
                        Ok(next) => next,
                        // Quiet for a while; but while the processors were busy, servers are
                        // most likely still starting (an interpreter loading), not waiting
                        // on something: give them longer, up to `SETTLE_AT_MOST`.
                        Err(_)
                            if busy_since(busy_before)
                                && first_connected
                                    .is_some_and(|t| t.elapsed() < SETTLE_AT_MOST) =>
                        {
                            continue;
                        }
                        Err(_) => break,
                    }
                }
                _ => finished.recv().await,
            };
            let Some(ok) = next else { break };
            remaining -= 1;
            connected += usize::from(ok);
            if ok && first_connected.is_none() {
                first_connected = Some(Instant::now());
            }
        }
        if let Ok(mut late) = late.lock() {
            late.settled = true;
        }
        ServerRegistry {
            entries,
            starts,
            late,
        }
    }

    /// Starts only the named server, or explains that there is none by that name.
    pub async fn start_one(
        servers: &[ServerConfig],
        name: &str,
        host: Arc<dyn HostHandler>,
    ) -> Result<ServerRegistry, McpError> {
        let config = servers
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| unknown_server(servers, name))?;
        Ok(ServerRegistry::start([config.clone()], host).await)
    }

    /// Starts one more server while the others keep running, and waits for it. Its outcome
    /// is its entry's state either way; the catalogue lists its tools on its next refresh
    /// (`take_joined` names it). A name already in use is refused.
    pub async fn add(
        &mut self,
        config: ServerConfig,
        host: Arc<dyn HostHandler>,
    ) -> Result<&ServerConnection, McpError> {
        if self.entries.iter().any(|e| e.name() == config.name) {
            return Err(McpError::InvalidArguments(format!(
                "server \"{}\" is already in the registry; remove it first to replace it",
                config.name
            )));
        }
        let name = config.name.clone();
        let outcome = Arc::new(OnceLock::new());
        // Its own bookkeeping, so the start reports to this call instead of as a late joiner.
        let (done, _) = mpsc::unbounded_channel();
        let own = Arc::new(Mutex::new(Late::default()));
        if config.disabled {
            let _ = outcome.set(Outcome {
                state: ServerState::Disabled,
                elapsed: Duration::ZERO,
            });
        } else {
            start_one_server(config.clone(), host, outcome.clone(), own, done).await;
        }
        self.entries.push(ServerEntry { config, outcome });
        let connection = self.connection(&name)?;
        if let Ok(mut late) = self.late.lock() {
            late.joined.push(name);
        }
        Ok(connection)
    }

    /// Stops one server and forgets it, while the others keep running: its connection closes
    /// (a stdio server's process exits, or is killed) and the catalogue drops its tools on its
    /// next refresh. A server still starting is refused: remove it once it has started.
    pub async fn remove(&mut self, name: &str) -> Result<(), McpError> {
        let at = self
            .entries
            .iter()
            .position(|e| e.name() == name)
            .ok_or_else(|| self.unknown(name))?;
        if matches!(self.entries[at].state(), ServerState::Starting) {
            return Err(McpError::Starting(name.to_string()));
        }
        let entry = self.entries.remove(at);
        if let Ok(mut late) = self.late.lock() {
            late.joined.retain(|joined| joined != name);
        }
        // A finished start has dropped its share of the outcome, so this one is the last.
        if let Some(Outcome {
            state: ServerState::Connected(connection),
            ..
        }) = Arc::try_unwrap(entry.outcome)
            .ok()
            .and_then(OnceLock::into_inner)
        {
            connection.close().await;
        }
        Ok(())
    }

    /// Why `name` is not one of ours, with the names it may have meant.
    fn unknown(&self, name: &str) -> McpError {
        let configs: Vec<ServerConfig> = self.entries.iter().map(|e| e.config.clone()).collect();
        unknown_server(&configs, name)
    }

    /// Every entry, in config order.
    pub fn entries(&self) -> &[ServerEntry] {
        &self.entries
    }

    /// The connection for `name`, or why there is none.
    pub fn connection(&self, name: &str) -> Result<&ServerConnection, McpError> {
        let entry = self
            .entries
            .iter()
            .find(|e| e.name() == name)
            .ok_or_else(|| self.unknown(name))?;
        match entry.state() {
            ServerState::Connected(connection) => Ok(connection),
            ServerState::Failed(error) => Err(error.clone()),
            ServerState::Disabled => Err(McpError::Disabled(name.to_string())),
            ServerState::Starting => Err(McpError::Starting(name.to_string())),
        }
    }

    /// Connected servers, in config order.
    pub fn connections(&self) -> impl Iterator<Item = &ServerConnection> {
        self.entries.iter().filter_map(|e| match e.state() {
            ServerState::Connected(c) => Some(c.as_ref()),
            _ => None,
        })
    }

    /// Servers that failed to start, with their errors.
    pub fn failures(&self) -> impl Iterator<Item = &McpError> {
        self.entries.iter().filter_map(|e| match e.state() {
            ServerState::Failed(error) => Some(error),
            _ => None,
        })
    }

    /// Servers that connected after `start_settling` returned, each named once: the tool
    /// catalogue lists them on its next refresh.
    pub fn take_joined(&self) -> Vec<String> {
        self.late
            .lock()
            .map(|mut late| std::mem::take(&mut late.joined))
            .unwrap_or_default()
    }

    /// The servers still starting, by name.
    pub fn starting_names(&self) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| matches!(e.state(), ServerState::Starting))
            .map(|e| e.name().to_string())
            .collect()
    }

    /// Waits until none of `names` is still starting (each start ends connected or failed,
    /// within its own `startupTimeout`), or `limit` has passed, whichever is first.
    pub async fn wait_started(&self, names: &[String], limit: Duration) {
        let Ok(ended) = self.late.lock().map(|late| late.ended.clone()) else {
            return;
        };
        let waiting = async {
            loop {
                // Registered before looking, so a start that ends in between still wakes us.
                let notified = ended.notified();
                let still = self.entries.iter().any(|e| {
                    names.contains(&e.config.name) && matches!(e.state(), ServerState::Starting)
                });
                if !still {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, waiting).await;
    }

    /// Whether any server is still starting.
    pub fn starting(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.state(), ServerState::Starting))
    }

    /// Lists every connected server's tools concurrently and builds the router. Servers whose
    /// listing fails are left out and reported.
    pub async fn tool_router(&self) -> (ToolRouter, Vec<McpError>) {
        let listings = join_all(
            self.connections()
                .map(|c| async move { (c.name(), c.list_tools().await) }),
        )
        .await;
        let mut errors = Vec::new();
        let mut catalog = Vec::new();
        for (name, listing) in listings {
            match listing {
                Ok(tools) => catalog.push((name, tools)),
                Err(error) => errors.push(error),
            }
        }
        (ToolRouter::new(catalog), errors)
    }

    /// Tells every connected server that the host's roots changed.
    pub async fn roots_changed(&self) -> Vec<McpError> {
        join_all(self.connections().map(ServerConnection::roots_changed))
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect()
    }

    /// Stops the starts still under way (their processes are killed) and closes every
    /// connection concurrently.
    pub async fn shutdown(mut self) {
        let starts = std::mem::take(&mut self.starts);
        for start in &starts {
            start.abort();
        }
        // Awaiting each aborted task drops its future, and with it its share of the entry.
        join_all(starts).await;
        let entries = std::mem::take(&mut self.entries);
        join_all(entries.into_iter().filter_map(|e| {
            match Arc::try_unwrap(e.outcome).ok()?.into_inner()?.state {
                ServerState::Connected(c) => Some(c.close()),
                _ => None,
            }
        }))
        .await;
    }
}

impl Drop for ServerRegistry {
    fn drop(&mut self) {
        for start in &self.starts {
            start.abort();
        }
    }
}

/// Starts one server, records how it went, and tells the waiting `start_waiting` or, once it
/// has gone on, the host.
async fn start_one_server(
    config: ServerConfig,
    host: Arc<dyn HostHandler>,
    outcome: Arc<OnceLock<Outcome>>,
    late: Arc<Mutex<Late>>,
    done: mpsc::UnboundedSender<bool>,
) {
    let started = Instant::now();
    let state = match ServerConnection::connect(&config, host.clone()).await {
        Ok(connection) => ServerState::Connected(Box::new(connection)),
        Err(error) => ServerState::Failed(error),
    };
    let elapsed = started.elapsed();
    let error = match &state {
        ServerState::Failed(error) => Some(error.to_string()),
        _ => None,
    };
    let connected = error.is_none();
    // Under the lock, so the registry either counts this start as on time or hears of it
    // as late, never neither.
    let joined_late = {
        let mut late = late
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let _ = outcome.set(Outcome { state, elapsed });
        if late.settled && connected {
            late.joined.push(config.name.clone());
        }
        late.settled
    };
    if let Ok(late) = late.lock() {
        late.ended.notify_waiters();
    }
    if joined_late {
        host.notify(&config.name, ServerNotice::JoinedLate { elapsed, error });
    } else {
        let _ = done.send(connected);
    }
}

fn unknown_server(servers: &[ServerConfig], name: &str) -> McpError {
    let names = || servers.iter().map(|s| s.name.as_str());
    let suggestions = near_matches(name, names());
    McpError::UnknownServer {
        name: name.to_string(),
        known: if suggestions.is_empty() && servers.len() <= 10 {
            names().map(str::to_string).collect()
        } else {
            Vec::new()
        },
        suggestions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_processors_are_seen_as_busy() {
        let before = CpuTimes::now();
        assert!(before.is_some(), "/proc/stat is readable on Linux");
        // One processor spins for a while: whatever else the machine does, that is busy.
        let spinners: Vec<_> = (0..1)
            .map(|_| {
                std::thread::spawn(|| {
                    let started = Instant::now();
                    let mut x = 0u64;
                    while started.elapsed() < Duration::from_millis(200) {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                })
            })
            .collect();
        for spinner in spinners {
            spinner.join().unwrap();
        }
        assert!(busy_since(before));
        assert!(
            !busy_since(None),
            "unknown is not busy: the clock alone decides"
        );
    }
}
