//! The sentence encoder's speed and memory over BFCL's 1,853 tools (the largest real catalogue
//! we know): tokens per tool text, a cold encoding of every tool on every core, one query, and
//! the peak resident memory of the process. `cargo bench -p tether-encoder --bench encode`;
//! needs `tether model pull`'s encoder and scripts/install-peers.sh's BFCL fixture.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use serde_json::Value;
use tether_encoder::SentenceEncoder;

/// The text the catalogue encodes for a tool (`tether_catalog::semantic::tool_text`, without
/// the identifier splitting, which changes a few tokens at most).
fn tool_text(tool: &Value) -> String {
    let mut text = tool["name"].as_str().unwrap_or("").replace(['_', '.'], " ");
    text.push_str(": ");
    text.push_str(tool["description"].as_str().unwrap_or(""));
    if let Some(p) = tool["inputSchema"]["properties"].as_object() {
        text.push_str(" Parameters: ");
        text.push_str(&p.keys().cloned().collect::<Vec<_>>().join(", "));
    }
    text
}

/// A memory figure of this process from /proc/self/status (`VmHWM`: peak, `VmRSS`: now).
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| {
            v.trim_start_matches(':')
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn peak_rss_mib() -> f64 {
    status_mib("VmHWM")
}

/// Encodes every text on `workers` threads, 16 texts a call, as the catalogue does.
fn encode_all(encoder: &SentenceEncoder, texts: &[String], workers: usize) -> Duration {
    let started = Instant::now();
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..workers {
            let next = &next;
            s.spawn(move || {
                loop {
                    let at = next.fetch_add(16, std::sync::atomic::Ordering::Relaxed);
                    let Some(batch) = texts.get(at..(at + 16).min(texts.len())) else {
                        break;
                    };
                    if batch.is_empty() {
                        break;
                    }
                    let batch: Vec<&str> = batch.iter().map(String::as_str).collect();
                    std::hint::black_box(encoder.embed_batch(&batch));
                }
            });
        }
    });
    started.elapsed()
}

fn rss_mib() -> f64 {
    status_mib("VmRSS")
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let path = test_support::workspace_root().join("peers/bfcl/tools.json");
    let tools: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/install-peers.sh", path.display())),
    )
    .unwrap();
    let texts: Vec<String> = tools.iter().map(tool_text).collect();
    println!(
        "before loading: peak RSS {:.1} MiB, now {:.1}",
        peak_rss_mib(),
        rss_mib()
    );
    let started = Instant::now();
    let encoder = SentenceEncoder::load(&test_support::encoder_dir())
        .unwrap_or_else(|e| panic!("{e}; run `tether model pull`"));
    let load = started.elapsed();
    let mut lengths: Vec<usize> = texts.iter().map(|t| encoder.tokenize(t).len()).collect();
    lengths.sort_unstable();

    let total: usize = lengths.iter().sum();
    println!(
        "{} tool texts, {} tokens: median {}, p90 {}, max {}",
        texts.len(),
        total,
        lengths[lengths.len() / 2],
        lengths[lengths.len() * 9 / 10],
        lengths[lengths.len() - 1]
    );
    println!(
        "load: {:.0} ms, peak RSS {:.1} MiB, now {:.1}",
        load.as_secs_f64() * 1e3,
        peak_rss_mib(),
        rss_mib()
    );
    let workers = std::env::var("TETHER_BENCH_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let all = encode_all(&encoder, &texts, workers);
    println!(
        "every tool on {workers} threads: {:.2} s ({:.0} tokens/s), peak RSS {:.1} MiB",
        all.as_secs_f64(),
        total as f64 / all.as_secs_f64(),
        peak_rss_mib()
    );
    if std::env::var_os("TETHER_BENCH_FAST_ONLY").is_some() {
        return;
    }
    let portable = SentenceEncoder::load(&test_support::encoder_dir())
        .unwrap()
        .without_vnni();
    let all = encode_all(&portable, &texts, workers);
    println!(
        "  the same without VNNI (the AVX2 kernel, as on a CPU without it): {:.2} s",
        all.as_secs_f64()
    );
    drop(portable);
    let queries = [
        "what is the weather in Paris tomorrow",
        "take 9 away from 30",
        "find restaurants near me that serve sushi and are open late",
    ];
    let mut samples: Vec<Duration> = Vec::new();
    for _ in 0..20 {
        for q in queries {
            let started = Instant::now();
            std::hint::black_box(encoder.embed(q));
            samples.push(started.elapsed());
        }
    }
    samples.sort_unstable();
    println!(
        "one query: median {:.2} ms (min {:.2}, max {:.2})",
        samples[samples.len() / 2].as_secs_f64() * 1e3,
        samples[0].as_secs_f64() * 1e3,
        samples[samples.len() - 1].as_secs_f64() * 1e3
    );
    println!(
        "machine load: {}",
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
}
