//! Guards on what reaches the person as the embedded model's answer: never a second tool
//! call given as the answer, never our own prompt recited, and a sentence from the last tool
//! result when the model will not answer; and the first call found in generated text.

use serde_json::Value;
use tether_protocol::chat::Message;

/// The instruction the template puts after a tool result (template.rs), which a small model
/// sometimes recites as part of its answer.
const OUR_INSTRUCTION: &[&str] = &["you can use this to answer", "use this to answer"];

/// Holds the start of an answer given after a tool result until it shows it is not another
/// tool call: a small model that has just seen a result sometimes starts a second
/// `{"tool": …` call, which must never reach the user as the answer, cut off or not.
#[derive(Debug, Default)]
pub(crate) struct CallGuard {
    held: String,
}

/// What [`CallGuard::push`] decided.
#[derive(Debug, PartialEq)]
pub(crate) enum Held {
    /// Too little to tell yet.
    Wait,
    /// An answer: this much (with what was held) can be shown.
    Release(String),
    /// A call in disguise: drop it and answer from the result instead.
    Call,
}

impl CallGuard {
    pub(crate) fn push(&mut self, piece: &str) -> Held {
        self.held.push_str(piece);
        let start = self.held.trim_start();
        if start.starts_with(['{', '[', '`']) {
            return Held::Call;
        }
        if start.chars().count() < 2 {
            return Held::Wait;
        }
        Held::Release(std::mem::take(&mut self.held))
    }

    /// What is still held when generation ends.
    pub(crate) fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

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
    fn a_second_call_never_becomes_the_answer() {
        let mut guard = CallGuard::default();
        assert_eq!(guard.push(" "), Held::Wait);
        assert_eq!(guard.push("{\"to"), Held::Call, "cut off after a few bytes");
        let mut guard = CallGuard::default();
        assert_eq!(guard.push("```"), Held::Call, "a fenced call");
        let mut guard = CallGuard::default();
        assert_eq!(guard.push("I"), Held::Wait);
        assert_eq!(guard.push("t is 30."), Held::Release("It is 30.".into()));
        let mut guard = CallGuard::default();
        assert_eq!(guard.push("3"), Held::Wait);
        assert_eq!(guard.finish(), "3", "a one-character answer is still given");
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
}
