//! Guards on what reaches the person as the embedded model's answer: never a second tool
//! call given as the answer, never our own prompt recited, never a number the result did not
//! give, never the same sentence over and over, and a sentence from the last tool result
//! when the model will not answer; and the first call found in generated text.

use serde_json::Value;
use tether_protocol::chat::Message;

/// The instruction the template puts after a tool result (template.rs), which a small model
/// sometimes recites as part of its answer.
const OUR_INSTRUCTION: &[&str] = &["you can use this to answer", "use this to answer"];

/// Keeps our own prompt text out of a streamed answer: text that may be the start of one of
/// `OUR_INSTRUCTION`'s phrasings is held back until it is clearly not, and the answer ends
/// where the recital begins.
#[derive(Debug, Default)]
pub(crate) struct EchoGuard {
    held: String,
}

impl EchoGuard {
    /// The part of `piece` (with what was held) that can be shown, and whether the model has
    /// begun reciting the instruction (the answer ends there).
    pub(crate) fn push(&mut self, piece: &str) -> (String, bool) {
        self.held.push_str(piece);
        let lower = self.held.to_ascii_lowercase();
        if let Some(at) = OUR_INSTRUCTION.iter().filter_map(|p| lower.find(p)).min() {
            let shown = self.held[..at].trim_end().to_string();
            self.held.clear();
            return (shown, true);
        }
        // Hold the longest tail that could still grow into the instruction.
        let longest = OUR_INSTRUCTION.iter().map(|p| p.len()).max().unwrap_or(0);
        let keep = (1..=lower.len().min(longest))
            .rev()
            .find(|&n| {
                lower.is_char_boundary(lower.len() - n)
                    && OUR_INSTRUCTION
                        .iter()
                        .any(|p| p.starts_with(&lower[lower.len() - n..]))
            })
            .unwrap_or(0);
        // The space before it goes with it: an answer that ends there ends without it.
        let keep = if keep > 0 {
            let before = &self.held[..self.held.len() - keep];
            keep + (before.len() - before.trim_end().len())
        } else {
            0
        };
        let shown = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        (shown, false)
    }

    /// What is still held when the answer ends.
    pub(crate) fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

/// Whether an answer being written after a tool result should stop here: it turned into a
/// call, began reciting our instruction, or repeats a sentence it already wrote.
pub(crate) fn answer_ends(text: &str) -> bool {
    text.trim_start().starts_with(['{', '[', '`'])
        || echo_at(text).is_some()
        || first_repeat(text).is_some()
}

/// A result this short is reported whole: an answer that leaves out one of its numbers
/// reports something else.
const SHORT_RESULT: usize = 60;

/// Whether `result` is short enough to be reported whole (`SHORT_RESULT`), and not empty.
pub(crate) fn is_short_result(result: &str) -> bool {
    let length = result.trim().chars().count();
    length > 0 && length <= SHORT_RESULT
}

/// The answer a person gets, from all the model wrote after a tool result: cut where it
/// recites our instruction or starts repeating itself; the result's own sentence
/// (`fallback`) instead when it is empty, a call, gives a number that neither the result nor
/// the question holds (`known`), or leaves out a number of a short `result` (the 135M model
/// reports `add`'s 4 for "add 2 and 2" as "returned: 2").
///
/// When the question writes out names (a file, `shopping.md`) that some of the result's lines
/// hold, an answer must name one of them too, and the result's sentence keeps to those lines.
pub(crate) fn settle_answer(
    text: &str,
    fallback: &str,
    known: &str,
    result: &str,
    named: &[String],
) -> String {
    let held = named_in(named, result);
    let fallback = &narrowed_to_named(fallback, result, &held);
    if text.trim_start().starts_with(['{', '[', '`']) {
        return fallback.to_string();
    }
    let mut end = text.len();
    if let Some(at) = echo_at(text) {
        end = end.min(at);
    }
    if let Some(at) = first_repeat(text) {
        end = end.min(at);
    }
    let answer = text[..end].trim();
    let given = numbers_in(answer);
    let left_out = is_short_result(result) && numbers_in(result).iter().any(|n| !given.contains(n));
    let from_nowhere = given.iter().any(|n| !numbers_in(known).contains(n));
    if answer.is_empty()
        || left_out
        || from_nowhere
        || recites_part_of(answer, fallback, result)
        || strays_from(answer, &format!("{known} {fallback}"))
        || leaves_out_the_named(answer, &held)
    {
        return fallback.to_string();
    }
    answer.to_string()
}

/// The names of `named` that `result` holds (compared without case).
fn named_in<'a>(named: &'a [String], result: &str) -> Vec<&'a String> {
    let result = result.to_lowercase();
    named
        .iter()
        .filter(|n| result.contains(&n.to_lowercase()))
        .collect()
}

/// Whether `answer` names none of `held`, the names the question wrote that the result holds:
/// asked "How big is shopping.md?" and given the sizes of the whole folder, the 135M model
/// answered with the folder's total.
fn leaves_out_the_named(answer: &str, held: &[&String]) -> bool {
    let answer = answer.to_lowercase();
    !held.is_empty() && !held.iter().any(|n| answer.contains(&n.to_lowercase()))
}

/// The result's sentence (`fallback`, "The list_directory_with_sizes tool returned: …") kept
/// to the lines of `result` that hold one of `held` (names the question wrote), when those are
/// some of its lines but not all; otherwise `fallback` as it is.
fn narrowed_to_named(fallback: &str, result: &str, held: &[&String]) -> String {
    let lines: Vec<&str> = result.lines().filter(|l| !l.trim().is_empty()).collect();
    let naming: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|line| {
            let line = line.to_lowercase();
            held.iter().any(|n| line.contains(&n.to_lowercase()))
        })
        .collect();
    match fallback.find(':') {
        Some(head) if !naming.is_empty() && naming.len() < lines.len() => {
            let naming: Vec<&str> = naming.iter().map(|l| l.trim()).collect();
            format!("{} {}", &fallback[..=head], naming.join("\n"))
        }
        _ => fallback.to_string(),
    }
}

/// Whether `answer` recites the result's sentence (`fallback`) and gets it wrong: it opens
/// with the sentence's own words ("The list_directory tool returned:") and then differs from
/// the result, leaving lines out or changing them. The 135M model answered a directory of
/// eight entries with "returned: [DIR]" and one file, and another with "[FILE] docs" for
/// "[DIR] docs". A recitation is never better than the sentence itself.
fn recites_part_of(answer: &str, fallback: &str, result: &str) -> bool {
    let Some(head_end) = fallback.find(':') else {
        return false;
    };
    let Some(given) = answer.strip_prefix(&fallback[..=head_end]) else {
        return false;
    };
    // The whole result, not the sentence's first 300 characters: a long one recited right
    // stays whole.
    given.trim().trim_end_matches('.') != result.trim().trim_end_matches('.')
}

/// Words an answer may frame a result with though neither the question nor the result holds
/// them (four letters or more; shorter words are never judged).
const FRAMING: &[&str] = &[
    "answer",
    "result",
    "returned",
    "returns",
    "return",
    "tool",
    "called",
    "gives",
    "shows",
    "says",
    "here",
    "there",
    "that",
    "this",
    "with",
    "from",
    "your",
    "have",
    "been",
    "were",
    "will",
    "would",
    "about",
    "which",
    "what",
    "when",
    "where",
    "their",
    "they",
    "them",
    "also",
    "into",
    "only",
    "some",
    "than",
    "then",
    "these",
    "those",
    "each",
    "both",
    "more",
    "most",
    "very",
    "just",
    "like",
    "does",
    "found",
    "following",
    "below",
    "above",
    "plus",
    "minus",
    "times",
    "divided",
    "equals",
    "total",
    "makes",
];

/// Whether `answer` uses a word of four letters or more that neither `known` (the question,
/// the results, the tool's name) holds nor `FRAMING` allows, compared by their first five
/// letters: after `divide` returned 25 the 135M model answered "The current time is 25.".
fn strays_from(answer: &str, known: &str) -> bool {
    let stem = |w: &str| w.chars().take(5).collect::<String>();
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphabetic())
            .filter(|w| w.chars().count() >= 4)
            .map(str::to_lowercase)
            .collect()
    };
    let known: std::collections::HashSet<String> = words(known).iter().map(|w| stem(w)).collect();
    words(answer)
        .iter()
        .any(|w| !FRAMING.contains(&w.as_str()) && !known.contains(&stem(w)))
}

/// Where `text` begins one of our instruction's phrasings.
fn echo_at(text: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    OUR_INSTRUCTION.iter().filter_map(|p| lower.find(p)).min()
}

/// Where `text` starts a sentence or line it already wrote (of 12 characters or more, so
/// "Yes. Yes." is not cut).
fn first_repeat(text: &str) -> Option<usize> {
    let mut seen: Vec<&str> = Vec::new();
    let mut start = 0;
    for (at, c) in text.char_indices() {
        if matches!(c, '.' | '!' | '?' | '\n') {
            let sentence = text[start..at].trim();
            if sentence.len() >= 12 {
                if seen.contains(&sentence) {
                    return Some(start);
                }
                seen.push(sentence);
            }
            start = at + c.len_utf8();
        }
    }
    None
}

/// The numbers in `text` as digit runs, leading zeros dropped ("08" is "8").
fn numbers_in(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|run| !run.is_empty())
        .map(|run| {
            let trimmed = run.trim_start_matches('0');
            if trimmed.is_empty() { "0" } else { trimmed }.to_string()
        })
        .collect()
}

/// The text of the last tool result, when the conversation ends with one.
pub(crate) fn last_result(messages: &[Message]) -> &str {
    match messages.last() {
        Some(Message::Tool { content, .. }) => content,
        _ => "",
    }
}

/// "The add tool returned: 30." for the last tool result, answering when the model will not.
pub(crate) fn last_result_sentence(messages: &[Message]) -> Option<String> {
    let Some(Message::Tool { name, content, .. }) = messages.last() else {
        return None;
    };
    let short = name.split("__").last().unwrap_or(name);
    let mut content = content.trim().to_string();
    if content.chars().count() > 300 {
        content = content.chars().take(300).collect::<String>() + "…";
    }
    Some(format!("The {short} tool returned: {content}"))
}

pub(crate) fn find_call(text: &str) -> Option<(String, String)> {
    let start = text.find('{')?;
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    let value = stream.next()?.ok()?;
    let tool = value
        .get("tool")
        .or_else(|| value.get("name"))?
        .as_str()?
        .to_string();
    let arguments = value
        .get("arguments")
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    Some((tool, arguments.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn our_instruction_never_reaches_the_answer() {
        let mut guard = EchoGuard::default();
        let mut shown = String::new();
        let mut echoed = false;
        for piece in [
            "The sum is 30",
            ". Use",
            " this to",
            " answer my question",
            " in a short",
        ] {
            let (text, stop) = guard.push(piece);
            shown.push_str(&text);
            if stop {
                echoed = true;
                break;
            }
        }
        assert!(echoed);
        assert_eq!(shown, "The sum is 30.");
        let mut guard = EchoGuard::default();
        let (first, _) = guard.push("It is 4. You can");
        let (second, stop) = guard.push(" use this to answer your question.");
        assert_eq!(
            (first.as_str(), second.as_str(), stop),
            ("It is 4.", "", true)
        );
        // A word that only starts like it is shown once it is clearly something else.
        let mut guard = EchoGuard::default();
        let (first, stop) = guard.push("30. Use");
        assert_eq!((first.as_str(), stop), ("30.", false));
        let (second, stop) = guard.push("ful to know.");
        assert_eq!((second.as_str(), stop), (" Useful to know.", false));
        assert_eq!(guard.finish(), "");
        let mut guard = EchoGuard::default();
        assert_eq!(guard.push("It is 30. U").0, "It is 30.");
        assert_eq!(guard.finish(), " U");
    }

    #[test]
    fn an_answer_keeps_to_the_numbers_it_was_given() {
        let fallback = "The add tool returned: 4";
        let known = "Can you add 2 and 2 for me? 4";
        let settle = |text: &str| settle_answer(text, fallback, known, "4", &[]);
        assert_eq!(settle("2 plus 2 is 4."), "2 plus 2 is 4.");
        assert_eq!(settle("It is 4 and 5."), fallback, "a number from nowhere");
        assert_eq!(
            settle("The add tool returned: 2"),
            fallback,
            "the result left out"
        );
        assert_eq!(settle("  "), fallback);
        assert_eq!(settle("{\"tool\": \"x\""), fallback);
        assert_eq!(
            settle("It is 4. Use this to answer my question."),
            "It is 4."
        );
        assert_eq!(settle("It is 04."), "It is 04.");
        assert_eq!(
            settle("The current time is 4."),
            fallback,
            "words from neither the question nor the result"
        );
        // A long result need not be reported whole.
        let long = format!("{} 7", "word ".repeat(20));
        let known = format!("{known} {long}");
        assert_eq!(
            settle_answer("It is 4.", fallback, &known, &long, &[]),
            "It is 4."
        );
    }

    #[test]
    fn an_answer_that_recites_part_of_a_result_gives_way_to_all_of_it() {
        let result = "[DIR] docs\n[FILE] draft.txt\n[FILE] notes.txt";
        let fallback = format!("The list_directory tool returned: {result}");
        for cut in [
            "The list_directory tool returned: [DIR]\n[FILE] draft.txt",
            "The list_directory tool returned: [DIR] docs",
            "The list_directory tool returned: [FILE] docs",
        ] {
            assert_eq!(
                settle_answer(cut, &fallback, result, result, &[]),
                fallback,
                "{cut}"
            );
        }
        // The whole result, with or without a full stop, or words of the model's own, stay.
        assert_eq!(
            settle_answer(&fallback, &fallback, result, result, &[]),
            fallback
        );
        let short = "The multiply tool returned: 72";
        assert!(!recites_part_of(
            "The multiply tool returned: 72.",
            short,
            "72"
        ));
        assert!(!recites_part_of("The answer is 72.", short, "72"));
    }

    #[test]
    fn an_answer_stops_where_it_repeats_itself() {
        let text = "The server is ready to use.\n\nThe server is ready to use.\n\nThe";
        assert!(answer_ends(text));
        assert_eq!(
            settle_answer(text, "f", "Is the server ready to use?", "", &[]),
            "The server is ready to use."
        );
        assert!(!answer_ends("Yes. Yes. It is 4."));
        assert!(answer_ends("  {\"tool\""));
        assert!(!answer_ends("It is 4"));
    }

    #[test]
    fn first_call_is_found_in_text() {
        assert_eq!(
            find_call("{\"tool\": \"b__add\", \"arguments\": {\"a\": 1}} trailing"),
            Some(("b__add".into(), "{\"a\":1}".into()))
        );
        assert_eq!(find_call("no call here"), None);
    }

    #[test]
    fn the_fallback_answer_reports_the_last_result() {
        let messages = vec![Message::Tool {
            tool_call_id: "c1".into(),
            name: "builtin__add".into(),
            content: "30".into(),
            images: Vec::new(),
            is_error: false,
        }];
        assert_eq!(
            last_result_sentence(&messages).as_deref(),
            Some("The add tool returned: 30")
        );
        assert_eq!(last_result_sentence(&[]), None);
    }

    #[test]
    fn an_answer_keeps_to_the_file_the_question_names() {
        let result = "[DIR] docs\n[FILE] notes.txt    26 B\n[FILE] shopping.md    18 B\n\nTotal: 2 files, 44 B";
        let fallback = format!("The list_directory_with_sizes tool returned: {result}");
        let named = vec!["shopping.md".to_string()];
        let known = format!("How big is shopping.md? {result}");
        let settle = |text: &str| settle_answer(text, &fallback, &known, result, &named);
        // The folder's total, not the file's size: the file's own line instead.
        assert_eq!(
            settle("The total is 44 B."),
            "The list_directory_with_sizes tool returned: [FILE] shopping.md    18 B"
        );
        assert_eq!(settle("shopping.md is 18 B."), "shopping.md is 18 B.");
        // A result that does not hold the name, or holds it on every line, is left whole.
        assert_eq!(
            narrowed_to_named(
                "The read_file tool returned: Milk.",
                "Milk.",
                &named_in(&named, "Milk.")
            ),
            "The read_file tool returned: Milk."
        );
        assert_eq!(
            settle_answer(
                "Milk, eggs.",
                "f",
                "what is in shopping.md? Milk, eggs.",
                "Milk, eggs.",
                &named
            ),
            "Milk, eggs."
        );
    }
}
