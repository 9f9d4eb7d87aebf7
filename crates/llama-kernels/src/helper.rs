//! One helper thread for the work ggml does on one thread: an operation split into pieces
//! that either thread claims (the prompt's Q4_1 products, `crate::q4_1::shared`). The
//! embedded model runs ggml on one thread when another job keeps a core busy, since ggml's
//! threads meet at a barrier after every operation and one that waits for the other job's
//! time slice holds the rest back. A product needs no such meeting: the helper takes the
//! pieces it gets to while the scheduler gives it a turn beside the other job, and ggml's
//! thread takes the rest. A helper that never runs costs an operation nothing but the
//! hand-over (docs/decisions.md, "A helper thread for the prompt's products beside a busy
//! job").
//!
//! Neither thread spins for more than a moment: the helper sleeps between operations, and
//! ggml's thread, once no piece is left, sleeps until the helper's last one is in.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;

/// Whether one-thread work is shared with the helper: set for each request by whoever chose
/// the threads ([`set_helper`]).
static ON: AtomicBool = AtomicBool::new(false);

/// Pieces computed by a thread other than the work's owner, for the log and the tests.
static HELPED: AtomicU64 = AtomicU64::new(0);

/// Turns sharing one-thread work with the helper thread on or off, for the operations that
/// follow, in every thread of this process.
pub fn set_helper(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Whether one-thread work is shared now.
pub fn helper_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// How many pieces the helper has computed in this process.
pub fn helped_pieces() -> u64 {
    HELPED.load(Ordering::Relaxed)
}

/// Work in pieces any thread may compute, each exactly once, in any order.
pub(crate) trait Pieces: Send + Sync + 'static {
    /// What a thread keeps from one piece to the next.
    type Scratch;
    /// A thread's scratch; `owner` says whether it is the thread the work belongs to.
    fn scratch(&self, owner: bool) -> Self::Scratch;
    /// Computes piece `index`.
    fn compute(&self, index: usize, scratch: &mut Self::Scratch);
}

/// Work shared between its owner and the helper: the pieces' counters.
pub(crate) struct SharedWork<W: Pieces> {
    work: W,
    pieces: usize,
    /// The next piece to claim; at `pieces` or more, none is left.
    next: AtomicUsize,
    /// Pieces computed.
    done: AtomicUsize,
    /// The thread the work belongs to, woken by whoever finishes the last piece.
    owner: Thread,
}

impl<W: Pieces> SharedWork<W> {
    /// `work` in `pieces` pieces, none claimed yet; its owner is the calling thread.
    pub(crate) fn new(work: W, pieces: usize) -> Arc<Self> {
        Arc::new(SharedWork {
            work,
            pieces,
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            owner: std::thread::current(),
        })
    }

    /// Claims pieces and computes them until none is left.
    pub(crate) fn run(&self) {
        let owner = std::thread::current().id() == self.owner.id();
        let mut scratch = self.work.scratch(owner);
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            if index >= self.pieces {
                return;
            }
            self.work.compute(index, &mut scratch);
            if !owner {
                HELPED.fetch_add(1, Ordering::Relaxed);
            }
            if self.done.fetch_add(1, Ordering::Release) + 1 == self.pieces {
                self.owner.unpark();
            }
        }
    }

    /// Returns once every piece is done, the owner's wait: a moment's spinning, then sleep
    /// until the thread that finishes the last piece wakes it.
    pub(crate) fn wait(&self) {
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < self.pieces {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::park();
            }
        }
    }
}

/// How many times the owner checks for the helper's last piece before it sleeps: a few
/// microseconds.
const SPINS: u32 = 2_000;

/// Shared work as the helper holds it, whatever its pieces.
trait Offered: Send + Sync {
    fn run(&self);
}

impl<W: Pieces> Offered for SharedWork<W> {
    fn run(&self) {
        SharedWork::run(self);
    }
}

/// The helper thread and the work it is offered.
struct Helper {
    offered: Mutex<Option<Arc<dyn Offered>>>,
    thread: Thread,
}

/// The helper, started with the first shared work; `None` where it could not be started.
fn helper() -> Option<&'static Helper> {
    static HELPER: OnceLock<Option<&'static Helper>> = OnceLock::new();
    *HELPER.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel::<&'static Helper>();
        let spawned = std::thread::Builder::new()
            .name("tether-ggml-helper".into())
            .spawn(move || {
                let Ok(helper) = receiver.recv() else {
                    return;
                };
                loop {
                    let offered = helper.offered.lock().ok().and_then(|mut o| o.take());
                    match offered {
                        // A piece that panicked would never be done, and its owner would wait
                        // for it for ever: a stopped process says more than a hung one.
                        Some(work) => {
                            let run = std::panic::AssertUnwindSafe(|| work.run());
                            if std::panic::catch_unwind(run).is_err() {
                                std::process::abort();
                            }
                        }
                        None => std::thread::park(),
                    }
                }
            })
            .ok()?;
        // Leaked once per process: the helper lives as long as it.
        let helper: &'static Helper = Box::leak(Box::new(Helper {
            offered: Mutex::new(None),
            thread: spawned.thread().clone(),
        }));
        sender.send(helper).ok()?;
        Some(helper)
    })
}

/// Computes every piece of `work` on this thread, shared with the helper when it is free, and
/// returns once all are done.
pub(crate) fn share<W: Pieces>(work: W, pieces: usize) {
    let shared = SharedWork::new(work, pieces);
    // Offered only when the helper holds no other work (another context's, on another
    // thread): then this is computed here alone.
    let offered_to = helper().filter(|helper| {
        helper.offered.try_lock().is_ok_and(|mut slot| {
            slot.is_none() && {
                *slot = Some(Arc::clone(&shared) as Arc<dyn Offered>);
                true
            }
        })
    });
    if let Some(helper) = offered_to {
        helper.thread.unpark();
    }
    if offered_to.is_none() || !owner_waits() {
        shared.run();
    }
    shared.wait();
    // Not taken (the helper did not wake in time): withdrawn, so the helper does not find it.
    if let Some(helper) = offered_to
        && let Ok(mut slot) = helper.offered.lock()
        && slot
            .as_ref()
            .is_some_and(|o| std::ptr::addr_eq(Arc::as_ptr(o), Arc::as_ptr(&shared)))
    {
        *slot = None;
    }
}

/// Whether an owner leaves every piece of work it offered to the helper: for tests that hold
/// the helper's pieces to the owner's.
#[cfg(test)]
pub(crate) static OWNER_WAITS: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
fn owner_waits() -> bool {
    OWNER_WAITS.load(Ordering::Relaxed)
}

#[cfg(not(test))]
fn owner_waits() -> bool {
    false
}

/// Serialises the tests that use the helper, the switch and [`OWNER_WAITS`], all global.
#[cfg(test)]
pub(crate) static TESTS: Mutex<()> = Mutex::new(());
