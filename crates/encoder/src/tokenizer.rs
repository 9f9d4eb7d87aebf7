//! BERT's uncased WordPiece tokenizer, as Hugging Face's `tokenizers` runs it for
//! all-MiniLM-L6-v2 (the ids are tested against it).

use std::collections::HashMap;

use unicode_normalization::UnicodeNormalization;

const CLS: u32 = 101;
const SEP: u32 = 102;
const UNK: u32 = 100;

/// The vocabulary and the greedy longest-match-first split.
pub(crate) struct WordPiece {
    vocabulary: HashMap<String, u32>,
}

impl WordPiece {
    /// The tokenizer over `vocab.txt`'s lines (a token per line, ids in line order).
    pub(crate) fn new(vocabulary_text: &str) -> WordPiece {
        WordPiece {
            vocabulary: vocabulary_text
                .lines()
                .enumerate()
                .map(|(id, token)| (token.to_string(), id as u32))
                .collect(),
        }
    }

    /// How many tokens the vocabulary has.
    pub(crate) fn len(&self) -> usize {
        self.vocabulary.len()
    }

    /// The tokens of `text` between `[CLS]` and `[SEP]`, at most `max` in all.
    pub(crate) fn tokenize(&self, text: &str, max: usize) -> Vec<u32> {
        let mut ids = vec![CLS];
        for word in basic_words(text) {
            self.word_pieces(&word, &mut ids);
            if ids.len() >= max - 1 {
                ids.truncate(max - 1);
                break;
            }
        }
        ids.push(SEP);
        ids
    }

    /// Greedy longest-match-first pieces of one word, `[UNK]` when it cannot be spelled.
    fn word_pieces(&self, word: &str, ids: &mut Vec<u32>) {
        if word.chars().count() > 100 {
            ids.push(UNK);
            return;
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        let mut candidate = String::new();
        while start < word.len() {
            let mut end = word.len();
            let mut found = None;
            while start < end {
                candidate.clear();
                if start > 0 {
                    candidate.push_str("##");
                }
                candidate.push_str(&word[start..end]);
                if let Some(&id) = self.vocabulary.get(&candidate) {
                    found = Some(id);
                    break;
                }
                end = word[..end]
                    .char_indices()
                    .next_back()
                    .map_or(start, |(at, _)| at);
            }
            match found {
                Some(id) => {
                    pieces.push(id);
                    start = end;
                }
                None => {
                    ids.push(UNK);
                    return;
                }
            }
        }
        ids.extend(pieces);
    }
}

/// BERT's basic tokenizer: control characters dropped, lower-cased, accents stripped, split
/// at white space and around each punctuation mark and CJK ideograph.
fn basic_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let flush = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    for c in text.nfd() {
        if c == '\0' || c == '\u{fffd}' || (c.is_control() && !c.is_whitespace()) {
            continue;
        }
        if is_mark(c) {
            continue;
        }
        if c.is_whitespace() {
            flush(&mut word, &mut words);
        } else if is_punctuation(c) || is_cjk(c) {
            flush(&mut word, &mut words);
            words.push(c.to_lowercase().collect());
        } else {
            word.extend(c.to_lowercase());
        }
    }
    flush(&mut word, &mut words);
    words
}

/// Combining marks, which NFD leaves after the letter they accent.
fn is_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// BERT counts every ASCII symbol as punctuation, and Unicode's punctuation blocks.
fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c as u32, 0x00A1..=0x00BF | 0x2010..=0x2027 | 0x2030..=0x205E | 0x3000..=0x303F | 0xFF01..=0xFF0F)
}

fn is_cjk(c: char) -> bool {
    matches!(c as u32, 0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0xF900..=0xFAFF)
}
