//! The agent: the tool-call loop that connects a model (`tether-llm`) to MCP servers
//! (`tether-mcp`), prompt-based tool calling for models without native
//! tools, and the conversion of tool results for models. Front ends drive it and render its
//! [`AgentEvent`]s; it never prints.

pub mod agent;
pub mod attachments;
pub mod compaction;
pub mod context;
pub mod events;
pub mod overflow;
pub mod prompt_mode;
pub mod questions;
pub mod results;
pub mod sampling;
pub mod servers;
pub mod session;
pub mod settings;
mod system_prompt;

pub use agent::{
    Agent, AgentError, AgentOptions, ApprovalRequest, Approver, NonInteractive, ToolMode,
    TurnOutcome,
};
pub use attachments::{Mention, attach_resources, resource_updates};
pub use events::{
    AgentEvent, EVENT_SCHEMA_VERSION, PermissionOption, StopReason, ToolKind, tool_title,
};
pub use questions::{
    Answer, AnswerAction, ModelSlot, PermissionDecision, Questions, SessionApprover, SessionHost,
};
pub use sampling::{answer_sampling, describe_sampling};
pub use servers::ToolServers;
pub use session::{
    InputBlock, ModelSource, Op, Session, SessionHandle, SessionParts, answer_calls_left_open,
    event_channel,
};
pub use settings::{Settings, SettingsError};
pub use tether_catalog::{
    ApprovalMode, ApprovalRules, Decision, SelectionMode, SelectionOptions, ToolCatalog,
    ToolSelection, decide, selection_for,
};
