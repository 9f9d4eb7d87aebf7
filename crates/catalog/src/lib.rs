//! The tool catalogue: the layer between the servers (`tether-mcp`) and everything that uses
//! tools (the agent, the tester commands, the gateway). It holds a live snapshot of every
//! server's tools ([`ToolCatalog`]), ranks them for a query ([`search`], and by meaning with
//! [`semantic`] when an encoder is given), decides which tools
//! a model is offered and what its calls stand for ([`ToolSelection`], one implementation per
//! `--tools` mode), and owns the approval policy and the tool pins so every front end enforces
//! the same rules.

mod arithmetic;
pub mod catalog;
mod facts;
mod intent;
pub mod permission;
pub mod pins;
pub mod policy;
pub mod routing;
pub mod search;
pub mod selection;
pub mod semantic;
pub mod shortlist;
mod values;

pub use catalog::{
    Refresh, ServerTools, Snapshot, ToolCatalog, definition, estimate_tokens, one_line,
    schema_problems,
};
pub use permission::{PermissionDecision, PermissionOption, StandingAnswers};
pub use pins::{PinBook, PinError, PinReport};
pub use policy::{ApprovalMode, ApprovalRules, Decision, Hints, decide};
pub use search::{Hit, Lexical, Ranking, SearchIndex};
pub use selection::{
    AllTools, AutoTools, META_TOOL, MetaTool, Resolved, SEARCH_TOOL, SMALL_MODEL_PRELOAD_MARGIN,
    SearchTools, SelectionMode, SelectionOptions, ToolSelection, selection_for, tokens_per_mode,
};
pub use semantic::{SemanticRanker, TextEncoder, tool_text};
