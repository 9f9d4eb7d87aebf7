//! A text value the model writes in a loop. Under a call's grammar the 135M model sometimes
//! fills a string with one sentence over and over ("It has a lot of features. It has a lot of
//! features. …") until its token limit, and the whole call is lost. A third copy of the same
//! stretch of text ends the string: the call is closed after the first copy, as it would have
//! been had the model stopped there, and goes through the same checks as any other.

/// The shortest stretch of text counted as a loop: shorter repeats ("ha ha ha", "1, 1, 1")
/// are what people write.
const MIN_PERIOD: usize = 8;
/// The longest: a loop of whole paragraphs is not caught before the token limit anyway.
const MAX_PERIOD: usize = 160;
/// Copies of the stretch that make a loop: two can be meant (a line written twice in a file),
/// three in a row in one value never were in the questions measured.
const COPIES: usize = 3;

/// Where a call's text stands: inside a string value and where that value's text starts, or
/// outside any string, with the brackets still open in both cases.
struct Open {
    /// Byte offset of the open string's first character, when the text ends inside one.
    string: Option<usize>,
    /// The closing brackets still owed, innermost last.
    closers: Vec<char>,
}

/// Reads `text` (a call's JSON so far) for what is still open.
fn open_at_end(text: &str) -> Open {
    let mut closers = Vec::new();
    let mut string = None;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if string.is_some() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => string = None,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => string = Some(at + 1),
            '{' => closers.push('}'),
            '[' => closers.push(']'),
            '}' | ']' => {
                closers.pop();
            }
            _ => {}
        }
    }
    Open { string, closers }
}

/// The period of the loop `value` ends in, when its last `COPIES` stretches of some length
/// are the same text.
fn loop_period(value: &[u8]) -> Option<usize> {
    (MIN_PERIOD..=MAX_PERIOD)
        .take_while(|period| period * COPIES <= value.len())
        .find(|&period| {
            let tail = &value[value.len() - period..];
            (2..=COPIES).all(|copy| {
                let end = value.len() - (copy - 1) * period;
                &value[end - period..end] == tail
            })
        })
        // "ha ha ha ha …" repeats every three characters: a short repeat however long.
        .filter(|&period| {
            let copies = &value[value.len() - COPIES * period..];
            !(1..MIN_PERIOD).any(|short| copies.iter().zip(&copies[short..]).all(|(a, b)| a == b))
        })
}

/// Whether `text`, a call being written, ends inside a string value that has started a loop.
pub(crate) fn ends_in_a_loop(text: &str) -> bool {
    open_at_end(text)
        .string
        .is_some_and(|start| loop_period(&text.as_bytes()[start..]).is_some())
}

/// `text`, a call that ends inside a looping string value, closed after the loop's first
/// copy: the string, then every bracket still open. `None` when the text does not end in a
/// loop or the closed text is no JSON.
pub(crate) fn closed_after_first_copy(text: &str) -> Option<String> {
    let open = open_at_end(text);
    let start = open.string?;
    let value = &text.as_bytes()[start..];
    let period = loop_period(value)?;
    // The loop began where the text started repeating itself with this period.
    let mut began = value.len() - period;
    while began > 0 && value[began - 1] == value[began - 1 + period] {
        began -= 1;
    }
    // One copy is kept, ending where a sentence or a line does when one does within it (the
    // copies start wherever the repeat was first seen, mid-word or not).
    let first = began + period;
    let ends_sentence =
        |at: usize| matches!(value[at - 1], b'.' | b'!' | b'?') || value[at - 2..at] == *b"\\n";
    let mut keep = start
        + (first..first + period)
            .find(|&at| ends_sentence(at))
            .unwrap_or(first);
    while !text.is_char_boundary(keep) {
        keep -= 1;
    }
    let mut closed = text[..keep].trim_end().to_string();
    // A cut after a lone backslash would escape the closing quote.
    if closed.ends_with('\\') && !closed.ends_with("\\\\") {
        closed.pop();
    }
    closed.push('"');
    closed.extend(open.closers.iter().rev());
    serde_json::from_str::<serde_json::Value>(&closed[closed.find('{')?..]).ok()?;
    Some(closed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOOPING: &str = r#"{"tool": "memory__add_observations", "arguments": {"observations": [{"entityName": "Carol", "contents": ["The new car is a luxury car. It has a lot of features. It has a lot of features. It has a lot of features. It has a lot"#;

    #[test]
    fn a_value_repeating_a_sentence_is_closed_after_its_first_copy() {
        assert!(ends_in_a_loop(LOOPING));
        assert_eq!(
            closed_after_first_copy(LOOPING).unwrap(),
            r#"{"tool": "memory__add_observations", "arguments": {"observations": [{"entityName": "Carol", "contents": ["The new car is a luxury car. It has a lot of features."]}]}}"#
        );
    }

    #[test]
    fn repeats_people_write_are_no_loop() {
        for text in [
            r#"{"tool": "echo", "arguments": {"message": "ha ha ha ha ha ha ha ha ha ha ha ha ha ha"#,
            r#"{"tool": "write", "arguments": {"content": "hello world\nhello world\n"#,
            r#"{"tool": "add", "arguments": {"numbers": [1, 1, 1, 1, 1, 1, 1, 1, 1"#,
            // Outside a string the grammar bounds what repeats.
            r#"{"tool": "x", "arguments": {"a": "It has a lot of features.", "b": "It has a lot of features.", "c": "It has a lot of features.""#,
        ] {
            assert!(!ends_in_a_loop(text), "{text}");
            assert_eq!(closed_after_first_copy(text), None, "{text}");
        }
    }

    #[test]
    fn a_loop_of_escaped_text_closes_on_a_whole_character() {
        let text = r#"{"tool": "w", "arguments": {"lines": ["é line\n", "x é line\né line\né line\né line\n"#;
        let closed = closed_after_first_copy(text).unwrap();
        assert_eq!(
            closed,
            r#"{"tool": "w", "arguments": {"lines": ["é line\n", "x é line\n"]}}"#
        );
        serde_json::from_str::<serde_json::Value>(&closed).unwrap();
    }
}
