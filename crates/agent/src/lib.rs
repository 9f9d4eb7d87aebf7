//! The agent: the tool-call loop that connects a model (`tether-llm`) to MCP servers
//! (`tether-mcp`), the approval policy, prompt-based tool calling for models without native
//! tools, and the conversion of tool results for models. Front ends drive it and render its
//! [`AgentEvent`]s; it never prints.

pub mod agent;
pub mod approval;
pub mod attachments;
pub mod context;
pub mod prompt_mode;
pub mod results;
pub mod sampling;

pub use agent::{
    Agent, AgentError, AgentEvent, AgentOptions, ApprovalRequest, Approver, NonInteractive,
    ToolMode, TurnOutcome, tool_definitions,
};
pub use approval::{ApprovalMode, ApprovalRules, Decision, decide};
pub use attachments::{Mention, attach_resources, resource_updates};
pub use sampling::{answer_sampling, describe_sampling};
