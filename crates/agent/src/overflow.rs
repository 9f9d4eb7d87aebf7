//! Tool results too long to send whole: the model gets the beginning, the whole text is saved
//! to a private file (0600, in a 0700 directory of the data dir), and the model reads on, page
//! by page, with the host's own `read_result` tool, which is offered from the moment a result
//! was cut. Nothing is lost, and the context holds only what the model asks for.

use std::path::Path;

use serde_json::{Value, json};
use tether_protocol::chat::{Message, ToolDefinition};

/// The name of the host's tool that pages through a saved result.
pub const READ_RESULT_TOOL: &str = "read_result";

/// What a cut result's note starts with; also how a conversation is known to have one.
const MARK: &str = "[cut: the result was";

/// The definition offered to the model once a result was cut.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: READ_RESULT_TOOL.into(),
        description: "Reads more of a tool result that was cut short: pass the file named in the result's note and the character offset to start at.".into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "file": {"type": "string", "description": "The file name from the note, like result-0123abcd.txt"},
                "offset": {"type": "integer", "minimum": 0, "description": "Character to start at"}
            },
            "required": ["file", "offset"]
        }),
    }
}

/// Whether any tool result in the conversation was cut and saved.
pub fn any_saved(conversation: &[Message]) -> bool {
    conversation.iter().any(|message| match message {
        Message::Tool { content, .. } => content.contains(MARK),
        _ => false,
    })
}

/// Saves `text` in `dir` and returns what the model reads instead: the first `max_chars`
/// characters and a note with the file and how to read on. `None` when it cannot be saved
/// (the caller then cuts it without the way back).
pub fn save(dir: &Path, text: &str, max_chars: usize) -> Option<String> {
    use std::io::Write;
    tether_mcp::private_files::private_dir(dir).ok()?;
    prune(dir, KEEP_RESULTS_FOR);
    let (mut file, path) = tether_mcp::private_files::create_unique(dir, "result", "txt").ok()?;
    file.write_all(text.as_bytes()).ok()?;
    let name = path.file_name()?.to_string_lossy().into_owned();
    let total = text.chars().count();
    let shown: String = text.chars().take(max_chars).collect();
    Some(format!(
        "{shown}\n{MARK} {total} characters; the first {max_chars} are shown. The whole result is saved as {}; call {READ_RESULT_TOOL} with {{\"file\": \"{name}\", \"offset\": {max_chars}}} to read on]",
        path.display()
    ))
}

/// How long a saved result is kept: long enough to resume a recent conversation and read on,
/// not forever (they hold whatever tools returned).
const KEEP_RESULTS_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 60 * 60);

/// Deletes the saved results in `dir` last written more than `age` ago; only files named as
/// ours (`result-….txt`), and silently: a result that cannot be removed is tried next time.
fn prune(dir: &Path, age: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with("result-") && name.ends_with(".txt")) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| now.duration_since(modified).ok())
            .is_some_and(|elapsed| elapsed > age);
        if old {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Answers a `read_result` call: up to `max_chars` characters of a saved result from the
/// offset, with where to go on. The file must be one of ours: a plain name in `dir`.
pub fn read(dir: &Path, arguments: &Value, max_chars: usize) -> Result<String, String> {
    let name = arguments
        .get("file")
        .and_then(Value::as_str)
        .ok_or("pass \"file\": the file name from the cut result's note")?;
    let name = name.rsplit('/').next().unwrap_or(name);
    let ours = name.starts_with("result-")
        && name.ends_with(".txt")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if !ours {
        return Err(format!(
            "\"{name}\" is not a saved result; pass the file name from the note, like result-0123abcd.txt"
        ));
    }
    let offset = arguments.get("offset").and_then(Value::as_u64).unwrap_or(0);
    let offset = usize::try_from(offset).unwrap_or(usize::MAX);
    let text = std::fs::read_to_string(dir.join(name))
        .map_err(|e| format!("cannot read the saved result {name}: {e}"))?;
    let total = text.chars().count();
    if offset >= total {
        return Err(format!(
            "offset {offset} is past the end: {name} has {total} characters"
        ));
    }
    let page: String = text.chars().skip(offset).take(max_chars).collect();
    let end = offset + page.chars().count();
    let next = if end < total {
        format!("; call {READ_RESULT_TOOL} with offset {end} for more")
    } else {
        "; that is the end".into()
    };
    Ok(format!(
        "{page}\n[characters {offset}–{end} of {total} of {name}{next}]"
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn saving_a_result_prunes_results_older_than_30_days() {
        let dir = std::env::temp_dir().join(format!("tether-prune-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let aged = |name: &str, days: u64| {
            let path = dir.join(name);
            let file = std::fs::File::create(&path).unwrap();
            let then =
                std::time::SystemTime::now() - std::time::Duration::from_secs(days * 24 * 60 * 60);
            file.set_modified(then).unwrap();
            path
        };
        let stale = aged("result-old.txt", 31);
        let recent = aged("result-recent.txt", 29);
        let not_ours = aged("notes.txt", 365);
        assert!(save(&dir, &"x".repeat(50), 10).is_some());
        assert!(!stale.exists(), "a result older than 30 days is removed");
        assert!(recent.exists() && not_ours.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_cut_result_is_saved_and_read_page_by_page() {
        let dir = std::env::temp_dir().join(format!("tether-overflow-{}", std::process::id()));
        let text: String = (0..100).map(|i| format!("line {i:03}\n")).collect();
        let shown = save(&dir, &text, 90).unwrap();
        assert!(shown.starts_with("line 000\n"));
        assert!(shown.contains("[cut: the result was 900 characters; the first 90 are shown."));
        let name = shown
            .split("\"file\": \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .unwrap()
            .to_string();
        let conversation = vec![Message::Tool {
            tool_call_id: "c1".into(),
            name: "t".into(),
            content: shown,
            images: Vec::new(),
            is_error: false,
        }];
        assert!(any_saved(&conversation));
        let page = read(&dir, &json!({"file": name, "offset": 90}), 90).unwrap();
        assert!(page.starts_with("line 010\n"), "{page}");
        assert!(page.contains("characters 90–180 of 900") && page.contains("offset 180"));
        let last = read(&dir, &json!({"file": name, "offset": 810}), 200).unwrap();
        assert!(last.contains("that is the end"));
        // Only our own files, by plain name.
        for file in [
            "../secret.txt",
            "/etc/passwd",
            "result-x/../../y.txt",
            "notes.txt",
        ] {
            let refused = read(&dir, &json!({"file": file, "offset": 0}), 90);
            assert!(refused.is_err(), "{file}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}
