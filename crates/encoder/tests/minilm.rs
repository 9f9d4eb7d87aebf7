//! The encoder against the reference: token ids from Hugging Face's `tokenizers` and vectors
//! from the numpy forward pass in scripts/semantic_recall.py, for the same model files
//! (`tether model pull` fetches them; scripts/test.sh runs it).

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
fn tokens_and_vectors_match_the_reference_implementation() {
    let encoder = encoder();
    // (text, token ids from `tokenizers`, the first four dimensions from numpy)
    let cases: [(&str, &[u32], [f32; 4]); 3] = [
        (
            "take 9 away from 30",
            &[101, 2202, 1023, 2185, 2013, 2382, 102],
            [0.004_624_24, 0.050_495_54, -0.026_369_63, -0.027_780_54],
        ),
        (
            "Subtract two numbers: a - b (a minus b, the difference).",
            &[
                101, 4942, 6494, 6593, 2048, 3616, 1024, 1037, 1011, 1038, 1006, 1037, 15718, 1038,
                1010, 1996, 4489, 1007, 1012, 102,
            ],
            [-0.029_627_16, 0.123_413_4, -0.031_671_51, -0.064_498_59],
        ),
        (
            "Café résumé—naïve! 東京",
            &[101, 7668, 13746, 1517, 15743, 999, 1879, 1755, 102],
            [0.031_832_84, -0.010_320_53, 0.081_540_2, 0.003_276_8],
        ),
    ];
    for (text, ids, start) in cases {
        assert_eq!(encoder.tokenize(text), ids, "{text}");
        let vector = encoder.embed(text);
        assert_eq!(vector.len(), DIMENSIONS);
        assert!((cosine(&vector, &vector) - 1.0).abs() < 1e-4, "unit length");
        for (got, want) in vector.iter().zip(start) {
            assert!(
                (got - want).abs() < 1e-4,
                "{text}: {:?} vs {start:?}",
                &vector[..4]
            );
        }
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
fn a_missing_model_is_a_readable_error() {
    let error = SentenceEncoder::load(std::path::Path::new("/nonexistent/encoder")).unwrap_err();
    assert!(
        error.to_string().contains("/nonexistent/encoder/vocab.txt"),
        "{error}"
    );
}
