//! Model providers for Tether: the OpenAI-compatible, Anthropic and Ollama wire formats
//! behind one streaming [`Provider`] trait, typed errors that say whether they are retried,
//! and presets for common services. This crate knows HTTP and model wire formats; it knows
//! nothing about MCP.

pub mod anthropic;
pub mod decode;
pub mod error;
pub mod ollama;
pub mod openai;
pub mod presets;
pub mod provider;
pub mod schema;

pub use error::LlmError;
pub use presets::{ProviderOptions, provider_for};
pub use provider::{
    ChatRequest, ChatResponse, EventStream, Provider, ResponseBuilder, RetryPolicy, StopReason,
    StreamEvent, ToolChoice, complete,
};
