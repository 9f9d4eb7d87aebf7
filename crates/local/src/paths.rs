//! Paths a small model may name: when Tether's built-in `read_file` is offered, its `path`
//! argument is narrowed to the files that exist under the working directory (where the
//! built-in server reads), so the grammar cannot produce a name that is not there — a typo in
//! the question still reaches the nearest real file instead of an error.

use std::path::Path;

use serde_json::{Value, json};
use tether_protocol::chat::ToolDefinition;

/// The qualified name of the built-in server's file reader (server "builtin").
const READ_FILE: &str = "builtin__read_file";
/// More files than this and the list would crowd the grammar; the path stays free text.
const MAX_FILES: usize = 64;
/// How deep below the working directory files are listed.
const MAX_DEPTH: usize = 3;
/// Directories never worth offering: build output, dependencies, version control.
const SKIPPED: &[&str] = &[
    "target",
    "node_modules",
    "__pycache__",
    "venv",
    "dist",
    "build",
];

/// The files under `root` a model may name, listed once per request: none unless the
/// built-in `read_file` is offered.
pub fn files_for(tools: &[ToolDefinition], root: &Path) -> Vec<String> {
    if tools.iter().any(|t| t.name == READ_FILE) {
        files_under(root)
    } else {
        Vec::new()
    }
}

/// `tools` with the built-in `read_file`'s `path` limited to `files` (from `files_for`), when
/// there are between one and `MAX_FILES` of them; every other tool unchanged.
pub fn existing_paths_only(tools: &[ToolDefinition], files: &[String]) -> Vec<ToolDefinition> {
    tools
        .iter()
        .map(|tool| {
            let mut tool = tool.clone();
            if tool.name == READ_FILE
                && let Some(path) = tool.parameters.pointer_mut("/properties/path")
                && path.get("type").and_then(Value::as_str) == Some("string")
                && path.get("enum").is_none()
                && !files.is_empty()
                && files.len() <= MAX_FILES
            {
                path["enum"] = json!(files);
            }
            tool
        })
        .collect()
}

/// The ones of `files` that `text` names: by relative path, by file name, or by a file
/// name's stem of four letters or more ("notes.txt", "notes", "shopping" for shopping.md).
pub fn files_named_in(text: &str, files: &[String]) -> Vec<String> {
    let words: Vec<String> = text
        .split(|c: char| !(c.is_alphanumeric() || matches!(c, '.' | '_' | '-' | '/')))
        .map(|w| w.trim_matches('.').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect();
    files
        .iter()
        .filter(|file| {
            let lower = file.to_lowercase();
            let name = lower.rsplit('/').next().unwrap_or(&lower);
            let stem = name.split('.').next().unwrap_or(name);
            words
                .iter()
                .any(|w| *w == lower || *w == name || (stem.chars().count() >= 4 && *w == stem))
        })
        .cloned()
        .collect()
}

/// When `text` names some of `files` and the built-in `read_file` is offered: that tool
/// alone, its path limited to those files. A message that names a file is about that file.
pub fn read_named_files(
    tools: &[ToolDefinition],
    text: &str,
    files: &[String],
) -> Option<Vec<ToolDefinition>> {
    let mut read = tools.iter().find(|t| t.name == READ_FILE)?.clone();
    let named = files_named_in(text, files);
    if named.is_empty() || named.len() > MAX_FILES {
        return None;
    }
    let path = read.parameters.pointer_mut("/properties/path")?;
    path["enum"] = json!(named);
    Some(vec![read])
}

/// Relative paths (`/`-separated, sorted) of the regular files under `root`, up to
/// `MAX_DEPTH` deep, skipping hidden entries and `SKIPPED` directories; stops counting just
/// past `MAX_FILES`.
pub fn files_under(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![(root.to_path_buf(), String::new(), 0usize)];
    while let Some((dir, prefix, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            // Not following links: a link may lead out of the directory.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let relative = format!("{prefix}{name}");
            if kind.is_file() {
                found.push(relative);
                if found.len() > MAX_FILES {
                    return found;
                }
            } else if kind.is_dir() && depth + 1 < MAX_DEPTH && !SKIPPED.contains(&name.as_str()) {
                pending.push((entry.path(), format!("{relative}/"), depth + 1));
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_file() -> ToolDefinition {
        ToolDefinition {
            name: READ_FILE.into(),
            description: "Show what is in a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }
    }

    #[test]
    fn read_file_may_only_name_files_that_exist() {
        let root = std::env::temp_dir().join(format!("tether-paths-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("docs/deep/deeper")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::create_dir_all(root.join("target")).unwrap();
        for file in [
            "notes.txt",
            "docs/plan.md",
            "docs/deep/far.md",
            "docs/deep/deeper/too-far.md",
            ".git/config",
            "target/out.bin",
        ] {
            std::fs::write(root.join(file), "x").unwrap();
        }
        assert_eq!(
            files_under(&root),
            ["docs/deep/far.md", "docs/plan.md", "notes.txt"]
        );
        let other = ToolDefinition {
            name: "files__read_file".into(),
            ..read_file()
        };
        let files = files_for(&[read_file()], &root);
        assert!(files_for(std::slice::from_ref(&other), &root).is_empty());
        let tools = existing_paths_only(&[read_file(), other.clone()], &files);
        assert_eq!(
            tools[0].parameters["properties"]["path"]["enum"],
            json!(["docs/deep/far.md", "docs/plan.md", "notes.txt"])
        );
        assert_eq!(
            tools[1], other,
            "another server's paths are its own business"
        );
        let grammar = crate::grammar::tool_call_grammar(&tools[..1]);
        assert!(grammar.contains(r#""\"notes.txt\"""#), "{grammar}");

        // A message that names a file reads that file.
        assert_eq!(
            files_named_in("What's in notes.txt?", &files),
            ["notes.txt"]
        );
        assert_eq!(files_named_in("show me the plan", &files), ["docs/plan.md"]);
        assert!(files_named_in("hello there", &files).is_empty());
        let narrowed = read_named_files(&[other.clone(), read_file()], "read my notes", &files)
            .expect("notes.txt is named");
        assert_eq!(narrowed.len(), 1);
        assert_eq!(
            narrowed[0].parameters["properties"]["path"]["enum"],
            json!(["notes.txt"])
        );
        assert!(read_named_files(std::slice::from_ref(&other), "read my notes", &files).is_none());

        // Too many files to list: the path stays free.
        for i in 0..=MAX_FILES {
            std::fs::write(root.join(format!("f{i}.txt")), "x").unwrap();
        }
        let tools = existing_paths_only(&[read_file()], &files_for(&[read_file()], &root));
        assert!(
            tools[0].parameters["properties"]["path"]
                .get("enum")
                .is_none()
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
