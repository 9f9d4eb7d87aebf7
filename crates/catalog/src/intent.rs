//! Whether a message asks to change something or only to be told something, read against the
//! servers' own tool annotations (`readOnlyHint`, `destructiveHint`): for the small model's
//! pre-selection, a question ("what was the last commit?") is not offered the tools a server
//! marks as writing (`git_commit`) when it offers read-only ones beside them, and a request to
//! store something ("remember that Bob likes tea") is not offered the read-only ones
//! (`read_graph`) beside tools that write. Tools without annotations are never dropped, and
//! the ranking's order is kept.

use tether_protocol::QualifiedTool;

use crate::search::{Hit, words_of};

/// What a message asks of the tools, as far as its words tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Intent {
    /// To keep, make or change something.
    Change,
    /// To remove or undo something.
    Destroy,
    /// To be told or shown something, changing nothing.
    Ask,
    /// Neither clearly.
    Unclear,
}

/// Verbs that ask for a change whatever the tool: none of them is also a word of looking up or
/// of arithmetic ("add", "set", "make" and "change" are left out for that reason).
const CHANGE_VERBS: &[&str] = &[
    "remember", "memorize", "memorise", "save", "store", "record", "write", "create", "rename",
    "update", "edit", "commit", "append", "insert", "stage", "checkout",
];

/// Verbs that ask to remove or undo something.
const DESTROY_VERBS: &[&str] = &[
    "delete", "remove", "erase", "forget", "reset", "drop", "clear", "wipe", "discard", "revert",
    "unstage",
];

/// Verbs that ask to store something when they open the message ("note that…"); elsewhere
/// they are nouns ("my notes").
const NOTING: &[&str] = &["note", "jot"];

/// Words that open a question or a request to be shown something.
const ASKING: &[&str] = &[
    "what", "which", "who", "whom", "whose", "where", "when", "why", "how", "is", "are", "was",
    "were", "has", "have", "show", "list", "tell", "display", "see",
];

/// Openings that ask only when a question follows: "do you…", "does it…" or a question mark;
/// "do some research on…" asks for work.
const DOING: &[&str] = &["do", "does", "did"];

/// Who a "do" question is about.
const SUBJECTS: &[&str] = &[
    "you", "i", "we", "they", "it", "he", "she", "this", "that", "these", "those", "the", "my",
    "your", "our", "any", "anything", "anyone",
];

/// What `text` asks: a message opening with an asking word is a question, whatever nouns it
/// holds ("what was the last commit?"); otherwise a verb of removing or of changing anywhere
/// makes it one of those ("can you remember that…?"), and a question mark a question.
pub(crate) fn intent_of(text: &str) -> Intent {
    let words = words_of(text);
    let first = words.first().map(String::as_str).unwrap_or_default();
    let second = words.get(1).map(String::as_str).unwrap_or_default();
    let any = |verbs: &[&str]| words.iter().any(|w| verbs.contains(&w.as_str()));
    let asks = if DOING.contains(&first) {
        SUBJECTS.contains(&second) || text.trim_end().ends_with('?')
    } else {
        ASKING.contains(&first)
    };
    if asks {
        Intent::Ask
    } else if NOTING.contains(&first) {
        Intent::Change
    } else if any(DESTROY_VERBS) {
        Intent::Destroy
    } else if any(CHANGE_VERBS) {
        Intent::Change
    } else if text.trim_end().ends_with('?') {
        Intent::Ask
    } else {
        Intent::Unclear
    }
}

/// What a tool's server says it does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// `readOnlyHint: true`.
    Reads,
    /// `readOnlyHint: false`, not marked destructive.
    Writes,
    /// `destructiveHint: true`, not marked read-only.
    Destroys,
}

fn effect_of(tool: &QualifiedTool) -> Option<Effect> {
    let hints = &tool.tool.annotations;
    match (hints.read_only_hint, hints.destructive_hint) {
        (Some(true), _) => Some(Effect::Reads),
        (_, Some(true)) => Some(Effect::Destroys),
        (Some(false), _) => Some(Effect::Writes),
        (None, _) => None,
    }
}

/// Whether the server marked `tool` at all.
fn marked(tool: &QualifiedTool) -> bool {
    let hints = &tool.tool.annotations;
    hints.read_only_hint.is_some() || hints.destructive_hint.is_some()
}

/// What a tool does by the verb its name opens with (`describe_table` reads, `create_table`
/// writes, `drop_table` destroys), for candidates none of which is marked: many servers mark
/// none of their tools (server-sqlite), and a question offered `create_table` beside
/// `describe_table` got the wrong one. Beside marked tools the marks alone count, so a guess
/// never outweighs a server's word (an unmarked `write_query` must not push out a marked
/// `write_file`). A verb that is also arithmetic ("add") says nothing.
fn effect_named(name: &str) -> Option<Effect> {
    let verb = name
        .split(['_', '-', '.'])
        .find(|w| !w.is_empty())?
        .to_lowercase();
    if NAMED_READS.contains(&verb.as_str()) {
        Some(Effect::Reads)
    } else if NAMED_DESTROYS.contains(&verb.as_str()) {
        Some(Effect::Destroys)
    } else if NAMED_WRITES.contains(&verb.as_str()) {
        Some(Effect::Writes)
    } else {
        None
    }
}

/// Verbs opening the names of tools that only look.
const NAMED_READS: &[&str] = &[
    "get", "list", "read", "describe", "search", "find", "show", "fetch", "query", "lookup",
    "view", "open",
];

/// Verbs opening the names of tools that remove.
const NAMED_DESTROYS: &[&str] = &["delete", "remove", "drop", "clear", "purge", "erase"];

/// Verbs opening the names of tools that create or change.
const NAMED_WRITES: &[&str] = &[
    "create", "write", "insert", "update", "set", "save", "store", "append", "edit", "rename",
    "move", "put", "upload",
];

/// `hits` without the tools whose effect goes against `intent`, when some hit whose effect
/// fits it is left: a question keeps what reads, a change what writes without destroying, a
/// removal what writes or destroys. Unmarked tools always stay.
pub(crate) fn fitting(hits: Vec<Hit>, tools: &[QualifiedTool], intent: Intent) -> Vec<Hit> {
    let (wanted, against): (&[Effect], &[Effect]) = match intent {
        Intent::Ask => (&[Effect::Reads], &[Effect::Writes, Effect::Destroys]),
        Intent::Change => (&[Effect::Writes], &[Effect::Reads, Effect::Destroys]),
        Intent::Destroy => (&[Effect::Destroys, Effect::Writes], &[Effect::Reads]),
        Intent::Unclear => return hits,
    };
    let guessed = !hits.iter().any(|h| tools.get(h.index).is_some_and(marked));
    let effect = |hit: &Hit| {
        let tool = tools.get(hit.index)?;
        if guessed {
            effect_named(&tool.tool.name)
        } else {
            effect_of(tool)
        }
    };
    if !hits
        .iter()
        .any(|h| effect(h).is_some_and(|e| wanted.contains(&e)))
    {
        return hits;
    }
    hits.into_iter()
        .filter(|h| !effect(h).is_some_and(|e| against.contains(&e)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, annotations: serde_json::Value) -> QualifiedTool {
        QualifiedTool {
            qualified_name: format!("s__{name}"),
            server: "s".into(),
            tool: serde_json::from_value(json!({
                "name": name,
                "inputSchema": {"type": "object"},
                "annotations": annotations,
            }))
            .unwrap(),
        }
    }

    fn names(hits: &[Hit], tools: &[QualifiedTool]) -> Vec<String> {
        hits.iter()
            .map(|h| tools[h.index].tool.name.clone())
            .collect()
    }

    fn hits(n: usize) -> Vec<Hit> {
        (0..n)
            .map(|index| Hit {
                index,
                score: 1.0,
                exact: false,
            })
            .collect()
    }

    #[test]
    fn messages_read_as_changes_questions_or_neither() {
        assert_eq!(
            intent_of("Remember that Bob likes green tea"),
            Intent::Change
        );
        assert_eq!(intent_of("commit the staged files"), Intent::Change);
        assert_eq!(intent_of("what was the last commit?"), Intent::Ask);
        assert_eq!(
            intent_of("What's the most recent commit here?"),
            Intent::Ask
        );
        assert_eq!(
            intent_of("Can you remember that I'm vegan?"),
            Intent::Change
        );
        assert_eq!(intent_of("Any uncommitted changes?"), Intent::Ask);
        assert_eq!(intent_of("Forget what I said about Bob"), Intent::Destroy);
        assert_eq!(intent_of("please delete notes.txt"), Intent::Destroy);
        assert_eq!(intent_of("Forget what I said about Bob"), Intent::Destroy);
        assert_eq!(intent_of("please delete notes.txt"), Intent::Destroy);
        assert_eq!(intent_of("What changed in the last week?"), Intent::Ask);
        assert_eq!(intent_of("show me the branches"), Intent::Ask);
        assert_eq!(intent_of("add 3 and 4"), Intent::Unclear);
        assert_eq!(intent_of("9 times 8"), Intent::Unclear);
        assert_eq!(
            intent_of("Note in memory that Carol is a doctor."),
            Intent::Change
        );
        assert_eq!(intent_of("read note.txt"), Intent::Unclear);
        assert_eq!(intent_of("Do you remember Bob?"), Intent::Ask);
        assert_eq!(intent_of("does the repo have a main branch"), Intent::Ask);
        assert_eq!(
            intent_of("do some research on quantum computing for me"),
            Intent::Unclear
        );
        assert_eq!(intent_of("Do write it down"), Intent::Change);
    }

    #[test]
    fn an_unmarked_tool_is_judged_by_the_verb_its_name_opens_with() {
        let tools = vec![
            tool("list_tables", json!({})),
            tool("describe_table", json!({})),
            tool("create_table", json!({})),
            tool("drop_table", json!({})),
            tool("add", json!({})),
        ];
        let asked = fitting(hits(5), &tools, Intent::Ask);
        assert_eq!(
            names(&asked, &tools),
            ["list_tables", "describe_table", "add"]
        );
        let changed = fitting(hits(5), &tools, Intent::Change);
        assert_eq!(names(&changed, &tools), ["create_table", "add"]);
        // Beside a marked tool, names are not read: the marks alone decide.
        let mixed = vec![
            tool("write_file", json!({"destructiveHint": true})),
            tool("write_query", json!({})),
            tool("read_file", json!({"readOnlyHint": true})),
        ];
        assert_eq!(
            names(&fitting(hits(3), &mixed, Intent::Change), &mixed),
            ["write_file", "write_query", "read_file"]
        );
    }

    #[test]
    fn a_question_keeps_the_read_only_tools_and_a_change_the_writing_ones() {
        let tools = vec![
            tool(
                "git_commit",
                json!({"readOnlyHint": false, "destructiveHint": false}),
            ),
            tool("git_log", json!({"readOnlyHint": true})),
            tool("plain", json!({})),
            tool("git_reset", json!({"destructiveHint": true})),
        ];
        let asked = fitting(hits(4), &tools, Intent::Ask);
        assert_eq!(names(&asked, &tools), ["git_log", "plain"]);
        let changed = fitting(hits(4), &tools, Intent::Change);
        assert_eq!(names(&changed, &tools), ["git_commit", "plain"]);
        let removed = fitting(hits(4), &tools, Intent::Destroy);
        assert_eq!(
            names(&removed, &tools),
            ["git_commit", "plain", "git_reset"]
        );
        assert_eq!(fitting(hits(4), &tools, Intent::Unclear).len(), 4);
    }

    #[test]
    fn nothing_is_dropped_without_a_tool_that_fits_the_intent() {
        let tools = vec![
            tool("read_graph", json!({"readOnlyHint": true})),
            tool("search_nodes", json!({"readOnlyHint": true})),
        ];
        assert_eq!(fitting(hits(2), &tools, Intent::Change).len(), 2);
        let unmarked = vec![tool("a", json!({})), tool("b", json!({}))];
        assert_eq!(fitting(hits(2), &unmarked, Intent::Ask).len(), 2);
    }
}
