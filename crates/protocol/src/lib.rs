//! Tether's own plain data types: what a tool, a tool result, a resource, a prompt and a
//! connected server look like to every crate above the MCP layer.
//!
//! These types follow the MCP wire shape (camelCase JSON) so that converting from the
//! protocol library is a lossless serde round trip, but they belong to us: no crate outside
//! `tether-mcp` ever sees an `rmcp` type, and this crate depends on nothing but serde. It does
//! no I/O and knows no async runtime.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The optional hints a server attaches to a tool. Absent means "not said", which the
/// approval policy treats as the cautious default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolAnnotations {
    /// A human-readable title from the annotations (older servers put it here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The tool does not modify its environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// The tool may perform destructive updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// Calling the tool twice with the same arguments has no further effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// The tool talks to an open world of external entities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// True when no hint at all is set, so printers can skip the section.
    pub fn is_empty(&self) -> bool {
        self == &ToolAnnotations::default()
    }
}

/// A tool as the server described it, in MCP's wire shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    /// The tool's name on its own server.
    pub name: String,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for people and models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    #[serde(default = "empty_object_schema")]
    pub input_schema: Value,
    /// JSON Schema of `structuredContent`, when the tool promises one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    #[serde(default, skip_serializing_if = "ToolAnnotations::is_empty")]
    pub annotations: ToolAnnotations,
    /// How the tool runs (MCP 2025-11-25): whether it may or must run as a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<ToolExecution>,
    /// Icons for a person's eye (MCP 2025-11-25), passed on unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Value>>,
    /// The server's `_meta` (extensions such as MCP Apps' `ui`), passed on unchanged.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// A tool's `execution` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolExecution {
    /// `forbidden` (the default), `optional` or `required`: whether the tool may be called
    /// as a task, and must be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_support: Option<String>,
}

fn empty_object_schema() -> Value {
    serde_json::json!({"type": "object"})
}

/// The MCP Apps extension's identifier, as clients declare it under `extensions`.
pub const MCP_APPS_EXTENSION: &str = "io.modelcontextprotocol/ui";

impl Tool {
    /// Whether a model may be offered this tool: not when MCP Apps' `_meta.ui.visibility`
    /// names who may call it and the model is not among them (`["app"]`: the app's own view
    /// calls it).
    pub fn for_model(&self) -> bool {
        match self
            .meta
            .as_ref()
            .and_then(|m| m.get("ui"))
            .and_then(|ui| ui.get("visibility"))
            .and_then(Value::as_array)
        {
            Some(visibility) => visibility.iter().any(|v| v == "model"),
            None => true,
        }
    }

    /// The `ui://` resource of an MCP Apps tool, when it has one.
    pub fn app_resource(&self) -> Option<&str> {
        self.meta.as_ref()?.get("ui")?.get("resourceUri")?.as_str()
    }

    /// Whether the server runs this tool only as a task (`execution.taskSupport: required`).
    pub fn requires_task(&self) -> bool {
        self.execution
            .as_ref()
            .and_then(|e| e.task_support.as_deref())
            == Some("required")
    }

    /// The best name to show a person: the title, else the annotation title, else the name.
    pub fn display_title(&self) -> &str {
        self.title
            .as_deref()
            .or(self.annotations.title.as_deref())
            .unwrap_or(&self.name)
    }
}

/// A tool together with where it lives and the name the model calls it by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QualifiedTool {
    /// Provider-safe name, unique across all servers (`server__tool`, or hashed).
    pub qualified_name: String,
    /// The server that owns the tool.
    pub server: String,
    /// The tool as its server described it.
    #[serde(flatten)]
    pub tool: Tool,
}

/// The contents of a resource: text or a base64 blob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    /// The resource's URI.
    pub uri: String,
    /// MIME type when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Base64-encoded binary contents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

/// One block of content in a tool result or a prompt message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// Base64 data.
        data: String,
        /// For example `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio, base64-encoded.
    Audio {
        /// Base64 data.
        data: String,
        /// For example `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A link to a resource the client may read.
    ResourceLink(Box<ResourceLink>),
    /// A resource embedded in the result.
    Resource {
        /// The embedded contents.
        resource: ResourceContents,
    },
}

/// A resource as listed by a server, or linked from a tool result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLink {
    /// The resource's URI.
    pub uri: String,
    /// Its programmatic name.
    #[serde(default)]
    pub name: String,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Size in bytes when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Audience and priority hints, passed on unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// Icons for a person's eye (MCP 2025-11-25), passed on unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Value>>,
    /// The server's `_meta` (extensions such as MCP Apps' `ui`), passed on unchanged.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// A resource listed by a server (same shape as a link).
pub type Resource = ResourceLink;

/// A parameterised family of resources (RFC 6570 URI template).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplate {
    /// The URI template, e.g. `demo://resource/dynamic/text/{id}`.
    pub uri_template: String,
    /// Its programmatic name.
    #[serde(default)]
    pub name: String,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// MIME type when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Audience and priority hints, passed on unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
    /// Icons for a person's eye (MCP 2025-11-25), passed on unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Value>>,
    /// The server's `_meta` (extensions such as MCP Apps' `ui`), passed on unchanged.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// What a tool call returned.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// Unstructured content blocks, in order.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Structured output, validated by the server against its output schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
    /// The tool itself reported failure (as opposed to a protocol error).
    #[serde(default)]
    pub is_error: bool,
}

/// One argument a prompt accepts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptArgument {
    /// Argument name.
    pub name: String,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the prompt needs it.
    #[serde(default)]
    pub required: bool,
}

/// A prompt template offered by a server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Prompt {
    /// Prompt name.
    pub name: String,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Arguments it accepts.
    #[serde(default)]
    pub arguments: Vec<PromptArgument>,
    /// Icons for a person's eye (MCP 2025-11-25), passed on unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icons: Option<Vec<Value>>,
    /// The server's `_meta` (extensions such as MCP Apps' `ui`), passed on unchanged.
    #[serde(default, rename = "_meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<Map<String, Value>>,
}

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The person.
    User,
    /// The model.
    Assistant,
}

/// One message of an expanded prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptMessage {
    /// Speaker.
    pub role: Role,
    /// What is said.
    pub content: ContentBlock,
}

/// A prompt expanded with its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptResult {
    /// Description from the server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages, in order.
    pub messages: Vec<PromptMessage>,
}

/// Which protocol era a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtocolEra {
    /// 2025-11-25 and earlier: `initialize` handshake, sessions.
    Legacy,
    /// 2026-07-28 and later: stateless, `server/discover`.
    Modern,
}

/// What we learned about a server when connecting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerSummary {
    /// Implementation name the server reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation: Option<String>,
    /// Implementation version the server reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Negotiated protocol version, e.g. `2025-11-25`.
    pub protocol_version: String,
    /// Era of that version.
    pub era: ProtocolEra,
    /// Capability names the server declared (`tools`, `resources`, `prompts`, `logging`, …),
    /// with sub-flags such as `resources.subscribe`.
    pub capabilities: Vec<String>,
    /// Instructions for the model, if the server gave any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

impl ServerSummary {
    /// Whether the server declared a top-level capability such as `tools`.
    pub fn has_capability(&self, name: &str) -> bool {
        self.capabilities.iter().any(|c| c == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn content_blocks_round_trip_the_wire_shape() {
        let wire = json!([
            {"type": "text", "text": "hi"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource_link", "uri": "file:///a", "name": "a", "mimeType": "text/plain"},
            {"type": "resource", "resource": {"uri": "demo://x", "text": "body"}}
        ]);
        let blocks: Vec<ContentBlock> = serde_json::from_value(wire.clone()).unwrap();
        assert!(
            matches!(&blocks[1], ContentBlock::Image { mime_type, .. } if mime_type == "image/png")
        );
        assert!(matches!(&blocks[2], ContentBlock::ResourceLink(l) if l.uri == "file:///a"));
        assert_eq!(serde_json::to_value(&blocks).unwrap(), wire);
    }

    #[test]
    fn tool_defaults_and_display_title() {
        let tool: Tool = serde_json::from_value(json!({
            "name": "add", "annotations": {"title": "Adder", "readOnlyHint": true}
        }))
        .unwrap();
        assert_eq!(tool.display_title(), "Adder");
        assert_eq!(tool.input_schema, json!({"type": "object"}));
        assert_eq!(tool.annotations.read_only_hint, Some(true));
    }
}

/// Conversation types shared by the model providers and the tool-call loop.
pub mod chat {
    use serde::{Deserialize, Serialize};
    use serde_json::Value;

    /// What opens each server's instructions in a system prompt (`Instructions from the
    /// "files" server …`), which come after the prompt's own parts: from the first of them on,
    /// the prompt is the servers' words, which a model answering without tools is not given.
    pub const SERVER_INSTRUCTIONS_OPENING: &str = "\n\nInstructions from the \"";

    /// A tool call the model asked for.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct ToolCall {
        /// The provider's call id; the result message refers to it.
        pub id: String,
        /// The qualified tool name the model used.
        pub name: String,
        /// The arguments exactly as the model wrote them (JSON text, possibly invalid).
        pub arguments: String,
    }

    /// An image passed to a model.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct ImageData {
        /// Base64 data.
        pub data: String,
        /// For example `image/png`.
        pub mime_type: String,
    }

    /// One message of a conversation, in the four roles every provider knows.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "role", rename_all = "snake_case")]
    pub enum Message {
        /// Instructions for the model.
        System {
            /// The text.
            content: String,
        },
        /// The person.
        User {
            /// The text.
            content: String,
        },
        /// The model: text, tool calls, or both.
        Assistant {
            /// The text (may be empty when the model only calls tools).
            content: String,
            /// Calls to run, in order.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            tool_calls: Vec<ToolCall>,
        },
        /// The result of one tool call.
        Tool {
            /// The call this answers.
            tool_call_id: String,
            /// The tool's qualified name.
            name: String,
            /// The result as text.
            content: String,
            /// Images from the result, for providers that accept them.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            images: Vec<ImageData>,
            /// Whether the call failed.
            #[serde(default)]
            is_error: bool,
        },
    }

    impl Message {
        /// A system message.
        pub fn system(content: impl Into<String>) -> Message {
            Message::System {
                content: content.into(),
            }
        }

        /// A user message.
        pub fn user(content: impl Into<String>) -> Message {
            Message::User {
                content: content.into(),
            }
        }

        /// An assistant message with text only.
        pub fn assistant(content: impl Into<String>) -> Message {
            Message::Assistant {
                content: content.into(),
                tool_calls: Vec::new(),
            }
        }
    }

    /// A tool as offered to a model.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct ToolDefinition {
        /// Qualified name (`server__tool`).
        pub name: String,
        /// What it does.
        pub description: String,
        /// JSON Schema of the arguments (root is an object schema).
        pub parameters: Value,
    }

    /// Token counts of one model call, or summed over a run.
    #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Usage {
        /// Prompt tokens.
        pub input_tokens: u64,
        /// Generated tokens.
        pub output_tokens: u64,
    }

    impl std::ops::AddAssign for Usage {
        fn add_assign(&mut self, other: Usage) {
            self.input_tokens += other.input_tokens;
            self.output_tokens += other.output_tokens;
        }
    }
}
