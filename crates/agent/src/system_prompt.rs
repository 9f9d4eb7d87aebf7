//! The system prompt the agent sends: a usage guide, the user's own prompt, the instructions
//! of the servers whose tools the model can reach this turn, the search hint, and in prompt
//! mode the tool list. Servers' instructions take a share of the model's context window, split
//! among the servers that speak this turn, and at most 4,000 characters each. A small model
//! reads every word it is given and follows it (server-everything's instructions end with an
//! "Easter Egg" that the 135M model answered "hello" with), so its share is small; a large
//! model's is generous.

use tether_catalog::SEARCH_TOOL;
use tether_protocol::chat::{SERVER_INSTRUCTIONS_OPENING, ToolDefinition};

use crate::prompt_mode::tools_prompt;

/// What one system prompt is made of.
pub(crate) struct SystemPrompt<'a> {
    /// The instructions of the servers that speak this turn, by server.
    pub(crate) instructions: Vec<(String, String)>,
    /// The model's context window in tokens, when known.
    pub(crate) context_window: Option<usize>,
    /// The user's own system prompt.
    pub(crate) own: Option<&'a str>,
    /// The tools offered on this request.
    pub(crate) offered: &'a [ToolDefinition],
    /// Whether tools are described in the prompt instead of passed natively.
    pub(crate) prompt_mode: bool,
}

/// The system prompt for `parts`.
pub(crate) fn compose(parts: &SystemPrompt<'_>) -> String {
    let mut text = String::from(
        "You are a helpful assistant with access to tools from MCP servers. Use a tool when it helps answer \
         accurately; pass arguments that match its schema; if a tool returns an error, read it and fix the call \
         or explain the problem. Answer directly when no tool is needed.",
    );
    // The user's own prompt before any server's words, so that everything from the first
    // server's instructions on is theirs (`SERVER_INSTRUCTIONS_OPENING`).
    if let Some(own) = parts.own {
        text.push_str("\n\n");
        text.push_str(own);
    }
    let each = instructions_cap(parts.context_window, parts.instructions.len());
    for (server, instructions) in &parts.instructions {
        text.push_str(&format!(
            "{SERVER_INSTRUCTIONS_OPENING}{server}\" server (its tools start with \"{server}__\"):\n{}",
            cut_at(instructions.trim(), each)
        ));
    }
    if parts.offered.iter().any(|d| d.name == SEARCH_TOOL) {
        text.push_str(
            "\n\nMore tools exist than are loaded: when none of the loaded tools fits, call search_tools \
             to find and load one, then call it.",
        );
    }
    if parts.prompt_mode && !parts.offered.is_empty() {
        text.push_str("\n\n");
        text.push_str(&tools_prompt(parts.offered));
    }
    text
}

/// The most characters one server's instructions take, whatever the window.
const PER_SERVER: usize = 4000;

/// Characters of instructions allowed per token of context window: 1/16, so about 1/64 of
/// the window in tokens (512 characters for an 8,192-token model, 8,192 for 128k).
const SHARE: usize = 16;

/// The characters each of `servers` speaking servers may use, for a model with
/// `context_window` tokens (unknown: [`PER_SERVER`] each).
pub(crate) fn instructions_cap(context_window: Option<usize>, servers: usize) -> usize {
    match context_window {
        Some(window) => (window / SHARE / servers.max(1)).min(PER_SERVER),
        None => PER_SERVER,
    }
}

/// `text` cut to at most `max` characters, at a word where one is near, marked as cut.
pub(crate) fn cut_at(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    // Back to the last whitespace, unless that loses more than a fifth.
    let kept = match cut.rfind(char::is_whitespace) {
        Some(at) if at >= cut.len() * 4 / 5 => &cut[..at],
        _ => cut.as_str(),
    };
    format!("{} […]", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_follows_the_window_and_the_speakers() {
        assert_eq!(instructions_cap(Some(8192), 1), 512);
        assert_eq!(instructions_cap(Some(8192), 2), 256);
        assert_eq!(instructions_cap(Some(128_000), 1), 4000);
        assert_eq!(instructions_cap(None, 7), 4000);
        assert_eq!(instructions_cap(Some(8192), 0), 512);
    }

    #[test]
    fn long_instructions_are_cut_at_a_word_and_marked() {
        assert_eq!(cut_at("short", 10), "short");
        assert_eq!(cut_at("one two three four", 14), "one two three […]");
        // Back to a word only when that loses little.
        assert_eq!(cut_at("one two three four", 12), "one two thre […]");
        assert_eq!(cut_at("abcdefghij", 4), "abcd […]");
        // Characters, not bytes: never cut inside one.
        assert_eq!(cut_at("ééééé", 3), "ééé […]");
    }

    #[test]
    fn the_servers_words_come_after_everything_the_prompt_itself_says() {
        let text = compose(&SystemPrompt {
            instructions: vec![("a".into(), "Use a.".into()), ("b".into(), "Use b.".into())],
            context_window: Some(8192),
            own: Some("Talk like a pirate."),
            offered: &[],
            prompt_mode: false,
        });
        let servers = text.find(SERVER_INSTRUCTIONS_OPENING).unwrap();
        assert!(
            text.find("Talk like a pirate.").unwrap() < servers,
            "{text}"
        );
        assert!(text[servers..].contains("Use a.") && text[servers..].contains("Use b."));
        assert!(!text[..servers].contains("Use a."));
    }
}
