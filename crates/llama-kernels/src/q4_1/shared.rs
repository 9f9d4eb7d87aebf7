//! A product ggml computes on one thread, shared with one helper thread in chunks of rows
//! that either thread claims. The embedded model runs ggml on one thread when another job
//! keeps a core busy, since ggml's threads meet at a barrier after every operation and one
//! that waits for the other job's time slice holds the rest back. The products, about three
//! quarters of a prompt's work, need no such meeting: the helper takes what it gets to while
//! the scheduler gives it a turn beside the other job, and ggml's thread takes the rest. A
//! helper that never runs costs the product nothing but the hand-over (docs/decisions.md,
//! "A helper thread for the prompt's products beside a busy job").
//!
//! Neither thread spins for more than a moment: the helper sleeps between products, and
//! ggml's thread, once no chunk is left, sleeps until the helper's last one is in.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;

use super::{BlockQ4_1, BlockQ8_1, COLS, RowScales, Shape, TokenTile, gemm, rows_against_tile};

/// Weight rows per chunk: small enough that the helper's last chunk, which ggml's thread may
/// have to wait for, is a few tens of microseconds, and large enough that a chunk's rows
/// (a few kilobytes) are read from the first cache level for every tile.
const CHUNK_ROWS: usize = 32;

/// Whether products on one thread are shared with the helper: set for each request by whoever
/// chose the threads (`set_helper`).
static ON: AtomicBool = AtomicBool::new(false);

/// Turns sharing one-thread products with the helper thread on or off, for the products that
/// follow, in every thread of this process.
pub fn set_helper(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Whether one-thread products are shared now.
pub fn helper_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Chunks computed by a thread other than the product's owner, for the log and the tests.
static HELPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many chunks of rows the helper has computed in this process.
pub fn helped_chunks() -> u64 {
    HELPED.load(Ordering::Relaxed)
}

/// One product, shared: what both threads need, and the chunks' counters.
pub(super) struct SharedProduct {
    shape: Shape,
    a: *const BlockQ4_1,
    c: *mut f32,
    /// Every tile of the product's tokens, filled before the helper is told.
    tiles: Vec<TokenTile>,
    chunks: usize,
    /// The next chunk to claim; at `chunks` or more, none is left.
    next: AtomicUsize,
    /// Chunks whose outputs are in C.
    done: AtomicUsize,
    /// ggml's thread, woken by whoever finishes the last chunk.
    owner: Thread,
}

// SAFETY: `a` and `c` are read and written only for a claimed chunk, and ggml's thread does
// not return from the product (after which they may dangle) before every claimed chunk is
// done; chunks are disjoint runs of rows, so no two threads write the same output.
unsafe impl Send for SharedProduct {}
// SAFETY: as above; everything else is atomics or read-only after the product is made.
unsafe impl Sync for SharedProduct {}

impl SharedProduct {
    /// The product of `a` and `b` into `c`, its tokens' tiles filled, no chunk claimed yet;
    /// its owner is the calling thread.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `a`, `b` and `c` hold the matrices `shape` describes,
    /// and stay valid until [`Self::wait`] returns.
    pub(super) unsafe fn new(
        shape: Shape,
        a: *const BlockQ4_1,
        b: *const BlockQ8_1,
        c: *mut f32,
    ) -> Arc<Self> {
        let tiles = (0..shape.n.div_ceil(COLS))
            .map(|col_tile| {
                let mut tile = TokenTile::new(shape.k);
                // SAFETY: the caller's promise for B.
                unsafe { tile.fill(shape, b, col_tile) };
                tile
            })
            .collect();
        Arc::new(SharedProduct {
            shape,
            a,
            c,
            tiles,
            chunks: shape.m.div_ceil(CHUNK_ROWS),
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            owner: std::thread::current(),
        })
    }

    /// Returns once every chunk is done, the owner's wait: a moment's spinning, then sleep
    /// until the thread that finishes the last chunk wakes it.
    pub(super) fn wait(&self) {
        let mut spins = 0u32;
        while self.done.load(Ordering::Acquire) < self.chunks {
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::park();
            }
        }
    }

    /// Claims chunks and computes them until none is left.
    pub(super) fn work(&self) {
        let helping = std::thread::current().id() != self.owner.id();
        let mut rows = RowScales::new(self.shape.k);
        loop {
            let chunk = self.next.fetch_add(1, Ordering::Relaxed);
            if chunk >= self.chunks {
                return;
            }
            let first = chunk * CHUNK_ROWS;
            let last = (first + CHUNK_ROWS).min(self.shape.m);
            // SAFETY: a product is shared only once `super::enabled` found AVX2, FMA and F16C;
            // the rows are within A, C is alive until every claimed chunk is done (above),
            // and the tiles were filled from this product's B.
            unsafe {
                rows.fill(self.shape, self.a, first, last);
                for tile in &self.tiles {
                    rows_against_tile(self.shape, self.a, self.c, &mut rows, tile);
                }
            }
            if helping {
                HELPED.fetch_add(1, Ordering::Relaxed);
            }
            if self.done.fetch_add(1, Ordering::Release) + 1 == self.chunks {
                self.owner.unpark();
            }
        }
    }
}

/// The helper thread and the product it is offered.
struct Helper {
    offered: Mutex<Option<Arc<SharedProduct>>>,
    thread: Thread,
}

/// The helper, started with the first shared product; `None` where it could not be started.
fn helper() -> Option<&'static Helper> {
    static HELPER: OnceLock<Option<&'static Helper>> = OnceLock::new();
    *HELPER.get_or_init(|| {
        let (sender, receiver) = std::sync::mpsc::channel::<&'static Helper>();
        let spawned = std::thread::Builder::new()
            .name("tether-q4_1-helper".into())
            .spawn(move || {
                let Ok(helper) = receiver.recv() else {
                    return;
                };
                loop {
                    let offered = helper.offered.lock().ok().and_then(|mut o| o.take());
                    match offered {
                        Some(product) => product.work(),
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

/// The whole product on ggml's one thread, shared with the helper when it is free.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `a`, `b` and `c` hold the matrices `shape` describes.
pub(super) unsafe fn gemm_shared(
    shape: Shape,
    a: *const BlockQ4_1,
    b: *const BlockQ8_1,
    c: *mut f32,
) {
    let Some(helper) = helper() else {
        // SAFETY: the caller's promise.
        return unsafe { gemm(0, 1, shape, a, b, c) };
    };
    // SAFETY: the caller's promise.
    let product = unsafe { SharedProduct::new(shape, a, b, c) };
    // Offered only when the helper holds no other product (another context's, on another
    // thread): then this one is computed here alone.
    let offered = helper.offered.try_lock().is_ok_and(|mut slot| {
        slot.is_none() && {
            *slot = Some(Arc::clone(&product));
            true
        }
    });
    if offered {
        helper.thread.unpark();
    }
    product.work();
    product.wait();
    // Not taken (the helper never woke in time): withdrawn, so the helper does not find it.
    if offered
        && let Ok(mut slot) = helper.offered.lock()
        && slot.as_ref().is_some_and(|p| Arc::ptr_eq(p, &product))
    {
        *slot = None;
    }
}

/// How many times ggml's thread checks for the helper's last chunk before it sleeps: a few
/// microseconds.
const SPINS: u32 = 2_000;
