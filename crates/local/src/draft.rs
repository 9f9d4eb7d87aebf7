//! Drafts for a grammar-constrained tool call: the text the call grammar leaves the model no
//! choice about (`{"tool": "`, the rest of the only tool name that fits, `", "arguments":
//! {"a": `) and the text that most likely follows a finished value (`, "b": `, `}}`).
//! Decoding checks a draft's tokens in one batch and keeps those the model would have chosen
//! itself, so a draft changes how fast a call is made, never which call: about half of a
//! call's tokens are such text, and a batch of them costs a fraction of evaluating each alone.

use serde_json::Value;
use tether_protocol::chat::ToolDefinition;

use crate::grammar::CALL_OPENER;

/// One piece of a call's text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// Text the grammar fixes.
    Fixed(String),
    /// A value the model writes.
    Value,
    /// One of these values (JSON), as an `enum` allows.
    Choice(Vec<String>),
}

/// The pieces of a call to `tool` after the opener (`"name", "arguments": {…}}`), as
/// [`tool_call_grammar`](crate::grammar::tool_call_grammar) spells them.
fn call_pieces(tool: &ToolDefinition) -> Vec<Piece> {
    let mut pieces = vec![Piece::Fixed(format!(
        "{}, \"arguments\": ",
        serde_json::to_string(&tool.name).unwrap_or_default()
    ))];
    arguments_pieces(&tool.parameters, &mut pieces);
    pieces.push(Piece::Fixed("}".into()));
    merged(pieces)
}

/// The pieces of an arguments object: required properties in schema order.
fn arguments_pieces(schema: &Value, pieces: &mut Vec<Piece>) {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties: Vec<(&String, &Value)> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| {
            p.iter()
                .filter(|(name, _)| required.contains(&name.as_str()))
                .collect()
        })
        .unwrap_or_default();
    if schema.get("properties").is_none() && schema.get("oneOf").or(schema.get("anyOf")).is_some() {
        // Alternatives: the model chooses among them.
        pieces.push(Piece::Value);
        return;
    }
    if properties.is_empty() {
        pieces.push(Piece::Fixed("{}".into()));
        return;
    }
    pieces.push(Piece::Fixed("{".into()));
    for (index, (name, property)) in properties.into_iter().enumerate() {
        let separator = if index == 0 { "" } else { ", " };
        pieces.push(Piece::Fixed(format!(
            "{separator}{}: ",
            serde_json::to_string(name).unwrap_or_default()
        )));
        let options = property
            .get("enum")
            .and_then(Value::as_array)
            .filter(|options| !options.is_empty());
        match (property.get("const"), options) {
            (Some(value), _) => pieces.push(Piece::Fixed(value.to_string())),
            (None, Some(options)) => {
                pieces.push(Piece::Choice(
                    options.iter().map(Value::to_string).collect(),
                ));
            }
            (None, None) => pieces.push(Piece::Value),
        }
    }
    pieces.push(Piece::Fixed("}".into()));
}

/// Adjacent fixed pieces as one.
fn merged(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for piece in pieces {
        match (out.last_mut(), piece) {
            (Some(Piece::Fixed(last)), Piece::Fixed(next)) => last.push_str(&next),
            (_, piece) => out.push(piece),
        }
    }
    out
}

/// The most characters one draft runs to: past a tool's name and its first argument's key, the
/// guessed values and the keys between them, and no further, as every character of a wrong
/// guess is evaluated for nothing.
const MAX_DRAFT_CHARS: usize = 160;

/// What probably comes next in a call among `tools` whose text so far is `text`, as far as it
/// can be told: the text the grammar fixes, and at a value from a list (`enum`), the first option
/// the call has not used yet (the list holds the message's own values in the order it writes
/// them, as the narrowing modules leave it), with the text after it, and so on. Empty when the
/// model has a real choice to make.
pub fn next_text(tools: &[ToolDefinition], text: &str) -> String {
    let calls: Vec<Vec<Piece>> = tools.iter().map(call_pieces).collect();
    let mut drafted = String::new();
    loop {
        let (step, more) = next_step(&calls, &format!("{text}{drafted}"));
        // The first stretch is drafted whatever its length, as before there were guesses.
        let too_long = !drafted.is_empty() && drafted.len() + step.len() > MAX_DRAFT_CHARS;
        if step.is_empty() || too_long {
            return drafted;
        }
        drafted.push_str(&step);
        if !more {
            return drafted;
        }
    }
}

/// One stretch of [`next_text`], up to the next place the model chooses, and whether drafting
/// may go on past it: not after a number that may have more digits, whose draft is only the
/// next text's first character, a cheap guess to lose.
fn next_step(calls: &[Vec<Piece>], text: &str) -> (String, bool) {
    let opener = format!("{CALL_OPENER}\"");
    if let Some(rest) = opener.strip_prefix(text) {
        // Before or in the opener: it, and then whatever the tool names share.
        let (after, more) = after_opener(calls, "\"");
        return (format!("{rest}{after}"), more);
    }
    match text.strip_prefix(CALL_OPENER) {
        Some(rest) => after_opener(calls, rest),
        None => (String::new(), false),
    }
}

/// The draft after the opener among the `calls` (each tool's pieces), `written` being what
/// follows it (`"add", "arg…`).
fn after_opener(calls: &[Vec<Piece>], written: &str) -> (String, bool) {
    // The tools whose fixed start agrees with what was written.
    let fitting: Vec<&Vec<Piece>> = calls
        .iter()
        .filter(|pieces| match pieces.first() {
            Some(Piece::Fixed(start)) => {
                start.starts_with(written) || written.starts_with(start.as_str())
            }
            _ => false,
        })
        .collect();
    match fitting.as_slice() {
        [] => (String::new(), false),
        [only] => continue_pieces(only, written),
        several => {
            // The names' shared continuation is forced; past it the model chooses.
            let starts: Vec<&str> = several
                .iter()
                .filter_map(|pieces| match pieces.first() {
                    Some(Piece::Fixed(start)) => start.get(written.len()..),
                    _ => None,
                })
                .collect();
            (shared_prefix(&starts).to_string(), false)
        }
    }
}

/// The longest text every one of `texts` starts with.
fn shared_prefix<'a>(texts: &[&'a str]) -> &'a str {
    let Some(first) = texts.first() else {
        return "";
    };
    let mut end = first.len();
    for text in &texts[1..] {
        end = end.min(
            first
                .char_indices()
                .zip(text.chars())
                .take_while(|((_, a), b)| a == b)
                .last()
                .map_or(0, |((at, a), _)| at + a.len_utf8()),
        );
    }
    &first[..end]
}

/// The draft for a call made of `pieces`, `written` of it written so far, and whether drafting
/// may go on past it ([`next_step`]).
fn continue_pieces(pieces: &[Piece], written: &str) -> (String, bool) {
    let mut rest = written;
    let mut pieces = pieces.iter().peekable();
    while let Some(piece) = pieces.next() {
        match piece {
            Piece::Fixed(fixed) => {
                if let Some(after) = rest.strip_prefix(fixed.as_str()) {
                    rest = after;
                } else if let Some(left) = fixed.strip_prefix(rest) {
                    return (left.to_string(), true);
                } else {
                    return (String::new(), false);
                }
            }
            Piece::Value => match value_end(rest) {
                // The value is written and more follows: go on matching.
                Some((end, _)) if end < rest.len() => rest = &rest[end..],
                // It is finished: the next fixed text. A number may go on, so only the next
                // text's first character, a cheap guess to lose.
                Some((_, finished)) => {
                    return match pieces.peek() {
                        Some(Piece::Fixed(next)) if finished => (next.clone(), true),
                        Some(Piece::Fixed(next)) => (next.chars().take(1).collect(), false),
                        _ => (String::new(), false),
                    };
                }
                None => return (String::new(), false),
            },
            Piece::Choice(options) => {
                if let Some(option) = options
                    .iter()
                    .filter(|o| rest.len() > o.len() && rest.starts_with(o.as_str()))
                    .max_by_key(|o| o.len())
                {
                    rest = &rest[option.len()..];
                    continue;
                }
                // The options this value can still become. One: its end and the fixed text
                // after it. Several: the first the call has not used yet, a guess the model
                // confirms or not; with all of them used, only what they share.
                let open: Vec<&String> = options.iter().filter(|o| o.starts_with(rest)).collect();
                let chosen = match open.as_slice() {
                    [] => return (String::new(), false),
                    [only] => Some(*only),
                    several => several.iter().copied().find(|o| !used(written, o)),
                };
                let Some(chosen) = chosen else {
                    let rests: Vec<&str> = open.iter().map(|o| &o[rest.len()..]).collect();
                    return (shared_prefix(&rests).to_string(), false);
                };
                let left = &chosen[rest.len()..];
                return match pieces.peek() {
                    Some(Piece::Fixed(next)) => (format!("{left}{next}"), true),
                    _ => (left.to_string(), true),
                };
            }
        }
    }
    (String::new(), false)
}

/// Whether the call text `written` gives `value` (JSON) as some argument already.
fn used(written: &str, value: &str) -> bool {
    written.match_indices(value).any(|(at, _)| {
        written[..at].ends_with(": ")
            && matches!(written[at + value.len()..].chars().next(), Some(',' | '}'))
    })
}

/// Where the JSON value at the start of `text` can end, and whether it surely does there: after
/// a closed string, array or object or a literal (surely), or the digits of a number so far
/// (perhaps); `None` while it cannot end yet.
fn value_end(text: &str) -> Option<(usize, bool)> {
    let bytes = text.as_bytes();
    match bytes.first()? {
        b'"' | b'[' | b'{' => {
            let mut depth = 0usize;
            let mut in_string = false;
            let mut escaped = false;
            for (at, &byte) in bytes.iter().enumerate() {
                if in_string {
                    match byte {
                        _ if escaped => escaped = false,
                        b'\\' => escaped = true,
                        b'"' => {
                            in_string = false;
                            if depth == 0 {
                                return Some((at + 1, true));
                            }
                        }
                        _ => {}
                    }
                    continue;
                }
                match byte {
                    b'"' => in_string = true,
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return Some((at + 1, true));
                        }
                    }
                    _ => {}
                }
            }
            None
        }
        b'-' | b'0'..=b'9' => {
            let end = bytes
                .iter()
                .position(|b| {
                    !(b.is_ascii_digit() || matches!(b, b'-' | b'.' | b'e' | b'E' | b'+'))
                })
                .unwrap_or(bytes.len());
            bytes[end - 1].is_ascii_digit().then_some((end, false))
        }
        _ => ["true", "false", "null"]
            .iter()
            .find(|word| text.starts_with(*word))
            .map(|word| (word.len(), true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, parameters: Value) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: String::new(),
            parameters,
        }
    }

    fn add() -> ToolDefinition {
        tool(
            "builtin__add",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        )
    }

    #[test]
    fn one_tool_drafts_everything_but_the_values() {
        let tools = [add()];
        assert_eq!(
            next_text(&tools, ""),
            "{\"tool\": \"builtin__add\", \"arguments\": {\"a\": "
        );
        assert_eq!(
            next_text(&tools, "{\"tool\": \"built"),
            "in__add\", \"arguments\": {\"a\": "
        );
        assert_eq!(
            next_text(
                &tools,
                "{\"tool\": \"builtin__add\", \"arguments\": {\"a\": 1"
            ),
            ","
        );
        assert_eq!(
            next_text(
                &tools,
                "{\"tool\": \"builtin__add\", \"arguments\": {\"a\": 10,"
            ),
            " \"b\": "
        );
        assert_eq!(
            next_text(
                &tools,
                "{\"tool\": \"builtin__add\", \"arguments\": {\"a\": 10, \"b\": 2.5"
            ),
            "}"
        );
        assert_eq!(
            next_text(
                &tools,
                "{\"tool\": \"builtin__add\", \"arguments\": {\"a\": 10, \"b\": 2."
            ),
            ""
        );
    }

    #[test]
    fn several_tools_draft_only_what_their_names_share() {
        let tools = [
            tool(
                "time__get_current_time",
                json!({"type": "object", "properties": {"timezone": {"type": "string"}}, "required": ["timezone"]}),
            ),
            tool("time__convert_time", json!({})),
        ];
        assert_eq!(next_text(&tools, ""), "{\"tool\": \"time__");
        assert_eq!(next_text(&tools, "{\"tool\": \"time__"), "");
        assert_eq!(
            next_text(&tools, "{\"tool\": \"time__g"),
            "et_current_time\", \"arguments\": {\"timezone\": "
        );
        // Inside a string the model writes; after it, the close.
        assert_eq!(
            next_text(
                &tools,
                "{\"tool\": \"time__get_current_time\", \"arguments\": {\"timezone\": \"Asia/To"
            ),
            ""
        );
        assert_eq!(
            next_text(
                &tools,
                "{\"tool\": \"time__get_current_time\", \"arguments\": {\"timezone\": \"Asia/Tokyo\""
            ),
            "}}"
        );
        assert_eq!(
            next_text(&tools, "{\"tool\": \"time__convert_time\", \"arg"),
            "uments\": {}}"
        );
    }

    #[test]
    fn values_from_a_short_list_are_guessed_in_order_and_each_once() {
        let tools = [tool(
            "builtin__add",
            json!({"type": "object", "properties": {"a": {"type": "number", "enum": [10, 20]}, "b": {"type": "number", "enum": [10, 20]}}, "required": ["a", "b"]}),
        )];
        let start = "{\"tool\": \"builtin__add\", \"arguments\": {\"a\": ";
        // The whole call: the first option, then the first one not used yet.
        assert_eq!(next_text(&tools, ""), format!("{start}10, \"b\": 20}}}}"));
        assert_eq!(next_text(&tools, start), "10, \"b\": 20}}");
        assert_eq!(next_text(&tools, &format!("{start}1")), "0, \"b\": 20}}");
        // The model chose otherwise: the guesses follow its choice.
        assert_eq!(next_text(&tools, &format!("{start}2")), "0, \"b\": 10}}");
        assert_eq!(next_text(&tools, &format!("{start}20, \"b\": ")), "10}}");
        assert_eq!(next_text(&tools, &format!("{start}10, \"b\": 2")), "0}}");
        assert_eq!(next_text(&tools, &format!("{start}10, \"b\": 10")), "}}");
        let zones = [tool(
            "time__now",
            json!({"type": "object", "properties": {"zone": {"enum": ["Asia/Tokyo", "Asia/Taipei"]}}, "required": ["zone"]}),
        )];
        let start = "{\"tool\": \"time__now\", \"arguments\": {\"zone\": ";
        assert_eq!(next_text(&zones, start), "\"Asia/Tokyo\"}}");
        assert_eq!(next_text(&zones, &format!("{start}\"Asia/Ta")), "ipei\"}}");
    }

    #[test]
    fn a_long_first_stretch_is_drafted_whole() {
        let name = format!("server__{}", "very_long_name_".repeat(12));
        let tools = [tool(
            &name,
            json!({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}),
        )];
        let draft = next_text(&tools, "");
        assert!(draft.len() > MAX_DRAFT_CHARS, "{draft}");
        assert!(draft.ends_with("{\"a\": "), "{draft}");
    }

    #[test]
    fn a_guess_stops_at_the_draft_limit() {
        let options: Vec<String> = (0..40)
            .map(|i| format!("option number {i} of very many choices here"))
            .collect();
        let property = json!({"enum": options});
        let tools = [tool(
            "pick",
            json!({"type": "object", "properties": {"a": property, "b": property, "c": property}, "required": ["a", "b", "c"]}),
        )];
        let draft = next_text(&tools, "");
        assert!(draft.len() <= MAX_DRAFT_CHARS, "{draft}");
        assert!(draft.ends_with("choices here\", \"c\": "), "{draft}");
    }

    #[test]
    fn nested_values_and_constants() {
        let tools = [tool(
            "memory__create_entities",
            json!({"type": "object", "properties": {"entities": {"type": "array"}, "kind": {"const": "x"}}, "required": ["entities", "kind"]}),
        )];
        let start = "{\"tool\": \"memory__create_entities\", \"arguments\": {\"entities\": ";
        assert_eq!(
            next_text(&tools, &format!("{start}[{{\"name\": \"a]\"}}")),
            ""
        );
        assert_eq!(
            next_text(&tools, &format!("{start}[{{\"name\": \"a]\"}}]")),
            ", \"kind\": \"x\"}}"
        );
        assert_eq!(next_text(&tools, "not a call"), "");
    }
}
