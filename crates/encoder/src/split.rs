//! One query's linear layers on two cores, when the second is free. A query is a few dozen
//! tokens encoded while someone waits; its work is almost all in the linear layers, whose
//! outputs are independent. So a second thread, started once per query, is offered each
//! layer: the layer's outputs are cut into chunks of a panel or two of weights, and both
//! threads claim the next chunk from a shared counter until none is left, this thread writing
//! its outputs in place and the second sending its own back. Splitting the outputs rather than
//! the rows lets a query of two tokens use both cores (the kernels take rows two at a time, so
//! a split of rows paid only from eight), and each thread reads only its chunks' weights.
//!
//! Claiming makes the split follow the machine: where another job keeps the second core busy,
//! the second thread runs seldom and claims little, so this thread does nearly everything
//! instead of waiting for it (a fixed half each took 8–10 ms a query beside one core-bound
//! job, against 4 ms on one thread). A chunk the second thread claimed but has not sent back
//! within about the time this thread takes for one is done here too, and its late copy is
//! dropped: a thread preempted inside a chunk for a whole time slice holds up nothing.
//!
//! Each hand-over polls a while before it blocks, yielding its core between polls (to a
//! thread that shares it, if any): the gaps between layers (attention, a norm)
//! are tens of microseconds, and waking a parked thread cost 40 µs on the machine this was
//! measured on, against a few for a polling one. Plain channels, atomics and copies, so no
//! unsafe code: the copies are a few kilobytes a layer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::time::{Duration, Instant};

use crate::int8::{Outputs, PANEL, QuantizedLinear, QuantizedRows};
use crate::math;

/// Fewer rows than this are not split: a query has at least three (its two markers and a
/// word), and one row is little more work than a handover.
const SPLIT_ROWS: usize = 2;

/// Polls of a channel before a blocking wait, each after a yield of the core (a millisecond
/// or two on an idle core).
const SPINS: usize = 4096;

/// Chunks a layer is cut into, at most: enough that the thread with a core to itself does
/// most of a layer when the other shares its core, few enough that a hand-over stays cheap.
const CHUNKS: usize = 12;

/// One layer offered to the second thread.
struct Job<'a> {
    linear: &'a QuantizedLinear,
    rows: Arc<QuantizedRows>,
    vnni: bool,
    /// GELU over the outputs too (the intermediate layer's), on their thread.
    gelu: bool,
    /// Which layer of the query this is, so that a late chunk of an earlier one is dropped.
    layer: u64,
    chunks: Chunks,
    /// The next chunk not yet claimed by either thread.
    next: Arc<AtomicUsize>,
}

/// A layer's panels cut into chunks of `per` panels (the last may be shorter).
#[derive(Clone, Copy)]
struct Chunks {
    panels: usize,
    per: usize,
}

impl Chunks {
    fn new(panels: usize) -> Chunks {
        Chunks {
            panels,
            per: panels.div_ceil(CHUNKS).max(1),
        }
    }

    fn count(&self) -> usize {
        self.panels.div_ceil(self.per)
    }

    fn panels_of(&self, chunk: usize) -> std::ops::Range<usize> {
        let start = (chunk * self.per).min(self.panels);
        start..(start + self.per).min(self.panels)
    }
}

/// A chunk's outputs from the second thread: the layer, the chunk, rows × its outputs.
struct Done {
    layer: u64,
    chunk: usize,
    outputs: Vec<f32>,
}

/// This thread's end of the two channels to the second thread.
pub(crate) struct OutputSplit<'a> {
    jobs: Sender<Job<'a>>,
    done: Receiver<Done>,
    layers: std::cell::Cell<u64>,
    /// Chunks the second thread claimed and was too late with, this query.
    late: std::cell::Cell<u32>,
}

/// Late chunks after which a query stops offering layers to the second thread: it has no
/// core to itself, and each late chunk cost this thread about a chunk's time of waiting.
const LATE_AT_MOST: u32 = 2;

/// Runs `work` with a [`OutputSplit`] whose second thread lives as long as `work` does.
pub(crate) fn with_second_thread<'a, T>(work: impl FnOnce(&OutputSplit<'a>) -> T) -> T {
    std::thread::scope(|scope| {
        let (jobs, jobs_in) = channel::<Job<'a>>();
        let (done_out, done) = channel();
        scope.spawn(move || {
            while let Some(job) = receive(&jobs_in) {
                loop {
                    let chunk = job.next.fetch_add(1, Ordering::Relaxed);
                    if chunk >= job.chunks.count() {
                        break;
                    }
                    let panels = job.chunks.panels_of(chunk);
                    let out = Outputs {
                        stride: panels.len() * PANEL,
                        panels,
                        offset: 0,
                    };
                    let mut y = vec![0f32; job.rows.len() * out.stride];
                    job.linear
                        .apply_panels(&job.rows, &mut y, &out, false, job.vnni);
                    if job.gelu {
                        math::gelu(&mut y);
                    }
                    #[cfg(test)]
                    std::thread::sleep(tests::helper_delay());
                    let done = Done {
                        layer: job.layer,
                        chunk,
                        outputs: y,
                    };
                    if done_out.send(done).is_err() {
                        return;
                    }
                }
            }
        });
        // The split is dropped when `work` ends, closing the job channel, so the second
        // thread ends before the scope waits for it.
        let split = OutputSplit {
            jobs,
            done,
            layers: std::cell::Cell::new(0),
            late: std::cell::Cell::new(0),
        };
        work(&split)
    })
}

impl<'a> OutputSplit<'a> {
    /// `linear.apply(x, y, accumulate, vnni)`, then GELU over `y` when `gelu` (never with
    /// `accumulate`), with the second thread taking what chunks of the outputs it claims: the
    /// same numbers, since each output is the same sum added or stored.
    pub(crate) fn apply(
        &self,
        linear: &'a QuantizedLinear,
        x: &QuantizedRows,
        y: &mut [f32],
        accumulate: bool,
        vnni: bool,
        gelu: bool,
    ) {
        let (rows, width, panels) = (x.len(), linear.outputs(), linear.panels());
        let chunks = Chunks::new(panels);
        let next = Arc::new(AtomicUsize::new(0));
        let layer = self.layers.get() + 1;
        self.layers.set(layer);
        let offered = rows >= SPLIT_ROWS
            && chunks.count() > 1
            && self.late.get() < LATE_AT_MOST
            && self
                .jobs
                .send(Job {
                    linear,
                    rows: Arc::new(x.clone()),
                    vnni,
                    gelu,
                    layer,
                    chunks,
                    next: Arc::clone(&next),
                })
                .is_ok();
        // This thread's chunks go straight into `y`.
        let here = |chunk: usize, y: &mut [f32]| {
            let panels = chunks.panels_of(chunk);
            let out = Outputs {
                offset: panels.start * PANEL,
                panels,
                stride: width,
            };
            linear.apply_panels(x, y, &out, accumulate, vnni);
            if gelu {
                let columns = out.panels.start * PANEL..out.panels.end * PANEL;
                y.chunks_exact_mut(width)
                    .for_each(|row| math::gelu(&mut row[columns.clone()]));
            }
        };
        let mut mine = vec![false; chunks.count()];
        let started = Instant::now();
        loop {
            let chunk = next.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = mine.get_mut(chunk) else {
                break;
            };
            here(chunk, y);
            *slot = true;
        }
        if !offered {
            return;
        }
        let done_here = mine.iter().filter(|m| **m).count().max(1);
        // Twice the time a chunk takes here, and a little: what a chunk still out may keep
        // this thread waiting before it does that chunk itself. The second thread may have
        // claimed it just before this thread's last chunk ended, and start a little late.
        let patience = 2 * started.elapsed() / u32::try_from(done_here).unwrap_or(u32::MAX)
            + Duration::from_micros(10);
        let mut waited_since = Instant::now();
        while let Some(missing) = mine.iter().position(|m| !*m) {
            match self.done.try_recv() {
                Ok(done) if done.layer == layer => {
                    if let Some(slot) = mine.get_mut(done.chunk).filter(|m| !**m) {
                        *slot = true;
                        place(&done, chunks, width, accumulate, y);
                    }
                    waited_since = Instant::now();
                }
                // A chunk of an earlier layer this thread did itself.
                Ok(_) => {}
                Err(TryRecvError::Empty) if waited_since.elapsed() < patience => {
                    std::thread::yield_now();
                }
                // Too late, or the second thread is gone (it panicked): do it here.
                Err(_) => {
                    self.late.set(self.late.get() + 1);
                    here(missing, y);
                    mine[missing] = true;
                    waited_since = Instant::now();
                }
            }
        }
    }
}

/// Writes (or adds, when `accumulate`) the second thread's `done` chunk into `y`.
fn place(done: &Done, chunks: Chunks, width: usize, accumulate: bool, y: &mut [f32]) {
    let panels = chunks.panels_of(done.chunk);
    let columns = panels.start * PANEL..panels.end * PANEL;
    for (row, part) in y
        .chunks_exact_mut(width)
        .zip(done.outputs.chunks_exact(columns.len().max(1)))
    {
        let row = &mut row[columns.clone()];
        if accumulate {
            row.iter_mut().zip(part).for_each(|(y, v)| *y += v);
        } else {
            row.copy_from_slice(part);
        }
    }
}

/// Whether a second core is free for a query: the cores less the other tasks running now
/// (the fourth field of `/proc/loadavg`, less this thread), two or more. One read, about ten
/// microseconds (up to three, a yield apart, while another task is seen), and the cores
/// counted once per process: beside a job that keeps a core busy, a second thread only takes
/// turns with it, and a thread that polls looks like a job too, so the scheduler may put this
/// one beside the busy job instead (a query took 4.5–6.8 ms that way, 4 ms on one thread).
/// Where the file cannot be read (not Linux), the cores are taken to be free.
pub(crate) fn second_core_free() -> bool {
    // The cores are asked for once: the answer reads cgroup files, tens of microseconds.
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let others = || {
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|load| running_in_loadavg(&load))
            .map_or(0, |running| running.saturating_sub(1))
    };
    // A task seen running once may be passing through: the last query's second thread is
    // still leaving the scheduler when `join` returns, and so was counted against the next
    // query in 3 of 10 back-to-back queries on an idle machine.
    (0..LOOKS).any(|look| {
        if look > 0 {
            std::thread::yield_now();
        }
        cores.saturating_sub(others()) >= 2
    })
}

/// Looks at the running tasks, a yield apart, before a query is kept to one thread: a job
/// that keeps a core busy is seen in every one.
const LOOKS: usize = 3;

/// The tasks running now, from a `/proc/loadavg` line ("0.82 1.03 1.42 2/79 20110").
fn running_in_loadavg(load: &str) -> Option<usize> {
    load.split_whitespace()
        .nth(3)?
        .split_once('/')?
        .0
        .parse()
        .ok()
}

/// The next message, polling [`SPINS`] times before blocking; `None` once the sender is gone.
fn receive<T>(from: &Receiver<T>) -> Option<T> {
    for _ in 0..SPINS {
        match from.try_recv() {
            Ok(value) => return Some(value),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
    from.recv().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long the second thread sleeps before sending each chunk, in these tests.
    static DELAY_MICROS: AtomicUsize = AtomicUsize::new(0);

    pub(super) fn helper_delay() -> Duration {
        Duration::from_micros(DELAY_MICROS.load(Ordering::Relaxed) as u64)
    }

    /// A second thread that is late with every chunk (as one preempted inside it would be):
    /// this thread does those chunks itself, drops the late copies, stops offering after
    /// [`LATE_AT_MOST`], and the outputs are the whole layer's, stored, added or through GELU.
    #[test]
    fn late_chunks_are_done_here_and_their_copies_dropped() {
        let (outputs, rows) = (12 * PANEL, 8);
        let (layer, q) = crate::int8::test_layer_and_rows(outputs, 1536, rows);
        let start: Vec<f32> = (0..rows * outputs).map(|i| i as f32 * 0.5).collect();
        let expected = |accumulate: bool, gelu: bool| {
            let mut y = start.clone();
            layer.apply(&q, &mut y, accumulate, true);
            if gelu {
                math::gelu(&mut y);
            }
            y
        };
        // One layer each way (stored, added, through GELU), against the whole layer's outputs.
        fn check<'a>(
            split: &OutputSplit<'a>,
            layer: &'a QuantizedLinear,
            q: &QuantizedRows,
            start: &[f32],
            expected: &dyn Fn(bool, bool) -> Vec<f32>,
        ) {
            for (accumulate, gelu) in [(false, false), (true, false), (false, true)] {
                let mut y = start.to_vec();
                split.apply(layer, q, &mut y, accumulate, true, gelu);
                assert_eq!(y, expected(accumulate, gelu), "{accumulate} {gelu}");
            }
        }
        // On time: whatever the second thread takes, the outputs are the same. (A chunk may
        // still be late when other tests share the cores.)
        with_second_thread(|split| {
            for _ in 0..40 {
                check(split, &layer, &q, &start, &expected);
            }
            assert!(split.late.get() <= LATE_AT_MOST);
        });
        // Late with every chunk it claims: layers until it has claimed two, however long the
        // scheduler takes to run it, then no more offers.
        DELAY_MICROS.store(3000, Ordering::Relaxed);
        with_second_thread(|split| {
            let started = Instant::now();
            while split.late.get() < LATE_AT_MOST && started.elapsed() < Duration::from_secs(60) {
                check(split, &layer, &q, &start, &expected);
            }
            assert_eq!(split.late.get(), LATE_AT_MOST);
            for _ in 0..10 {
                check(split, &layer, &q, &start, &expected);
            }
            assert_eq!(
                split.late.get(),
                LATE_AT_MOST,
                "no offers after two late chunks"
            );
        });
        DELAY_MICROS.store(0, Ordering::Relaxed);
    }

    #[test]
    fn the_running_tasks_are_read_from_loadavg() {
        assert_eq!(running_in_loadavg("0.82 1.03 1.42 2/79 20110\n"), Some(2));
        assert_eq!(running_in_loadavg("0.82 1.03 1.42"), None);
        assert_eq!(running_in_loadavg("a b c x/y z"), None);
    }

    #[test]
    fn chunks_cover_every_panel_once() {
        for panels in [1, 6, 18, 24, 25] {
            let chunks = Chunks::new(panels);
            assert!(chunks.count() <= CHUNKS.max(panels.min(CHUNKS)));
            let covered: Vec<usize> = (0..chunks.count())
                .flat_map(|c| chunks.panels_of(c))
                .collect();
            assert_eq!(covered, (0..panels).collect::<Vec<_>>(), "{panels}");
        }
    }
}
