//! Slash commands as data: one [`SlashCommand`] enum that the chat parses, completes and
//! lists in `/help`, and that `tether acp` advertises to the editor
//! (`available_commands_update`) and runs when a prompt starts with one. The listings both
//! front ends print (`/tools`, `/servers`, `/usage`) are written here once, as text.

use tether_catalog::{SelectionMode, ToolCatalog, ToolSelection};
use tether_mcp::{ServerRegistry, ServerState};
use tether_protocol::chat::Usage;

use crate::terminal_view::clip;

/// A command a person types after `/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SlashCommand {
    Help,
    Tools,
    Servers,
    Reconnect,
    Add,
    Remove,
    Resources,
    Prompts,
    Prompt,
    Model,
    Approve,
    System,
    Root,
    Clear,
    Compact,
    Usage,
    Save,
    Sessions,
    Resume,
    Export,
    Result,
    Quit,
}

impl SlashCommand {
    /// Every command, in the order `/help` lists them.
    pub(crate) const ALL: &'static [SlashCommand] = &[
        SlashCommand::Help,
        SlashCommand::Tools,
        SlashCommand::Servers,
        SlashCommand::Reconnect,
        SlashCommand::Add,
        SlashCommand::Remove,
        SlashCommand::Resources,
        SlashCommand::Prompts,
        SlashCommand::Prompt,
        SlashCommand::Model,
        SlashCommand::Approve,
        SlashCommand::System,
        SlashCommand::Root,
        SlashCommand::Clear,
        SlashCommand::Compact,
        SlashCommand::Usage,
        SlashCommand::Save,
        SlashCommand::Sessions,
        SlashCommand::Resume,
        SlashCommand::Export,
        SlashCommand::Result,
        SlashCommand::Quit,
    ];

    /// Its name, without the slash.
    pub(crate) fn name(self) -> &'static str {
        self.spec().0
    }

    /// What it takes, for a hint (`None`: nothing).
    pub(crate) fn input(self) -> Option<&'static str> {
        self.spec().1
    }

    /// What it does, in a few words.
    pub(crate) fn description(self) -> &'static str {
        self.spec().2
    }

    fn spec(self) -> (&'static str, Option<&'static str>, &'static str) {
        use SlashCommand::*;
        match self {
            Help => ("help", None, "this list"),
            Tools => ("tools", Some("[FILTER]"), "tools offered to the model"),
            Servers => ("servers", None, "connected servers and their state"),
            Reconnect => (
                "reconnect",
                Some("[SERVER]"),
                "start a server (or all) again now, e.g. after it crashed",
            ),
            Add => (
                "add",
                Some("[NAME=]COMMAND [ARGS…] | [NAME=]URL"),
                "start another server; its tools join at once",
            ),
            Remove => ("remove", Some("SERVER"), "stop a server and drop its tools"),
            Resources => (
                "resources",
                None,
                "resources and templates, to attach with @server:uri",
            ),
            Prompts => ("prompts", None, "server prompts, to expand with /prompt"),
            Prompt => (
                "prompt",
                Some("SERVER NAME [key=value …]"),
                "expand a server prompt into the conversation",
            ),
            Model => (
                "model",
                Some("PROVIDER:MODEL"),
                "switch the model for the next turns (empty: show it)",
            ),
            Approve => (
                "approve",
                Some("ask|auto|never"),
                "how tool calls are approved",
            ),
            System => (
                "system",
                Some("TEXT"),
                "set the system prompt (empty: show it)",
            ),
            Root => (
                "root",
                Some("DIR"),
                "offer another root directory to servers",
            ),
            Clear => (
                "clear",
                None,
                "start the conversation over (the session file keeps the old turns)",
            ),
            Compact => (
                "compact",
                None,
                "summarise earlier turns with the model to free context",
            ),
            Usage => ("usage", None, "tokens used in this session"),
            Save => ("save", Some("NAME"), "name this session"),
            Sessions => ("sessions", None, "saved sessions"),
            Resume => ("resume", Some("ID"), "continue a saved session"),
            Export => (
                "export",
                Some("FILE.md|FILE.json"),
                "write the conversation to a file",
            ),
            Result => (
                "result",
                Some("[N]"),
                "the whole Nth-last tool result (default: the last)",
            ),
            Quit => ("quit", None, "leave (also Ctrl-D)"),
        }
    }

    /// Whether an editor offers it (`tether acp`): the editor has its own ways to manage
    /// sessions, files and the process, so those commands stay the chat's.
    pub(crate) fn in_editor(self) -> bool {
        use SlashCommand::*;
        matches!(
            self,
            Help | Tools | Servers | Model | System | Clear | Compact | Usage
        )
    }

    /// The command `line` starts with and the rest of the line; `None` when the line is not
    /// a slash command, `Some(Err)` for an unknown one, with the command it may have meant.
    pub(crate) fn parse(line: &str) -> Option<Result<(SlashCommand, &str), String>> {
        let line = line.trim();
        let word = line.strip_prefix('/')?;
        let (name, rest) = word.split_once(char::is_whitespace).unwrap_or((word, ""));
        let found = match name {
            "exit" => Some(SlashCommand::Quit),
            name => SlashCommand::ALL.iter().copied().find(|c| c.name() == name),
        };
        Some(match found {
            Some(command) => Ok((command, rest.trim())),
            None => Err(match closest_command(&format!("/{name}")) {
                Some(close) => {
                    format!("unknown command /{name}; did you mean {close}? (/help lists them)")
                }
                None => format!("unknown command /{name}; /help lists them"),
            }),
        })
    }

    /// Its line in `/help`.
    pub(crate) fn help_line(self) -> String {
        let mut text = String::new();
        if let Some(input) = self.input() {
            text.push_str(input);
            text.push(' ');
        }
        text.push_str(self.description());
        format!("  /{:<10} {text}", self.name())
    }
}

/// The command `word` (with its slash) most likely meant, if any is close.
pub(crate) fn closest_command(word: &str) -> Option<String> {
    SlashCommand::ALL
        .iter()
        .map(|c| {
            let name = format!("/{}", c.name());
            let score = strsim::jaro_winkler(word, &name);
            (name, score)
        })
        .filter(|(_, score)| *score > 0.7)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(name, _)| name)
}

/// `/help`'s text for the commands `offered` keeps.
pub(crate) fn help_text(offered: impl Fn(SlashCommand) -> bool) -> String {
    SlashCommand::ALL
        .iter()
        .filter(|c| offered(**c))
        .map(|c| c.help_line() + "\n")
        .collect()
}

/// `/tools [FILTER]`: every tool whose name contains `filter`, with the first line of its
/// description; in search mode `*` marks the ones the model is sent now.
pub(crate) fn tools_text(
    catalog: &ToolCatalog,
    selection: &dyn ToolSelection,
    filter: &str,
) -> String {
    let snapshot = catalog.snapshot();
    let loaded = selection.loaded();
    let mode = selection.effective_mode(&snapshot);
    let searching = mode != SelectionMode::All;
    let mut out = String::new();
    for (index, tool) in snapshot.tools().iter().enumerate() {
        if !filter.is_empty() && !tool.qualified_name.contains(filter) {
            continue;
        }
        let description = tool.tool.description.as_deref().unwrap_or_default();
        let mark = if searching
            && (snapshot.always_loaded(index) || loaded.contains(&tool.qualified_name))
        {
            "*"
        } else {
            " "
        };
        out.push_str(&format!(
            " {mark}{}  {}\n",
            tool.qualified_name,
            clip(description.lines().next().unwrap_or_default(), 80)
        ));
    }
    if searching {
        out.push_str(&format!(
            "  ({} mode: * marks the {} tools sent to the model; the others are found by search)\n",
            mode.as_str(),
            snapshot.always_loaded_definitions().len() + loaded.len()
        ));
    }
    out
}

/// `/servers`: each server and its state.
pub(crate) fn servers_text(registry: &ServerRegistry) -> String {
    let mut out = String::new();
    for entry in registry.entries() {
        let state = match entry.state() {
            ServerState::Connected(c) if c.is_down() => {
                "down (it exited or its connection closed): the next call starts it again, or /reconnect".to_string()
            }
            ServerState::Connected(c) => format!(
                "connected ({}, {}){}",
                c.summary().protocol_version,
                entry.config.endpoint(),
                match c.restarts() {
                    0 => String::new(),
                    1 => ", restarted once".into(),
                    n => format!(", restarted {n} times"),
                }
            ),
            ServerState::Failed(error) => format!("failed: {error}"),
            ServerState::Disabled => "disabled".into(),
            ServerState::Starting => "starting (its tools join when it is ready)".into(),
        };
        out.push_str(&format!("  {}: {state}\n", entry.name()));
    }
    out
}

/// `/resources`: every server's resources and templates, as `@server:uri` mentions.
pub(crate) async fn resources_text(registry: &ServerRegistry) -> String {
    let mut out = String::new();
    for connection in registry.connections() {
        for resource in connection.list_resources().await.unwrap_or_default() {
            out.push_str(&format!("  @{}:{}\n", connection.name(), resource.uri));
        }
        let templates = connection.list_resource_templates().await;
        for template in templates.unwrap_or_default() {
            out.push_str(&format!(
                "  @{}:{} (template)\n",
                connection.name(),
                template.uri_template
            ));
        }
    }
    out
}

/// `/prompts`: every server's prompts, as the `/prompt` lines that expand them.
pub(crate) async fn prompts_text(registry: &ServerRegistry) -> String {
    let mut out = String::new();
    for connection in registry.connections() {
        for prompt in connection.list_prompts().await.unwrap_or_default() {
            let arguments: Vec<String> = prompt
                .arguments
                .iter()
                .map(|a| format!("{}=…", a.name))
                .collect();
            out.push_str(&format!(
                "  /prompt {} {} {}\n",
                connection.name(),
                prompt.name,
                arguments.join(" ")
            ));
        }
    }
    out
}

/// `/usage`: tokens so far and the conversation's length.
pub(crate) fn usage_text(usage: Usage, messages: usize) -> String {
    format!(
        "{} in, {} out tokens this session ({messages} messages in context)",
        usage.input_tokens, usage.output_tokens
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_with_their_rest_and_typos_get_a_suggestion() {
        assert_eq!(
            SlashCommand::parse("/tools  read "),
            Some(Ok((SlashCommand::Tools, "read")))
        );
        assert_eq!(
            SlashCommand::parse("/exit"),
            Some(Ok((SlashCommand::Quit, "")))
        );
        assert_eq!(SlashCommand::parse("hello /tools"), None);
        let error = SlashCommand::parse("/tols").unwrap().unwrap_err();
        assert!(error.contains("did you mean /tools?"), "{error}");
        assert_eq!(closest_command("/exprt").as_deref(), Some("/export"));
        assert_eq!(closest_command("/zzzzzzzz"), None);
    }

    #[test]
    fn every_command_is_listed_once_with_a_distinct_name() {
        let names: std::collections::HashSet<_> =
            SlashCommand::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), SlashCommand::ALL.len());
        let help = help_text(|_| true);
        assert_eq!(help.lines().count(), SlashCommand::ALL.len());
        assert!(help.contains("/approve    ask|auto|never how tool calls are approved"));
        let editor = help_text(SlashCommand::in_editor);
        assert!(editor.contains("/compact") && !editor.contains("/quit"));
    }
}
