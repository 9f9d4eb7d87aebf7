//! The README's first command on a busy machine (`TETHER_BENCH_ONLY=busy`): quiet and beside
//! one core-bound job, with the prompt cache warm, holding another question's turn, and off.

/// The README's first command, end to end, on a quiet machine and with one other core-bound
/// job (a thread spinning in this process), rounds interleaved: the goal is at most 1.5× the
/// quiet time. Threads are chosen per request by the machine's load; `TETHER_THREADS` fixes
/// them, to compare. Measured with the prompt cache as a person's second and later runs have
/// it, and without it (`TETHER_PROMPT_CACHE=off`), as their first. `TETHER_BENCH_BASELINE`
/// names another build of `tether` to time in the same rounds, alternating with this one,
/// each with its own caches.
pub fn busy_machine() {
    let mut builds = vec![(
        "this build".to_string(),
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_tether")),
    )];
    if let Some(baseline) = std::env::var_os("TETHER_BENCH_BASELINE") {
        let baseline = std::path::PathBuf::from(baseline);
        builds.push((format!("baseline {}", baseline.display()), baseline));
    }
    for cache in ["warm", "shared", "off"] {
        busy_machine_with(cache, &builds);
    }
}

/// The README's first command quiet and beside a core-bound job, with the prompt cache `warm`
/// (holding this question's system turns), `shared` (holding only what another question with
/// other tools stored: the usage guide, the built-in server's instructions and the tool
/// guide's heading, as a question's first run finds it) or `off`, for each of `builds`.
fn busy_machine_with(cache: &str, builds: &[(String, std::path::PathBuf)]) {
    let question = "What is 10 + 20? Use the add tool.";
    let dir = std::env::temp_dir().join(format!("tether-bench-busy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let run = |tether: &std::path::Path, question: &str, cache_dir: &std::path::Path| {
        let mut command = std::process::Command::new(tether);
        command
            .args(["run", question])
            .current_dir(&dir)
            // The run's own pins and results, not the person's (natural.rs says why).
            .env("TETHER_DATA_DIR", dir.join("data"))
            .env_remove("TETHER_MODEL")
            .stdin(std::process::Stdio::null());
        if cache == "off" {
            command.env("TETHER_PROMPT_CACHE", "off");
        } else {
            command.env("TETHER_PROMPT_CACHE", cache_dir);
        }
        command
    };
    // Each build's caches: for `shared`, what another question stores, copied afresh into
    // `fresh` before each timed run; for `warm`, this question's own.
    let caches: Vec<(std::path::PathBuf, std::path::PathBuf)> = (0..builds.len())
        .map(|i| {
            (
                dir.join(format!("other-cache-{i}")),
                dir.join(format!("cache-{i}")),
            )
        })
        .collect();
    for ((_, tether), (other, own)) in builds.iter().zip(&caches) {
        let _ = std::fs::remove_dir_all(other);
        let _ = std::fs::remove_dir_all(own);
        if cache == "shared" {
            let status = run(tether, "What is 12 times 7?", other).output().unwrap();
            assert!(status.status.success());
        }
    }
    let timed = |tether: &std::path::Path,
                 (other, own): &(std::path::PathBuf, std::path::PathBuf)| {
        if cache == "shared" {
            let _ = std::fs::remove_dir_all(own);
            std::fs::create_dir_all(own).unwrap();
            for entry in std::fs::read_dir(other).unwrap().flatten() {
                std::fs::copy(entry.path(), own.join(entry.file_name())).unwrap();
            }
        }
        let mut command = run(tether, question, own);
        let started = std::time::Instant::now();
        let output = command.output().unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        started.elapsed().as_secs_f64()
    };
    // One run first, so that a warm cache holds this question's system turns.
    for ((_, tether), caches) in builds.iter().zip(&caches) {
        timed(tether, caches);
    }
    let rounds = if std::env::var_os("TETHER_BENCH_QUICK").is_some() {
        3
    } else {
        7
    };
    let mut times = vec![(Vec::new(), Vec::new()); builds.len()];
    for _ in 0..rounds {
        for (((_, tether), caches), (quiet, busy)) in builds.iter().zip(&caches).zip(&mut times) {
            quiet.push(timed(tether, caches));
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let spinner = {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = std::hint::black_box(
                            x.wrapping_mul(6364136223846793005).wrapping_add(1),
                        );
                    }
                })
            };
            busy.push(timed(tether, caches));
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            spinner.join().unwrap();
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let described = match cache {
        "shared" => "holding another question's system turn (12 times 7)",
        other => other,
    };
    for ((name, _), (quiet, busy)) in builds.iter().zip(&mut times) {
        let (q, q_min, q_max) = median(quiet);
        let (b, b_min, b_max) = median(busy);
        let which = if builds.len() > 1 {
            format!(", {name}")
        } else {
            String::new()
        };
        println!(
            "the README's first command, prompt cache {described}, {rounds} interleaved rounds{which}, median (min–max):"
        );
        println!("  quiet machine:                 {q:.2} s ({q_min:.2}–{q_max:.2})");
        println!("  with one core-bound job:       {b:.2} s ({b_min:.2}–{b_max:.2})");
        println!(
            "  busy / quiet:                  {:.2}× (goal ≤ 1.5×)",
            b / q
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
