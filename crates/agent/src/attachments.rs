//! Resources in the conversation: `@server:uri` in a user message attaches that resource's
//! content, the server is asked to report changes to it, and changed resources are re-read
//! into the conversation before the next model request.

use tether_mcp::{McpError, ServerRegistry};
use tether_protocol::ResourceContents;
use tether_protocol::chat::Message;

/// One `@server:uri` mention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// The server's config name.
    pub server: String,
    /// The resource URI.
    pub uri: String,
}

/// The `@server:uri` mentions in `text` that name one of `servers`. Trailing punctuation
/// that ends a sentence is not part of the URI.
pub fn mentions(text: &str, servers: &[&str]) -> Vec<Mention> {
    let mut found = Vec::new();
    for word in text.split_whitespace() {
        let Some(rest) = word.strip_prefix('@') else {
            continue;
        };
        let Some((server, uri)) = rest.split_once(':') else {
            continue;
        };
        let uri = uri.trim_end_matches(['.', ',', ';', '!', '?', ')']);
        if uri.is_empty() || !servers.contains(&server) {
            continue;
        }
        let mention = Mention {
            server: server.to_string(),
            uri: uri.to_string(),
        };
        if !found.contains(&mention) {
            found.push(mention);
        }
    }
    found
}

/// The text a model sees for a resource's contents.
pub fn contents_text(contents: &[ResourceContents]) -> String {
    contents
        .iter()
        .map(|c| match (&c.text, &c.blob) {
            (Some(text), _) => text.clone(),
            (None, Some(blob)) => format!(
                "[binary {}, {} base64 characters]",
                c.mime_type.as_deref().unwrap_or("data"),
                blob.len()
            ),
            (None, None) => String::new(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn wrap(mention: &Mention, body: &str) -> String {
    format!(
        "<resource server=\"{}\" uri=\"{}\">\n{body}\n</resource>",
        mention.server, mention.uri
    )
}

/// Reads every resource `text` mentions and returns the user message with their contents
/// appended, subscribing to changes where the server offers it. A resource that cannot be
/// read is an error naming it: the user asked for it by name.
pub async fn attach_resources(
    registry: &ServerRegistry,
    text: &str,
) -> Result<(String, Vec<Mention>), McpError> {
    let names: Vec<&str> = registry.connections().map(|c| c.name()).collect();
    let found = mentions(text, &names);
    let mut message = text.to_string();
    for mention in &found {
        let connection = registry.connection(&mention.server)?;
        let contents = connection.read_resource(&mention.uri).await?;
        message.push_str("\n\n");
        message.push_str(&wrap(mention, &contents_text(&contents)));
        if connection.summary().has_capability("resources.subscribe")
            && let Err(error) = connection.subscribe(&mention.uri).await
        {
            tracing::debug!("not watching {}: {error}", mention.uri);
        }
    }
    Ok((message, found))
}

/// Re-reads resources servers reported changed and returns one user message per change,
/// for the conversation before the next model request.
pub async fn resource_updates(registry: &ServerRegistry) -> Vec<(Mention, Message)> {
    let mut messages = Vec::new();
    for connection in registry.connections() {
        for uri in connection.take_updated() {
            let mention = Mention {
                server: connection.name().to_string(),
                uri,
            };
            let body = match connection.read_resource(&mention.uri).await {
                Ok(contents) => contents_text(&contents),
                Err(error) => format!("(could not re-read it: {error})"),
            };
            let message = Message::user(format!(
                "[update] The resource {} on server \"{}\" changed. Its content now:\n{}",
                mention.uri,
                mention.server,
                wrap(&mention, &body)
            ));
            messages.push((mention, message));
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_need_a_known_server_and_drop_sentence_punctuation() {
        let servers = ["everything", "files"];
        let found = mentions(
            "Compare @everything:demo://resource/static/document/a.md, with @files:file:///tmp/x. Mail me@example.com @nobody:x://y",
            &servers,
        );
        assert_eq!(
            found,
            vec![
                Mention {
                    server: "everything".into(),
                    uri: "demo://resource/static/document/a.md".into()
                },
                Mention {
                    server: "files".into(),
                    uri: "file:///tmp/x".into()
                },
            ]
        );
    }
}
