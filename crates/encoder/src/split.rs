//! One query's linear layers on two cores. A query is a few dozen tokens encoded while someone
//! waits and the cores are otherwise idle; its work is almost all in the linear layers, whose
//! outputs are independent. So a second thread, started once per query, takes the second half
//! of each layer's outputs (its panels of weights) for every row, from a copy of the rows, and
//! sends them back, while this thread does the first half. Splitting the outputs rather than
//! the rows lets a query of two tokens use both cores (the kernels take rows two at a time, so
//! a split of rows only paid from eight), and each thread reads half the weights: a query of
//! seven tokens went from 2.0 to 1.3 ms, longer ones stayed as they were. Each hand-over spins a little before it blocks: the gaps between layers (attention, a
//! norm) are tens of microseconds, and waking a parked thread cost 40 µs on the machine this
//! was measured on, against a few for a spinning one. Plain channels and copies, so no unsafe
//! code: the copies are a few kilobytes a layer.

use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};

use crate::int8::{Outputs, PANEL, QuantizedLinear, QuantizedRows};
use crate::math;

/// Fewer rows than this are not split: a query has at least three (its two markers and a
/// word), and one row is little more work than a handover.
const SPLIT_ROWS: usize = 2;

/// Polls of a channel before a blocking wait (about a hundred microseconds).
const SPINS: usize = 4096;

/// Half of a layer for the second thread.
struct Job<'a> {
    linear: &'a QuantizedLinear,
    rows: QuantizedRows,
    /// The panels of outputs it computes.
    panels: std::ops::Range<usize>,
    vnni: bool,
    /// GELU over the outputs too (the intermediate layer's), on their thread.
    gelu: bool,
}

/// This thread's end of the two channels to the second thread.
pub(crate) struct OutputSplit<'a> {
    jobs: Sender<Job<'a>>,
    done: Receiver<Vec<f32>>,
}

/// Runs `work` with a [`OutputSplit`] whose second thread lives as long as `work` does.
pub(crate) fn with_second_thread<'a, T>(work: impl FnOnce(&OutputSplit<'a>) -> T) -> T {
    std::thread::scope(|scope| {
        let (jobs, jobs_in) = channel::<Job<'a>>();
        let (done_out, done) = channel();
        scope.spawn(move || {
            while let Some(job) = receive(&jobs_in) {
                let out = Outputs {
                    stride: job.panels.len() * PANEL,
                    panels: job.panels,
                };
                let mut y = vec![0f32; job.rows.len() * out.stride];
                job.linear
                    .apply_panels(&job.rows, &mut y, &out, false, job.vnni);
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
        let split = OutputSplit { jobs, done };
        work(&split)
    })
}

impl<'a> OutputSplit<'a> {
    /// `linear.apply(x, y, accumulate, vnni)`, then GELU over `y` when `gelu` (never with
    /// `accumulate`), the second half of the outputs on the second thread: the same numbers,
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
        let (rows, width, panels) = (x.len(), linear.outputs(), linear.panels());
        if rows < SPLIT_ROWS || panels < 2 {
            alone(x, y);
            return;
        }
        let mid = panels / 2;
        let job = Job {
            linear,
            rows: x.copy_rows(0..rows),
            panels: mid..panels,
            vnni,
            gelu,
        };
        if self.jobs.send(job).is_err() {
            alone(x, y);
            return;
        }
        let ours = Outputs {
            panels: 0..mid,
            stride: width,
        };
        linear.apply_panels(x, y, &ours, accumulate, vnni);
        let split_at = mid * PANEL;
        if gelu {
            y.chunks_exact_mut(width)
                .for_each(|row| math::gelu(&mut row[..split_at]));
        }
        let theirs = match receive(&self.done) {
            Some(theirs) if theirs.len() == rows * (width - split_at) => theirs,
            // The second thread is gone (it panicked): do its half here.
            _ => {
                let mut theirs = vec![0f32; rows * (width - split_at)];
                let out = Outputs {
                    panels: mid..panels,
                    stride: width - split_at,
                };
                linear.apply_panels(x, &mut theirs, &out, false, vnni);
                if gelu {
                    math::gelu(&mut theirs);
                }
                theirs
            }
        };
        for (row, part) in y
            .chunks_exact_mut(width)
            .zip(theirs.chunks_exact(width - split_at))
        {
            let row = &mut row[split_at..];
            if accumulate {
                row.iter_mut().zip(part).for_each(|(y, v)| *y += v);
            } else {
                row.copy_from_slice(part);
            }
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
