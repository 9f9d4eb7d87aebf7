//! One query's linear layers on two cores. A query is a few dozen tokens encoded while someone
//! waits and the cores are otherwise idle; its work is almost all in the linear layers, whose
//! rows are independent. So a second thread, started once per query, takes the bottom half of
//! each layer's rows from a copy and sends back their outputs, while this thread does the top
//! half. Each hand-over spins a little before it blocks: the gaps between layers (attention, a
//! norm) are tens of microseconds, and waking a parked thread cost 40 µs on the machine this
//! was measured on, against a few for a spinning one. Plain channels and copies, so no unsafe
//! code: the copies are a few kilobytes a layer.

use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};

use crate::int8::{QuantizedLinear, QuantizedRows};
use crate::math;

/// Fewer rows than this are not split: a handover costs about what it saves.
const SPLIT_ROWS: usize = 8;

/// Polls of a channel before a blocking wait (about a hundred microseconds).
const SPINS: usize = 4096;

/// Half of a layer for the second thread.
struct Job<'a> {
    linear: &'a QuantizedLinear,
    rows: QuantizedRows,
    vnni: bool,
    /// GELU over the outputs too (the intermediate layer's), on their thread.
    gelu: bool,
}

/// This thread's end of the two channels to the second thread.
pub(crate) struct RowSplit<'a> {
    jobs: Sender<Job<'a>>,
    done: Receiver<Vec<f32>>,
}

/// Runs `work` with a [`RowSplit`] whose second thread lives as long as `work` does.
pub(crate) fn with_second_thread<'a, T>(work: impl FnOnce(&RowSplit<'a>) -> T) -> T {
    std::thread::scope(|scope| {
        let (jobs, jobs_in) = channel::<Job<'a>>();
        let (done_out, done) = channel();
        scope.spawn(move || {
            while let Some(job) = receive(&jobs_in) {
                let mut y = vec![0f32; job.rows.len() * job.linear.outputs()];
                job.linear.apply(&job.rows, &mut y, false, job.vnni);
                if job.gelu {
                    math::gelu(&mut y);
                }
                if done_out.send(y).is_err() {
                    return;
                }
            }
        });
        // The split is dropped when `work` ends, closing the job channel, so the second
        // thread ends before the scope waits for it.
        let split = RowSplit { jobs, done };
        work(&split)
    })
}

impl<'a> RowSplit<'a> {
    /// `linear.apply(x, y, accumulate, vnni)`, then GELU over `y` when `gelu` (never with
    /// `accumulate`), the bottom half of the rows on the second thread: the same numbers,
    /// since each output is the same sum added or stored.
    pub(crate) fn apply(
        &self,
        linear: &'a QuantizedLinear,
        x: &QuantizedRows,
        y: &mut [f32],
        accumulate: bool,
        vnni: bool,
        gelu: bool,
    ) {
        let alone = |x: &QuantizedRows, y: &mut [f32]| {
            linear.apply(x, y, accumulate, vnni);
            if gelu {
                math::gelu(y);
            }
        };
        let rows = x.len();
        if rows < SPLIT_ROWS {
            alone(x, y);
            return;
        }
        let half = rows.div_ceil(2);
        let job = Job {
            linear,
            rows: x.copy_rows(half..rows),
            vnni,
            gelu,
        };
        if self.jobs.send(job).is_err() {
            alone(x, y);
            return;
        }
        let (top, bottom) = y.split_at_mut(half * linear.outputs());
        alone(&x.copy_rows(0..half), top);
        match receive(&self.done) {
            Some(theirs) if accumulate => bottom.iter_mut().zip(&theirs).for_each(|(y, v)| *y += v),
            Some(theirs) if theirs.len() == bottom.len() => bottom.copy_from_slice(&theirs),
            // The second thread is gone (it panicked): do its half here.
            _ => alone(&x.copy_rows(half..rows), bottom),
        }
    }
}

/// The next message, polling [`SPINS`] times before blocking; `None` once the sender is gone.
fn receive<T>(from: &Receiver<T>) -> Option<T> {
    for _ in 0..SPINS {
        match from.try_recv() {
            Ok(value) => return Some(value),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    from.recv().ok()
}
