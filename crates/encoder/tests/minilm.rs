//! The encoder against references: token ids from Hugging Face's `tokenizers`, and vectors from
//! the f32 forward pass, for the same model files (`tether model pull` fetches them;
//! scripts/test.sh runs it).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use tether_encoder::{DIMENSIONS, SentenceEncoder};

fn encoder() -> SentenceEncoder {
    let dir = test_support::encoder_dir();
    SentenceEncoder::load(&dir)
        .unwrap_or_else(|e| panic!("{e}; run `tether model pull` (scripts/test.sh does)"))
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn tokens_match_the_reference_tokenizer() {
    let encoder = encoder();
    // Token ids from Hugging Face's `tokenizers` for the same vocabulary.
    let cases: [(&str, &[u32]); 3] = [
        (
            "take 9 away from 30",
            &[101, 2202, 1023, 2185, 2013, 2382, 102],
        ),
        (
            "Subtract two numbers: a - b (a minus b, the difference).",
            &[
                101, 4942, 6494, 6593, 2048, 3616, 1024, 1037, 1011, 1038, 1006, 1037, 15718, 1038,
                1010, 1996, 4489, 1007, 1012, 102,
            ],
        ),
        (
            "Café résumé—naïve! 東京",
            &[101, 7668, 13746, 1517, 15743, 999, 1879, 1755, 102],
        ),
    ];
    for (text, ids) in cases {
        assert_eq!(encoder.tokenize(text), ids, "{text}");
    }
}

/// The 8-bit encoder against the f32 forward pass it replaced (which matched the numpy
/// reference of scripts/semantic_recall.py to 1e-4): fixtures/reference_vectors.json holds that
/// pass's vectors for five texts, short to long. Quantisation moves a vector by a cosine of a
/// few thousandths; ranking needs far less than the 0.995 asked here, and each vector must stay
/// nearer its own reference than any other text's.
#[test]
fn vectors_match_the_f32_reference_within_quantisation() {
    let encoder = encoder();
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/reference_vectors.json");
    let fixtures: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let texts: Vec<&str> = fixtures
        .iter()
        .map(|f| f["text"].as_str().unwrap())
        .collect();
    let references: Vec<Vec<f32>> = fixtures
        .iter()
        .map(|f| serde_json::from_value(f["vector"].clone()).unwrap())
        .collect();
    let batch = encoder.embed_batch(&texts);
    for (i, text) in texts.iter().enumerate() {
        let alone = encoder.embed(text);
        assert_eq!(alone.len(), DIMENSIONS);
        assert!((cosine(&alone, &alone) - 1.0).abs() < 1e-4, "unit length");
        assert_eq!(alone, batch[i], "{text}: the same alone as in a batch");
        let own = cosine(&alone, &references[i]);
        assert!(own > 0.995, "{text}: cosine {own} to its f32 reference");
        for (j, other) in references.iter().enumerate() {
            if j != i {
                assert!(
                    cosine(&alone, other) < own - 0.05,
                    "{text} is nearer text {j}"
                );
            }
        }
    }
}

/// The portable kernel (what a CPU without VNNI runs) gives the vectors the VNNI one does: the
/// integer sums are exact, so only the float steps around them may differ, by rounding.
#[test]
fn both_kernels_give_the_same_vectors() {
    let texts = [
        "take 9 away from 30",
        "get weather: Current conditions for a city. Parameters: city, units",
    ];
    let fast = encoder().embed_batch(&texts);
    let portable = encoder().without_vnni().embed_batch(&texts);
    for (a, b) in fast.iter().zip(&portable) {
        assert!(cosine(a, b) > 0.999_99, "{}", cosine(a, b));
    }
}

#[test]
fn meaning_without_shared_words_lands_close() {
    let encoder = encoder();
    let question = encoder.embed("take 9 away from 30");
    let subtract = encoder.embed("subtract: Subtract two numbers.");
    let weather = encoder.embed("get weather: Current conditions for a city.");
    assert!(
        cosine(&question, &subtract) > cosine(&question, &weather) + 0.1,
        "{} vs {}",
        cosine(&question, &subtract),
        cosine(&question, &weather)
    );
}

#[test]
fn a_query_split_over_two_threads_is_the_same_vector() {
    let encoder = encoder();
    // `embed` hands half of each layer's outputs to a second thread (from two tokens); a
    // batch of one runs them all on this one.
    for text in [
        "find me a vegan restaurant in Berlin that is open late on Sundays",
        "take 9 away from 30",
        "weather",
    ] {
        let split = encoder.embed_on_two_threads(text);
        let whole = encoder.embed_batch(&[text]).pop().unwrap();
        assert_eq!(split, whole, "{text}");
        assert_eq!(encoder.embed(text), whole, "{text}");
    }
}

/// Beside threads that keep every core busy, the second thread is preempted inside its
/// chunks, and this one does them itself and drops the late copies: still the same vector.
#[test]
fn a_query_split_beside_busy_cores_is_the_same_vector() {
    let encoder = encoder();
    let text = "find me a vegan restaurant in Berlin that is open late on Sundays";
    let whole = encoder.embed_batch(&[text]).pop().unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let busy: Vec<_> = (0..cores)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        })
        .collect();
    let vectors: Vec<Vec<f32>> = (0..30)
        .map(|_| encoder.embed_on_two_threads(text))
        .collect();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    busy.into_iter().for_each(|t| t.join().unwrap());
    for vector in vectors {
        assert_eq!(vector, whole);
    }
}

#[test]
fn sketches_are_unit_vectors_of_the_words_alone() {
    let encoder = encoder();
    let sketch = encoder.sketch("get_weather: Current conditions for a city.");
    assert_eq!(sketch.len(), DIMENSIONS);
    assert!((cosine(&sketch, &sketch) - 1.0).abs() < 1e-4);
    // Punctuation is not a word: the same words sketch the same.
    let spaced = encoder.sketch("get weather  Current conditions for a city");
    assert!(cosine(&sketch, &spaced) > 0.999);
    // A shared rare word counts for more than shared common ones.
    let forecast = encoder.sketch("weather forecast for the week");
    let filler = encoder.sketch("the list of the things for a city");
    assert!(
        cosine(&sketch, &forecast) > cosine(&sketch, &filler),
        "{} vs {}",
        cosine(&sketch, &forecast),
        cosine(&sketch, &filler)
    );
    // No words: no direction, and no NaN.
    assert!(encoder.sketch("...").iter().all(|v| *v == 0.0));
}

#[test]
fn a_missing_model_is_a_readable_error() {
    let error = SentenceEncoder::load(std::path::Path::new("/nonexistent/encoder")).unwrap_err();
    assert!(
        error.to_string().contains("/nonexistent/encoder/vocab.txt"),
        "{error}"
    );
}
