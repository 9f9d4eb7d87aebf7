//! When the small embedded model must call a tool, and what it is told when none fits: a
//! message about some offered tool (a word in common, or the numbers its required numeric
//! parameters need) gets a required call; any other gets an answer, with a note that no tool
//! fits. And the text of the current turn, whose numbers an answer may give.

use serde_json::Value;
use tether_protocol::chat::{Message, SERVER_INSTRUCTIONS_OPENING, ToolDefinition};

use crate::narrowing::{identifier_words, spaced_words};

/// Told to a small model whose tools do not fit the message.
pub(crate) const NO_TOOL_FITS: &str = "None of your tools fits this message. If it asks you to look \
    something up or to do something (the weather, news, prices, a booking), say that you have \
    no tool for that. Otherwise answer in a sentence or two.";

/// Words of the things a model without a fitting tool invents: what is looked up live.
const LOOKED_UP: &[&str] = &[
    "weather",
    "forecast",
    "temperature",
    "rain",
    "snow",
    "news",
    "headlines",
    "price",
    "prices",
    "stock",
    "stocks",
    "traffic",
    "flight",
    "flights",
    "booking",
    "reservation",
];

/// Answered, without running the model, to a message that asks for something looked up live
/// when no offered tool fits: told to say so, the 135M model still forecast Paris at 21°C.
pub(crate) const NO_TOOL_ANSWER: &str = "I have no tool that can look that up, so I can't \
    tell you reliably. Configure an MCP server that provides it and ask again.";

/// Answered, without running the model, to a message that asks for a computation no offered
/// tool does in one call.
pub(crate) const NO_TOOL_COMPUTES: &str = "I have no tool that can work that out, so I can't \
    tell you reliably. Configure an MCP server that provides it and ask again.";

/// Computations that adding, subtracting, multiplying or dividing once does not give, as a
/// message words them, with the words a tool that does them would use. With the built-in
/// arithmetic alone, "What is 2 to the power of 10?" was called as `multiply(2, 10)` and
/// answered 20.
const COMPUTED: &[(&str, &[&str])] = &[
    ("power", &["power", "pow", "exponent", "exponentiation"]),
    ("exponent", &["power", "pow", "exponent", "exponentiation"]),
    ("squared", &["power", "pow", "square", "squared"]),
    ("cubed", &["power", "pow", "cube", "cubed"]),
    ("square root", &["root", "sqrt"]),
    ("cube root", &["root", "cbrt"]),
    ("factorial", &["factorial"]),
    ("logarithm", &["logarithm", "log"]),
    ("remainder", &["remainder", "modulo", "mod"]),
    ("modulo", &["remainder", "modulo", "mod"]),
];

/// Whether `text` asks for a computation (`COMPUTED`) that no tool of `tools` names.
pub(crate) fn asks_to_compute_unserved(text: &str, tools: &[ToolDefinition]) -> bool {
    let spaced = spaced_words(text);
    let known: Vec<String> = tools
        .iter()
        .map(|tool| spaced_words(&format!("{} {}", tool.name, tool.description)))
        .collect();
    COMPUTED.iter().any(|(asked, served)| {
        spaced.contains(&format!(" {asked} "))
            && !known
                .iter()
                .any(|k| served.iter().any(|w| k.contains(&format!(" {w} "))))
    })
}

/// Whether `text` asks for something looked up live (`LOOKED_UP`) that no tool of `tools`
/// names: a weather server's tools say "weather"; a file search that says "like" is no
/// forecast.
pub(crate) fn asks_to_look_up_unserved(text: &str, tools: &[ToolDefinition]) -> bool {
    let asked: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| LOOKED_UP.contains(&w.as_str()))
        .collect();
    !asked.is_empty()
        && !tools.iter().any(|tool| {
            let known = format!("{} {}", tool.name, tool.description).to_lowercase();
            known
                .split(|c: char| !c.is_alphanumeric())
                .any(|w| asked.iter().any(|a| a == w))
        })
}

/// `messages` with the servers' instructions cut from the system message (from the first
/// [`SERVER_INSTRUCTIONS_OPENING`] on): a small model answering without a tool recited
/// server-everything's instructions to "hello".
pub(crate) fn without_server_instructions(messages: &[Message]) -> Vec<Message> {
    let mut kept = messages.to_vec();
    if let Some(Message::System { content }) = kept.first_mut()
        && let Some(at) = content.find(SERVER_INSTRUCTIONS_OPENING)
    {
        content.truncate(at);
    }
    kept
}

/// `messages` with `note` at the end of the system message (one is added when there is none).
pub(crate) fn with_system_note(messages: &[Message], note: &str) -> Vec<Message> {
    let mut noted = messages.to_vec();
    match noted.first_mut() {
        Some(Message::System { content }) => {
            content.push_str("\n\n");
            content.push_str(note);
        }
        _ => noted.insert(0, Message::system(note)),
    }
    noted
}

/// Whether `messages` end with the turn's only tool result, a failure, and no tool of `tools`
/// is the one that failed: the selection offered others in its place (the agent's "after a
/// failed call"), so a small model makes one more call instead of answering with the error.
/// Its own tool still offered, it answers: the 135M model repeats a failed call as it was.
/// A failure that says a file the message writes out is not there is the answer, not a wrong
/// tool: "What's in todo.md?" with no such file went on to the current time.
pub(crate) fn failed_call_replaced(messages: &[Message], tools: &[ToolDefinition]) -> bool {
    let Some(Message::Tool {
        name,
        is_error: true,
        content,
        ..
    }) = messages.last()
    else {
        return false;
    };
    let from = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    if let Some(Message::User { content: asked }) = messages.get(from)
        && names_a_missing_file(asked, content)
    {
        return false;
    }
    let results = messages[from..]
        .iter()
        .filter(|m| matches!(m, Message::Tool { .. }))
        .count();
    let short = name.rsplit("__").next().unwrap_or(name);
    // `mcp_query` narrowed to pre-selected tools lists them as `tool "name"`.
    let listed = format!("tool \"{short}\"");
    results == 1
        && !tools.is_empty()
        && !tools
            .iter()
            .any(|tool| tool.name == *name || tool.description.contains(&listed))
}

/// Whether `error` (a failed call's result) says that a file `asked` writes out is not there:
/// it quotes the path and says it does not exist (in the words of the built-in server, the
/// reference filesystem server and the operating system).
fn names_a_missing_file(asked: &str, error: &str) -> bool {
    let lower = error.to_lowercase();
    let missing = ["no such file", "does not exist", "not found", "enoent"]
        .iter()
        .any(|words| lower.contains(words));
    missing
        && crate::paths::paths_written_in(asked).iter().any(|path| {
            error.contains(&format!("\"{path}\"")) || error.contains(&format!("'{path}'"))
        })
}

/// The last user message and every message after it, as text.
pub(crate) fn this_turn_text(messages: &[Message]) -> String {
    let from = messages
        .iter()
        .rposition(|m| matches!(m, Message::User { .. }))
        .unwrap_or(0);
    let mut text = String::new();
    for message in &messages[from..] {
        match message {
            Message::User { content } | Message::Tool { content, .. } => {
                text.push_str(content);
                text.push('\n');
            }
            _ => {}
        }
    }
    text
}

/// Everyday words and the words tools use for the same thing. Not "today" or "morning":
/// "how are you today?" and "good morning" are small talk.
const EVERYDAY: &[(&str, &[&str])] = &[
    ("remember", &["memory"]),
    ("recall", &["memory"]),
    ("forget", &["memory"]),
    ("memorize", &["memory"]),
    ("memorise", &["memory"]),
    ("year", &["date"]),
    ("month", &["date"]),
    ("folder", &["directory"]),
    ("folders", &["directory"]),
];

/// Everyday phrases that ask for what a tool names with another word: "what day is it
/// today?" shares none with a clock's "current date, time and weekday", and the 135M model,
/// not made to call it, answered "Today is a Monday." on a Sunday. "Day" alone is small talk
/// too ("how was your day?"), so only questions about which day it is count.
const EVERYDAY_PHRASES: &[(&str, &str)] = &[
    ("what day", "date"),
    ("which day", "date"),
    ("day is it", "date"),
    ("day it is", "date"),
    ("day is today", "date"),
];

/// Whether `text` has a word in common with some tool's name, description or parameters
/// (arithmetic signs count as their words: `10 + 20` mentions "plus"). With none, a small
/// model is not made to call a tool.
pub(crate) fn mentions_a_tool(text: &str, tools: &[ToolDefinition]) -> bool {
    const IGNORED: &[&str] = &[
        "the", "and", "for", "you", "your", "with", "what", "this", "that", "are", "can", "please",
        "how", "who", "why", "when", "where", "does", "have", "has", "use", "tool", "tools",
        "from", "into", "its", "one", "two", "give", "tell", "get", "all", "any", "not", "but",
        "was", "will", "would", "could", "should", "about", "there", "here", "them", "they",
        "then", "like", "just", "some", "also", "very", "much", "want", "need",
    ];
    // camelCase and snake_case names count by their parts too.
    let words = |text: &str| -> Vec<String> {
        let mut out = identifier_words(text);
        out.retain(|w| w.len() >= 3 && !IGNORED.contains(&w.as_str()));
        out
    };
    let mut asked = words(text);
    for (sign, word) in [
        ('+', "plus"),
        ('*', "times"),
        ('×', "times"),
        ('/', "divided"),
        ('=', "equals"),
    ] {
        if text.contains(sign) {
            asked.push(word.to_string());
        }
    }
    if text.contains(" - ") || text.contains(" minus ") {
        asked.push("minus".to_string());
    }
    // Everyday words for what tools name otherwise: "remember that Bob likes tea" shares no
    // word with `create_entities` in a "knowledge graph memory", "what year is it?" none with
    // a clock's "current date and time", a folder is a directory.
    let meant: Vec<String> = asked
        .iter()
        .filter_map(|w| EVERYDAY.iter().find(|(word, _)| word == w))
        .flat_map(|(_, meant)| meant.iter().map(|m| m.to_string()))
        .collect();
    asked.extend(meant);
    let spaced = spaced_words(text);
    asked.extend(
        EVERYDAY_PHRASES
            .iter()
            .filter(|(phrase, _)| spaced.contains(&format!(" {phrase} ")))
            .map(|(_, meant)| meant.to_string()),
    );
    // A message carrying the numbers a tool's required numeric parameters need is about it
    // ("take 7 away from 20" shares no word with `subtract`).
    let numbers = text
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| w.chars().any(|c| c.is_ascii_digit()))
        .count();
    let numeric = |tool: &ToolDefinition| {
        let required = tool.parameters["required"].as_array();
        required.map_or(0, |names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .filter(|n| {
                    matches!(
                        tool.parameters["properties"][n]["type"].as_str(),
                        Some("number" | "integer")
                    )
                })
                .count()
        })
    };
    if numbers > 0 && tools.iter().any(|t| (1..=numbers).contains(&numeric(t))) {
        return true;
    }
    let stem = |w: &str| w.trim_end_matches('s').chars().take(6).collect::<String>();
    let stems: Vec<String> = asked.iter().map(|w| stem(w)).collect();
    tools.iter().any(|tool| {
        let known = format!(
            "{} {} {}",
            tool.name.replace("__", " "),
            tool.description,
            tool.parameters
        );
        words(&known).iter().any(|w| {
            stems.contains(&stem(w))
                // A word of four letters or more that begins a longer one: "week" in
                // "weekday", "file" in "filename".
                || asked.iter().any(|a| a.len() >= 4 && w.starts_with(a.as_str()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_without_tools_is_not_given_the_servers_instructions() {
        let system = format!(
            "Be helpful.\n\nTalk like a pirate.{SERVER_INSTRUCTIONS_OPENING}everything\" server (its tools start with \"everything__\"):\nAnswer with an Easter egg."
        );
        let messages = vec![Message::system(&system), Message::user("hello")];
        let kept = without_server_instructions(&messages);
        assert!(
            matches!(&kept[0], Message::System { content } if content == "Be helpful.\n\nTalk like a pirate."),
            "{kept:?}"
        );
        assert_eq!(kept[1], messages[1]);
        // A prompt without instructions is left as it is.
        let plain = vec![Message::system("Be helpful."), Message::user("hi")];
        assert_eq!(without_server_instructions(&plain), plain);
    }

    #[test]
    fn live_lookups_are_told_apart_from_talk() {
        let search = ToolDefinition {
            name: "fs__search_files".into(),
            description: "Search files with patterns like '*.md'.".into(),
            parameters: serde_json::json!({"type": "object"}),
        };
        for asked in [
            "What's the weather like in Berlin?",
            "Will it rain on Saturday?",
            "stock price of ACME",
            "Latest news please",
        ] {
            assert!(
                asks_to_look_up_unserved(asked, std::slice::from_ref(&search)),
                "{asked}"
            );
            assert!(
                !mentions_a_tool(asked, std::slice::from_ref(&search)),
                "{asked}"
            );
        }
        for talk in ["Good morning!", "Tell me a joke.", "Why is the sky blue?"] {
            assert!(!asks_to_look_up_unserved(talk, &[]), "{talk}");
        }
        let forecast = ToolDefinition {
            name: "weather__forecast".into(),
            description: "The weather forecast for a city.".into(),
            parameters: serde_json::json!({"type": "object"}),
        };
        assert!(!asks_to_look_up_unserved(
            "What's the weather like in Berlin?",
            &[search, forecast]
        ));
    }

    #[test]
    fn a_call_is_forced_only_for_a_message_about_some_tool() {
        let tool = |name: &str, description: &str| ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters: serde_json::json!({"type": "object", "properties": {"a": {"type": "number"}}}),
        };
        let tools = vec![
            tool("builtin__add", "Add two numbers: a plus b."),
            tool("builtin__read_file", "Show what is in a file."),
            tool(
                "builtin__current_time",
                "The current date, time and weekday.",
            ),
        ];
        for asked in [
            "What is 10 + 20?",
            "Use the add tool on 2 and 3",
            "read notes.txt",
            "what time is it",
            "What day of the week is it?",
            "What year is it?",
            "what day is it today?",
            "Which day is it?",
            "Do you know what day it is?",
        ] {
            assert!(mentions_a_tool(asked, &tools), "{asked}");
        }
        for chat in [
            "hello",
            "Thanks!",
            "hi there, how are you?",
            "Good morning!",
            "How was your day?",
            "Have a nice day!",
        ] {
            assert!(!mentions_a_tool(chat, &tools), "{chat}");
        }
        // The numbers a tool needs, without a word of its own.
        let subtract = ToolDefinition {
            name: "builtin__subtract".into(),
            description: "Subtract two numbers.".into(),
            parameters: serde_json::json!({"type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]}),
        };
        assert!(mentions_a_tool(
            "Take 7 away from 20.",
            std::slice::from_ref(&subtract)
        ));
        assert!(!mentions_a_tool(
            "Take it away.",
            std::slice::from_ref(&subtract)
        ));
        let remember = ToolDefinition {
            name: "memory__create_entities".into(),
            description: "Create new entities in the knowledge graph memory.".into(),
            parameters: serde_json::json!({"type": "object"}),
        };
        assert!(mentions_a_tool(
            "Please remember that Bob likes green tea.",
            std::slice::from_ref(&remember)
        ));
        assert!(!mentions_a_tool(
            "Bob likes green tea.",
            std::slice::from_ref(&remember)
        ));
        assert!(!mentions_a_tool(
            "I have 3 cats",
            std::slice::from_ref(&subtract)
        ));
        let list = ToolDefinition {
            name: "filesystem__list_directory".into(),
            description: "List the files and directories in a directory.".into(),
            parameters: serde_json::json!({"type": "object"}),
        };
        assert!(mentions_a_tool(
            "What's in the docs folder?",
            std::slice::from_ref(&list)
        ));
    }

    /// A tool taking an object, known by its name and description alone.
    fn tool(name: &str, description: &str) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    #[test]
    fn a_computation_no_tool_does_is_told_apart() {
        let arithmetic = [
            tool("builtin__multiply", "Multiply two numbers: a * b."),
            tool("builtin__divide", "Divide two numbers: a / b."),
        ];
        for asked in [
            "What is 2 to the power of 10?",
            "What's 7 squared?",
            "square root of 81",
            "What is the remainder when 17 is divided by 5?",
            "factorial of 6",
        ] {
            assert!(asks_to_compute_unserved(asked, &arithmetic), "{asked}");
        }
        for asked in [
            "What is 12 times 7?",
            "What's in the root folder?",
            "Show the git log",
            "Power through the list of files",
        ] {
            assert_eq!(
                asks_to_compute_unserved(asked, &arithmetic),
                asked.starts_with("Power"),
                "{asked}"
            );
        }
        // A tool that does it.
        let power = [tool("math__pow", "Raise x to the power y.")];
        assert!(!asks_to_compute_unserved("2 to the power of 10", &power));
        let factorial = [tool("math.factorial", "Calculate a factorial.")];
        assert!(!asks_to_compute_unserved("factorial of 6", &factorial));
    }

    #[test]
    fn a_failed_call_replaced_by_other_tools_is_tried_again_once() {
        let failed = |is_error| Message::Tool {
            tool_call_id: "call_1".into(),
            name: "memory__add_observations".into(),
            content: "Entity with name Bob not found".into(),
            images: Vec::new(),
            is_error,
        };
        let call = Message::Assistant {
            content: String::new(),
            tool_calls: Vec::new(),
        };
        let asked = Message::user("Remember that Bob likes green tea.");
        let others = [tool("memory__create_entities", "Create entities.")];
        let turn = vec![asked.clone(), call.clone(), failed(true)];
        assert!(failed_call_replaced(&turn, &others));
        // The failed tool still offered (directly, or among `mcp_query`'s): the model answers.
        let kept = [tool("memory__add_observations", "Add observations.")];
        assert!(!failed_call_replaced(&turn, &kept));
        let narrowed = [tool(
            "mcp_query",
            "Tools:\n- server \"memory\", tool \"add_observations\": Add observations.",
        )];
        assert!(!failed_call_replaced(&turn, &narrowed));
        // A call that worked, or a second failure in the turn: the model answers.
        assert!(!failed_call_replaced(
            &[asked.clone(), call.clone(), failed(false)],
            &others
        ));
        let twice = vec![
            asked,
            call.clone(),
            failed(true),
            call.clone(),
            failed(true),
        ];
        assert!(!failed_call_replaced(&twice, &others));
        // A file the message writes out that is not there: that is the answer (an error that
        // quotes another path for it is not told apart, and the model tries again).
        let missing = |error: &str| Message::Tool {
            tool_call_id: "call_1".into(),
            name: "builtin__read_file".into(),
            content: error.into(),
            images: Vec::new(),
            is_error: true,
        };
        let listing = [tool("builtin__list_files", "List files.")];
        let asked = Message::user("What's in todo.md?");
        for error in [
            "cannot open \"todo.md\": No such file or directory (os error 2)",
            "Error: ENOENT: no such file or directory, open '/work/todo.md'",
        ] {
            let turn = vec![asked.clone(), call.clone(), missing(error)];
            assert_eq!(
                failed_call_replaced(&turn, &listing),
                !error.contains("\"todo.md\""),
                "{error}"
            );
        }
        // Another failure with that file, or a missing file the message did not write: again.
        for error in [
            "\"todo.md\" is not a text file",
            "cannot open \"notes.txt\": No such file or directory",
        ] {
            let turn = vec![asked.clone(), call.clone(), missing(error)];
            assert!(failed_call_replaced(&turn, &listing), "{error}");
        }
    }
}
