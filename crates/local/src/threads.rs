//! How many threads llama.cpp gets for one request: the physical cores, less those other jobs
//! keep busy at that moment.

/// Physical cores, which is what llama.cpp runs best on.
pub fn default_threads() -> i32 {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let physical = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .map(|info| {
            let mut pairs = std::collections::HashSet::new();
            let mut physical_id = String::new();
            for line in info.lines() {
                if let Some(v) = line.strip_prefix("physical id") {
                    physical_id = v.trim_start_matches([' ', '\t', ':']).to_string();
                } else if let Some(v) = line.strip_prefix("core id") {
                    pairs.insert((
                        physical_id.clone(),
                        v.trim_start_matches([' ', '\t', ':']).to_string(),
                    ));
                }
            }
            pairs.len()
        })
        .filter(|&n| n > 0)
        .unwrap_or(logical);
    i32::try_from(physical.min(logical).max(1)).unwrap_or(1)
}

/// Threads for one request when none were set: the physical cores less those another job is
/// keeping busy right now (`procs_running` in `/proc/stat`, less the running threads of this
/// process and of the servers it started, the fewest of a few samples), at least one.
/// llama.cpp's threads meet at a barrier after every layer, so one thread that shares its core
/// with another job holds all the others back: on a two-core machine with one busy job, two
/// threads took twice as long as one.
pub fn threads_for_now() -> i32 {
    let physical = default_threads();
    let logical = std::thread::available_parallelism()
        .map(|n| i32::try_from(n.get()).unwrap_or(i32::MAX))
        .unwrap_or(1);
    // Sampled a few times a millisecond apart, the fewest: a thread that runs for an instant
    // (this process's own runtime, a server starting up) is no job keeping a core busy, and
    // one sample took it for one on a quiet machine and halved the threads.
    let ours = own_processes();
    let mut others: Option<i32> = None;
    for sample in 0..SAMPLES {
        if sample > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let Some(running) = procs_running() else {
            return physical;
        };
        let now = running - running_tasks(&ours).max(1);
        others = Some(others.map_or(now, |o| o.min(now)));
    }
    threads_left(physical, logical, others.unwrap_or(0))
}

/// Whether a request on `threads` shares its prompt's products with the kernel's helper
/// thread: when the threads were chosen by the load (not `fixed` by the person) and are
/// fewer than the physical cores, so that another job keeps one busy. llama.cpp's one
/// thread then meets no other at its barriers, and the helper computes what part of each
/// product the scheduler gives it a turn for beside the other job (docs/decisions.md, "A
/// helper thread for the prompt's products beside a busy job").
/// `TETHER_PROMPT_HELPER=off` turns it off and `on` on for any request on one thread, for
/// comparisons and tests.
pub(crate) fn prompt_helper(fixed: bool, threads: i32) -> bool {
    match std::env::var("TETHER_PROMPT_HELPER").as_deref() {
        Ok("off") => false,
        Ok("on") => threads == 1,
        _ => !fixed && threads < default_threads(),
    }
}

/// How many times [`threads_for_now`] looks at the running tasks.
const SAMPLES: usize = 5;

/// The machine's running tasks (`procs_running` in `/proc/stat`).
fn procs_running() -> Option<i32> {
    std::fs::read_to_string("/proc/stat").ok().and_then(|stat| {
        stat.lines()
            .find_map(|l| l.strip_prefix("procs_running "))
            .and_then(|n| n.trim().parse::<i32>().ok())
    })
}

/// This process and the processes it started (its servers, theirs), from `/proc`.
fn own_processes() -> Vec<u32> {
    let me = std::process::id();
    // Every process's parent, to find this one's descendants.
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let parent = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| parent_in_stat(&stat));
            if let Some(parent) = parent {
                parents.push((pid, parent));
            }
        }
    }
    let mut ours = vec![me];
    let mut i = 0;
    while let Some(&pid) = ours.get(i) {
        ours.extend(parents.iter().filter(|(_, p)| *p == pid).map(|(c, _)| *c));
        i += 1;
    }
    ours
}

/// The running threads of `processes`.
fn running_tasks(processes: &[u32]) -> i32 {
    let running: usize = processes
        .iter()
        .map(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| {
                tasks
                    .flatten()
                    .filter(|task| {
                        std::fs::read_to_string(task.path().join("stat"))
                            .is_ok_and(|stat| state_in_stat(&stat) == Some('R'))
                    })
                    .count()
            })
        })
        .sum();
    i32::try_from(running).unwrap_or(i32::MAX)
}

/// The state letter of a `/proc/…/stat` line (after the command's closing parenthesis, which
/// a command name may itself contain).
fn state_in_stat(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The parent's pid in a `/proc/…/stat` line.
fn parent_in_stat(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// [`threads_for_now`]'s arithmetic: `others` is how many other threads are running.
fn threads_left(physical: i32, logical: i32, others: i32) -> i32 {
    physical.min(logical - others.max(0)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_gives_state_and_parent_whatever_the_command() {
        let stat = "4242 (tether (x) y) R 17 4242 4242 0 -1 4194560";
        assert_eq!(state_in_stat(stat), Some('R'));
        assert_eq!(parent_in_stat(stat), Some(17));
        assert_eq!(state_in_stat("garbage"), None);
        // This test's own thread is running while it counts.
        assert!(running_tasks(&own_processes()) >= 1);
    }

    #[test]
    fn threads_leave_the_cores_other_jobs_keep_busy() {
        assert!(default_threads() >= 1);
        assert!(threads_for_now() >= 1);
        // Two cores: quiet, both; one other job running, one; a crowd, still one.
        assert_eq!(threads_left(2, 2, 0), 2);
        assert_eq!(threads_left(2, 2, 1), 1);
        assert_eq!(threads_left(2, 2, 8), 1);
        // Physical cores bound it even when hyperthreads are idle.
        assert_eq!(threads_left(4, 8, 2), 4);
    }
}
