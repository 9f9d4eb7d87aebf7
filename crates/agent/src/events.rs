//! The events a session reports, in one serde enum that **is** the `--json` schema: every
//! front end (terminal, `run --json`, the editor over ACP) renders these and nothing else.
//! The schema is versioned by [`EVENT_SCHEMA_VERSION`]; a change that renames or removes a
//! field raises it.

use serde::{Deserialize, Serialize};
use serde_json::Value;
pub use tether_catalog::PermissionOption;
use tether_protocol::chat::{Message, Usage};
use tether_protocol::{ContentBlock, QualifiedTool, ToolAnnotations};

/// The version of the event schema, sent in [`AgentEvent::SessionStarted`].
pub const EVENT_SCHEMA_VERSION: u32 = 2;

/// What the loop reports as it goes; front ends render these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The session is ready: the first event of a session.
    SessionStarted {
        /// [`EVENT_SCHEMA_VERSION`].
        schema_version: u32,
        /// The model that answers.
        model: String,
        /// Servers that started.
        servers: Vec<String>,
        /// Tools in the catalogue.
        tools: usize,
    },
    /// A turn began (the user's input was taken).
    TurnStarted {
        /// Turns so far in this session, this one included.
        turn: u64,
    },
    /// More answer text.
    TextDelta {
        /// The text.
        text: String,
    },
    /// More of the model's visible reasoning, where the provider streams it.
    ThoughtDelta {
        /// The text.
        text: String,
    },
    /// The model asked for a tool call; it is being checked (and may need permission).
    ToolCallPending {
        /// Call id.
        id: String,
        /// Qualified tool name.
        name: String,
        /// What a person reads: the tool's title and server.
        title: String,
        /// What the call does, from its annotations and name.
        kind: ToolKind,
        /// Arguments as the model sent them (`null` when they are not JSON).
        arguments: Value,
    },
    /// A person is asked whether a call may run; answer with a decision op naming
    /// `request_id`.
    PermissionRequested {
        /// The question's id.
        request_id: String,
        /// The call it is about.
        call_id: String,
        /// Qualified tool name.
        name: String,
        /// What a person reads.
        title: String,
        /// What the call does.
        kind: ToolKind,
        /// Arguments.
        arguments: Value,
        /// The answers offered.
        options: Vec<PermissionOption>,
    },
    /// A server asks a person for input (MCP elicitation); answer with an answer op.
    ElicitationRequested {
        /// The question's id.
        request_id: String,
        /// The server asking.
        server: String,
        /// The call in flight on that server when it asked, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// What it asks.
        message: String,
        /// The form's JSON schema (form mode).
        #[serde(skip_serializing_if = "Option::is_none")]
        schema: Option<Value>,
        /// The page to visit (URL mode).
        #[serde(skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
    /// A server asks to use the model (MCP sampling); answer with a decision op.
    SamplingRequested {
        /// The question's id.
        request_id: String,
        /// The server asking.
        server: String,
        /// The call in flight on that server when it asked, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        /// The request as a person reads it.
        summary: String,
        /// The answers offered.
        options: Vec<PermissionOption>,
    },
    /// A tool call is about to run (after checks and approval).
    ToolCallStarted {
        /// Call id.
        id: String,
        /// Qualified tool name.
        name: String,
        /// Arguments as parsed.
        arguments: Value,
    },
    /// A tool call finished or was refused.
    ToolCallFinished {
        /// Call id.
        id: String,
        /// Qualified tool name.
        name: String,
        /// Whether it failed.
        is_error: bool,
        /// What the model was told (truncated for display by front ends).
        result: String,
        /// The result's content blocks as the server sent them (images included); empty for
        /// calls that never reached a server.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        content: Vec<ContentBlock>,
        /// The result's `structuredContent`.
        #[serde(skip_serializing_if = "Option::is_none")]
        structured_content: Option<Value>,
        /// Wall time of the call.
        duration_ms: u64,
    },
    /// A server reported progress on a running call.
    ToolProgress {
        /// Call id.
        id: String,
        /// Qualified tool name.
        name: String,
        /// Progress so far.
        progress: f64,
        /// The total, when known.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What the server is doing.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// For a call the server runs as a task: the task and its status.
        #[serde(skip_serializing_if = "Option::is_none")]
        task: Option<tether_mcp::TaskState>,
    },
    /// Token counts of one model call.
    Usage {
        /// Counts.
        usage: Usage,
    },
    /// A message was added to the conversation (for front ends that save it as it happens).
    MessageAdded {
        /// The message.
        message: Message,
    },
    /// Tools were loaded into the conversation (search mode): pre-selected for the user's
    /// message, found by the model's `search_tools` call, or offered in place of a
    /// pre-selected tool whose call failed.
    ToolsLoaded {
        /// Qualified names, in load order.
        names: Vec<String>,
        /// `"preselected"`, `"search"` or `"after a failed call"`.
        reason: String,
        /// The search query, for searches.
        #[serde(skip_serializing_if = "Option::is_none")]
        query: Option<String>,
    },
    /// Something the user should know (a retry, a mode switch, a server that failed).
    Notice {
        /// One line.
        message: String,
    },
    /// A server went away and was started again.
    ServerRestarted {
        /// Its config name.
        server: String,
        /// Restarts of this server so far in this run.
        restarts: u32,
        /// Why the previous session ended.
        reason: String,
    },
    /// The turn is over: the last event of a turn.
    TurnEnded {
        /// Why it ended.
        stop_reason: StopReason,
        /// The answer, or what stopped it.
        text: String,
        /// Model calls made.
        steps: usize,
        /// Tokens used over the turn.
        usage: Usage,
    },
    /// The model changed (an accepted `set_model` op); later turns use it.
    ModelChanged {
        /// The `provider:model` spec now in use.
        model: String,
    },
    /// The conversation was replaced as a whole (a `clear`, `compact` or
    /// `replace_conversation` op): what the model sees from the next turn on.
    ConversationReplaced {
        /// The conversation now, in order.
        messages: Vec<Message>,
        /// One line saying what happened, for a person.
        note: String,
    },
    /// An op could not be carried out (unknown question id, a prompt while a turn runs, a
    /// line of input that is not an op).
    OpRejected {
        /// Why, in one line.
        message: String,
    },
    /// The session is over: the last event of a session, with the whole conversation.
    SessionEnded {
        /// Every message of the session, in order (the system prompt is not among them).
        messages: Vec<Message>,
    },
}

impl AgentEvent {
    /// The one line a terminal shows for a restart.
    pub fn restart_line(server: &str, restarts: u32, reason: &str) -> String {
        format!("server \"{server}\" restarted (restart {restarts}) after {reason}")
    }

    /// The line a person reads for a notice or a restart; `None` for other events.
    pub fn notice_line(&self) -> Option<String> {
        match self {
            AgentEvent::Notice { message } => Some(message.clone()),
            AgentEvent::ServerRestarted {
                server,
                restarts,
                reason,
            } => Some(AgentEvent::restart_line(server, *restarts, reason)),
            _ => None,
        }
    }
}

/// Why a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered.
    EndTurn,
    /// The model hit its output token limit.
    MaxTokens,
    /// `--max-steps` model calls were made while it still called tools.
    MaxSteps,
    /// The same failing call was repeated.
    RepeatedFailure,
    /// The provider refused to answer.
    Refusal,
    /// The person interrupted it.
    Cancelled,
    /// The model failed (after retries).
    Error,
}

/// What a tool call does, as an editor shows it (ACP's tool kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// Reads without changing anything.
    Read,
    /// Changes something.
    Edit,
    /// Removes something.
    Delete,
    /// Runs a command or code.
    Execute,
    /// Reads from the network.
    Fetch,
    /// Looks things up.
    Search,
    /// None of those, or unknown.
    Other,
}

impl ToolKind {
    /// The kind of a call to `tool`: its annotations first (a server's statement), then words
    /// in its name.
    pub fn of(tool: &QualifiedTool) -> ToolKind {
        ToolKind::from_parts(&tool.tool.name, &tool.tool.annotations)
    }

    /// The kind of a tool named `name` with `annotations`.
    pub fn from_parts(name: &str, annotations: &ToolAnnotations) -> ToolKind {
        let name = name.to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| name.contains(w));
        if annotations.destructive_hint == Some(true) && has(&["delete", "remove", "rm", "drop"]) {
            return ToolKind::Delete;
        }
        if has(&["search", "find", "query", "grep", "lookup"]) {
            return ToolKind::Search;
        }
        if has(&["fetch", "http", "url", "download", "browse"]) {
            return ToolKind::Fetch;
        }
        if has(&["exec", "run", "shell", "command", "eval", "bash"]) {
            return ToolKind::Execute;
        }
        if annotations.read_only_hint == Some(true)
            || has(&["read", "get", "list", "show", "describe"])
        {
            return ToolKind::Read;
        }
        if annotations.destructive_hint == Some(true) || has(&["delete", "remove"]) {
            return ToolKind::Delete;
        }
        if has(&[
            "write", "edit", "create", "update", "move", "rename", "set", "add",
        ]) {
            return ToolKind::Edit;
        }
        ToolKind::Other
    }
}

/// The title a person reads for a call to `tool`: its title, or its name, and its server.
pub fn tool_title(tool: &QualifiedTool) -> String {
    let title = tool
        .tool
        .annotations
        .title
        .as_deref()
        .or(tool.tool.title.as_deref())
        .unwrap_or(&tool.tool.name);
    format!("{title} ({})", tool.server)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::Tool;

    fn tool(name: &str, annotations: ToolAnnotations) -> QualifiedTool {
        QualifiedTool {
            qualified_name: format!("s__{name}"),
            server: "s".into(),
            tool: Tool {
                name: name.into(),
                title: None,
                description: None,
                input_schema: serde_json::json!({"type": "object"}),
                output_schema: None,
                annotations,
                execution: None,
                icons: None,
                meta: None,
            },
        }
    }

    #[test]
    fn kinds_come_from_annotations_then_names() {
        let read_only = ToolAnnotations {
            read_only_hint: Some(true),
            ..ToolAnnotations::default()
        };
        let destructive = ToolAnnotations {
            destructive_hint: Some(true),
            ..ToolAnnotations::default()
        };
        let none = ToolAnnotations::default();
        assert_eq!(
            ToolKind::of(&tool("get-sum", read_only.clone())),
            ToolKind::Read
        );
        assert_eq!(ToolKind::of(&tool("zap", read_only)), ToolKind::Read);
        assert_eq!(
            ToolKind::of(&tool("delete_file", destructive.clone())),
            ToolKind::Delete
        );
        assert_eq!(ToolKind::of(&tool("zap", destructive)), ToolKind::Delete);
        assert_eq!(
            ToolKind::of(&tool("search_files", none.clone())),
            ToolKind::Search
        );
        assert_eq!(ToolKind::of(&tool("fetch", none.clone())), ToolKind::Fetch);
        assert_eq!(
            ToolKind::of(&tool("run_command", none.clone())),
            ToolKind::Execute
        );
        assert_eq!(
            ToolKind::of(&tool("write_file", none.clone())),
            ToolKind::Edit
        );
        assert_eq!(ToolKind::of(&tool("echo", none)), ToolKind::Other);
    }

    #[test]
    fn events_serialise_with_snake_case_tags() {
        let event = AgentEvent::TurnEnded {
            stop_reason: StopReason::MaxSteps,
            text: "stopped".into(),
            steps: 2,
            usage: Usage::default(),
        };
        let wire = serde_json::to_value(&event).unwrap();
        assert_eq!(wire["type"], "turn_ended");
        assert_eq!(wire["stop_reason"], "max_steps");
    }
}
