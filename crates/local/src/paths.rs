//! Paths a small model may name. When Tether's built-in `read_file` is offered, its `path`
//! argument is narrowed to the files that exist under the working directory (where the
//! built-in server reads), so the grammar cannot produce a name that is not there — a typo in
//! the question still reaches the nearest real file instead of an error — and to a file the
//! message writes out that is no typo of one, which the server then says is not there. Another server's
//! path-like parameters (`path`, `file_path`, `directory`, `repo_path`, …) are narrowed the
//! same way to what exists under the working directory, which is where a stdio server started
//! by Tether resolves a relative path, and to any path the message itself writes out: left
//! free, the 135M model invents `/path/to/file.txt` or a URL.

use std::path::Path;

use serde_json::{Value, json};
use tether_protocol::chat::ToolDefinition;

use crate::narrowing::{edit_properties, is_free, words_of};

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

/// What a path-like parameter names.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PathKind {
    /// A file, or a directory (`path`, `file_path`, `source`).
    Any,
    /// A file only (the `path` of a tool that reads or edits).
    File,
    /// A directory only (`directory`, `dir`, `folder`, or the `path` of a tool that lists
    /// or searches).
    Directory,
    /// A version-control repository (`repo_path`, `repository`).
    Repository,
}

/// What the parameter `name` of a string type names, judged by its name.
fn path_kind(name: &str) -> Option<PathKind> {
    let lower = name.to_lowercase();
    if lower.contains("repo") {
        return Some(PathKind::Repository);
    }
    if ["dir", "folder"].iter().any(|w| lower.contains(w)) {
        return Some(PathKind::Directory);
    }
    (lower.ends_with("path") || lower.ends_with("file") || lower.contains("filename"))
        .then_some(PathKind::Any)
}

/// Verbs of tools whose path is a directory (`list_directory`, `search_files`,
/// `directory_tree`) and of tools whose path is a file (`read_text_file`, `edit_file`).
const LISTING: &[&str] = &["list", "search", "find", "tree", "director", "glob"];
const READING: &[&str] = &["read", "head", "tail", "edit", "open", "cat"];

/// What the parameter `name` of the tool `tool` (qualified) names: its own name says, and a
/// bare `path` takes the kind the tool's verb needs: given a file to list, or a directory to
/// read, a server can only fail.
fn kind_in(tool: &str, name: &str) -> Option<PathKind> {
    let kind = path_kind(name)?;
    if kind != PathKind::Any {
        return Some(kind);
    }
    let own = tool.rsplit("__").next().unwrap_or(tool).to_lowercase();
    let words: Vec<&str> = own.split(|c: char| !c.is_alphanumeric()).collect();
    let says = |verbs: &[&str]| words.iter().any(|w| verbs.iter().any(|v| w.starts_with(v)));
    Some(if says(LISTING) {
        PathKind::Directory
    } else if says(READING) {
        PathKind::File
    } else {
        PathKind::Any
    })
}

/// Verbs of tools that name paths that need not exist yet (`write_file`, `create_directory`,
/// `move_file`): narrowed to what exists, they could only overwrite.
const CREATING: &[&str] = &[
    "write", "create", "save", "move", "rename", "copy", "mkdir", "new",
];

/// Whether the tool `name` (qualified) may name a path that does not exist yet.
fn creates_paths(name: &str) -> bool {
    let own = name.rsplit("__").next().unwrap_or(name).to_lowercase();
    CREATING.iter().any(|verb| own.contains(verb))
}

/// Whether some tool of `tools` has a path-like string parameter.
fn takes_paths(tools: &[ToolDefinition]) -> bool {
    tools.iter().any(|tool| {
        tool.parameters["properties"].as_object().is_some_and(|p| {
            p.iter()
                .any(|(name, schema)| is_free_string(schema) && path_kind(name).is_some())
        })
    })
}

fn is_free_string(schema: &Value) -> bool {
    is_free(schema, &["string"])
}

/// What exists under the working directory, for the tools that take paths.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct KnownPaths {
    /// Relative paths of files (see [`files_under`]).
    pub files: Vec<String>,
    /// `.` and the relative paths of directories.
    pub directories: Vec<String>,
    /// The ones of `directories` that hold a `.git`: what a repository parameter may name.
    pub repositories: Vec<String>,
}

/// The paths under `root` a model may name, listed once per request: none unless some
/// offered tool takes a path.
pub fn files_for(tools: &[ToolDefinition], root: &Path) -> KnownPaths {
    if tools.iter().any(|t| t.name == READ_FILE) || takes_paths(tools) {
        entries_under(root)
    } else {
        KnownPaths::default()
    }
}

/// `tools` with their path-like parameters limited to what `known` holds (the built-in
/// `read_file`'s to files, and to the files `text` writes out that are no typo of one; another
/// tool's to files and directories, or directories alone, and to the paths `text` writes out),
/// when there are between one and `MAX_FILES` of them.
pub fn existing_paths_only(
    tools: &[ToolDefinition],
    known: &KnownPaths,
    text: &str,
) -> Vec<ToolDefinition> {
    let written = paths_written_in(text);
    edit_properties(tools, |tool, _, properties| {
        let builtin = tool == READ_FILE;
        if !builtin && creates_paths(tool) {
            return;
        }
        for (name, schema) in properties.iter_mut() {
            if !is_free_string(schema) {
                continue;
            }
            let allowed: Vec<String> = match (builtin, name.as_str(), kind_in(tool, name)) {
                (true, "path", _) => {
                    let mut files = known.files.clone();
                    files.extend(
                        written
                            .iter()
                            .filter(|w| !near_a_file(w, &known.files))
                            .cloned(),
                    );
                    files
                }
                (true, _, _) | (false, _, None) => continue,
                (false, _, Some(PathKind::Repository)) if !known.repositories.is_empty() => {
                    known.repositories.clone()
                }
                (false, _, Some(PathKind::Repository)) => {
                    let mut dirs = known.directories.clone();
                    dirs.extend(written.iter().filter(|w| !w.contains('.')).cloned());
                    dirs
                }
                (false, _, Some(PathKind::Directory)) => directories_meant(known, &written, text),
                (false, _, Some(PathKind::File)) => {
                    let mut files = known.files.clone();
                    files.extend(written.iter().cloned());
                    files
                }
                (false, _, Some(PathKind::Any)) => {
                    let mut any = known.files.clone();
                    any.extend(known.directories.iter().cloned());
                    any.extend(written.iter().cloned());
                    any
                }
            };
            let mut unique: Vec<String> = Vec::new();
            for path in allowed {
                if !unique.contains(&path) {
                    unique.push(path);
                }
            }
            if !unique.is_empty() && unique.len() <= MAX_FILES {
                schema["enum"] = json!(unique);
            }
        }
    })
}

/// Whether `written`, a path a message writes out, ends in a file name with an extension
/// (`notes.txt`, `docs/plan.md`), not a directory (`src/`, `docs/drafts`).
fn names_a_file(written: &str) -> bool {
    written
        .rsplit('/')
        .next()
        .and_then(|name| name.rsplit_once('.'))
        .is_some_and(|(stem, ext)| !stem.is_empty() && !ext.is_empty())
}

/// Whether `written`, a path a message writes out, is one of `files` or a typo of one: the same
/// file name but for case, or within an edit or two of one (one for names under five letters).
/// A name near none of them is no typo: "Read notes.txt" where there is no such file is about
/// that file, and with only `data/pins.json` offered the model read that instead.
fn near_a_file(written: &str, files: &[String]) -> bool {
    let name_of = |path: &str| path.rsplit('/').next().unwrap_or(path).to_lowercase();
    let wanted = name_of(written);
    let allowed = if wanted.chars().count() < 5 { 1 } else { 2 };
    files
        .iter()
        .any(|file| edits_within(&wanted, &name_of(file), allowed))
}

/// Whether `a` becomes `b` with at most `most` insertions, deletions, substitutions or swaps of
/// two neighbouring characters (the optimal string alignment distance, cut off once every
/// alignment costs more).
fn edits_within(a: &str, b: &str, most: usize) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > most {
        return false;
    }
    // Three rows of the distance table: two back (for swaps), the last, and this one.
    let mut before: Vec<usize> = Vec::new();
    let mut last: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        if row.iter().all(|&d| d > most) {
            return false;
        }
        before = std::mem::replace(&mut last, row);
    }
    last[b.len()] <= most
}

/// The directories a directory parameter may name for `text`: those it names (by path or
/// name) and the paths it writes out; when it names none, only the working directory. "Which
/// files are in this folder?" got `docs`, the one subdirectory there, when every directory was
/// offered.
fn directories_meant(known: &KnownPaths, written: &[String], text: &str) -> Vec<String> {
    let mut meant = subdirectories_named_in(text, known);
    meant.extend(written.iter().filter(|w| !w.contains('.')).cloned());
    if meant.is_empty() && known.directories.iter().any(|d| d == ".") {
        meant.push(".".to_string());
    }
    meant
}

/// The subdirectories of the working directory that `text` names (by path or name).
fn subdirectories_named_in(text: &str, known: &KnownPaths) -> Vec<String> {
    let subdirectories: Vec<String> = known
        .directories
        .iter()
        .filter(|d| d.as_str() != ".")
        .cloned()
        .collect();
    files_named_in(text, &subdirectories)
}

/// Paths `text` writes out: words with a `/`, or a name with an extension (`notes.txt`),
/// without the quotes and punctuation around them.
pub(crate) fn paths_written_in(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| "\"'`,;:?!()[]{}<>".contains(c)))
        .map(|w| w.trim_end_matches('.'))
        .filter(|w| {
            w.contains('/')
                || w.rsplit_once('.').is_some_and(|(stem, ext)| {
                    !stem.is_empty()
                        && (1..=5).contains(&ext.len())
                        && ext.chars().all(|c| c.is_ascii_alphanumeric())
                        && ext.chars().any(|c| c.is_ascii_alphabetic())
                })
        })
        .filter(|w| !w.contains("://"))
        .map(str::to_string)
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

/// When `text` names some of `files`, or writes out files that are not there (nor a typo of one
/// that is), and the built-in `read_file` is offered: that tool alone, its path limited to
/// those files. A message that names a file is about that file;
/// but when another server's tool that takes a file or a directory was offered too (the
/// search ranked it for this message: `list_directory_with_sizes` for "how big is
/// notes.txt?"), the model chooses. Tools that take a repository (`git_show`) do not count,
/// nor tools that report a file's properties when the message asks none of them ("what's in
/// docs/plan.md?" is about what it says). A message that asks to note or store something
/// ("Note in memory that Carol is a doctor" beside a `memory.jsonl`) is no request to read.
pub fn read_named_files(
    tools: &[ToolDefinition],
    text: &str,
    files: &[String],
) -> Option<Vec<ToolDefinition>> {
    if asks_to_store(text) {
        return None;
    }
    let builtin = READ_FILE.split("__").next().unwrap_or_default();
    let asks_property = asks_property(text);
    let others_take_files = tools
        .iter()
        .filter(|t| t.name.split("__").next() != Some(builtin))
        .filter(|t| asks_property || !reports_properties(t))
        .any(|t| {
            t.parameters["properties"].as_object().is_some_and(|p| {
                p.iter().any(|(name, schema)| {
                    is_free_string(schema)
                        && !matches!(kind_in(&t.name, name), None | Some(PathKind::Repository))
                })
            })
        });
    if others_take_files {
        return None;
    }
    let mut read = tools.iter().find(|t| t.name == READ_FILE)?.clone();
    let mut named = files_named_in(text, files);
    if named.is_empty() {
        // A file written out that is not here, nor a typo of one that is: still the file the
        // message is about, for the server to say it is not there. Left to choose, the model
        // listed the directory or wrote what such a file might hold.
        named = paths_written_in(text)
            .into_iter()
            .filter(|w| names_a_file(w) && !near_a_file(w, files))
            .collect();
    }
    if named.is_empty() || named.len() > MAX_FILES {
        return None;
    }
    let path = read.parameters.pointer_mut("/properties/path")?;
    path["enum"] = json!(named);
    Some(vec![read])
}

/// Words that, first in a message, ask to store what follows.
const STORING: &[&str] = &[
    "note", "jot", "remember", "record", "store", "save", "write", "add", "append", "log",
];

/// Whether `text` opens by asking to store something ("Note in memory that…", "Remember…").
fn asks_to_store(text: &str) -> bool {
    words_of(text)
        .first()
        .is_some_and(|w| STORING.contains(&w.as_str()))
}

/// Whether `text` asks about a file's properties (its size, when it changed, its
/// permissions) rather than what it says.
fn asks_property(text: &str) -> bool {
    let words = words_of(text);
    let has = |list: &[&str]| words.iter().any(|w| list.contains(&w.as_str()));
    has(PROPERTY_WORDS) || (has(&["when"]) && has(CHANGE_WORDS))
}

/// Whether `tool` reports files' properties (`get_file_info`, `list_directory_with_sizes`).
fn reports_properties(tool: &ToolDefinition) -> bool {
    let name = tool
        .name
        .rsplit("__")
        .next()
        .unwrap_or(&tool.name)
        .to_lowercase();
    ["info", "stat", "metadata", "size"]
        .iter()
        .any(|w| name.contains(w))
}

/// When `text` asks about a file's properties rather than its content (its size, when it was
/// modified or created, its permissions) and a tool that reports them is offered
/// (`get_file_info`, `list_directory_with_sizes`): those tools alone. "When was notes.txt last
/// modified?" was offered `get_file_info` first and the built-in reader beside it, and the
/// small model read the file. The other way round, a message that writes out a file's path
/// and asks none of its properties loses the tools that only report them, when others are
/// offered: "What's in docs/plan.md?" was answered with the file's size and dates.
pub fn property_tools_only(tools: &[ToolDefinition], text: &str) -> Vec<ToolDefinition> {
    let reporting = tools.iter().filter(|t| reports_properties(t)).count();
    if reporting == 0 {
        return tools.to_vec();
    }
    if asks_property(text) {
        return tools
            .iter()
            .filter(|t| reports_properties(t))
            .cloned()
            .collect();
    }
    if !paths_written_in(text).is_empty() && reporting < tools.len() {
        return tools
            .iter()
            .filter(|t| !reports_properties(t))
            .cloned()
            .collect();
    }
    tools.to_vec()
}

/// A message naming a subdirectory that exists ("what's in the docs folder?") is about that
/// directory: when an offered tool takes a directory, the tools that take no arguments at all
/// (`list_allowed_directories`) go, since they cannot be told which. The small model chose
/// the list of allowed directories over `list_directory` for that question.
pub fn named_directory_tools_only(
    tools: &[ToolDefinition],
    known: &KnownPaths,
    text: &str,
) -> Vec<ToolDefinition> {
    let takes_directory = |tool: &ToolDefinition| {
        tool.parameters["properties"].as_object().is_some_and(|p| {
            p.iter().any(|(name, schema)| {
                is_free_string(schema)
                    && matches!(
                        kind_in(&tool.name, name),
                        Some(PathKind::Directory | PathKind::Any)
                    )
            })
        })
    };
    let takes_nothing = |tool: &ToolDefinition| {
        tool.parameters["properties"]
            .as_object()
            .is_none_or(serde_json::Map::is_empty)
    };
    if subdirectories_named_in(text, known).is_empty()
        || !tools.iter().any(takes_directory)
        || tools.iter().all(takes_nothing)
    {
        return tools.to_vec();
    }
    tools
        .iter()
        .filter(|t| !takes_nothing(t))
        .cloned()
        .collect()
}

/// Words that ask about a file's properties, not what it says.
const PROPERTY_WORDS: &[&str] = &[
    "size",
    "sizes",
    "big",
    "bigger",
    "biggest",
    "large",
    "larger",
    "largest",
    "bytes",
    "modified",
    "created",
    "permissions",
    "permission",
    "owner",
    "timestamp",
];

/// Words that, after "when", ask when a file last changed.
const CHANGE_WORDS: &[&str] = &[
    "changed", "edited", "updated", "saved", "written", "touched",
];

/// The files under `root` (see [`files_under`]), and `.` with the directories that hold them.
pub fn entries_under(root: &Path) -> KnownPaths {
    let files = files_under(root);
    let mut directories = vec![".".to_string()];
    for file in &files {
        let mut parts: Vec<&str> = file.split('/').collect();
        parts.pop();
        for depth in 1..=parts.len() {
            let dir = parts[..depth].join("/");
            if !directories.contains(&dir) {
                directories.push(dir);
            }
        }
    }
    // Hidden entries are not listed, so a repository is known by its `.git` (a directory,
    // or a file in a worktree or submodule).
    let repositories = directories
        .iter()
        .filter(|dir| root.join(dir).join(".git").exists())
        .cloned()
        .collect();
    KnownPaths {
        files,
        directories,
        repositories,
    }
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
    fn parameters_are_told_apart_by_their_names() {
        assert_eq!(path_kind("path"), Some(PathKind::Any));
        assert_eq!(path_kind("file_path"), Some(PathKind::Any));
        assert_eq!(path_kind("repo_path"), Some(PathKind::Repository));
        assert_eq!(path_kind("directory"), Some(PathKind::Directory));
        assert_eq!(path_kind("query"), None);
        assert_eq!(path_kind("timezone"), None);
        // A bare `path` takes the kind its tool's verb needs.
        assert_eq!(
            kind_in("fs__list_directory", "path"),
            Some(PathKind::Directory)
        );
        assert_eq!(
            kind_in("fs__search_files", "path"),
            Some(PathKind::Directory)
        );
        assert_eq!(kind_in("fs__read_text_file", "path"), Some(PathKind::File));
        assert_eq!(kind_in("fs__get_file_info", "path"), Some(PathKind::Any));
        assert_eq!(
            kind_in("fs__read_file", "directory"),
            Some(PathKind::Directory)
        );
        assert!(creates_paths("filesystem__write_file"));
        assert!(creates_paths("filesystem__create_directory"));
        assert!(!creates_paths("filesystem__read_text_file"));
        assert!(!creates_paths("git__git_status"));
        assert_eq!(
            paths_written_in("Show me 'docs/plan.md', notes.txt and https://x.io/a. Version 1.5?"),
            ["docs/plan.md", "notes.txt"]
        );
    }

    #[test]
    fn a_question_about_a_files_properties_goes_to_a_tool_that_reports_them() {
        let info = ToolDefinition {
            name: "files__get_file_info".into(),
            ..read_file()
        };
        let offered = [info.clone(), read_file()];
        for asked in [
            "When was notes.txt last modified?",
            "how big is shopping.md?",
            "when was the plan last edited?",
        ] {
            let kept = property_tools_only(&offered, asked);
            assert_eq!(kept.len(), 1, "{asked}");
            assert_eq!(kept[0].name, info.name, "{asked}");
        }
        // A file's path and no property asked: what it says, so not the reporter.
        assert_eq!(
            property_tools_only(&offered, "what's in docs/plan.md?"),
            [read_file()]
        );
        // No path written: the model chooses.
        assert_eq!(
            property_tools_only(&offered, "what's in my notes?").len(),
            2
        );
        // Without a tool that reports properties, the reader stays.
        assert_eq!(
            property_tools_only(&[read_file()], "how big is notes.txt?"),
            [read_file()]
        );
    }

    #[test]
    fn a_named_folder_is_not_asked_of_a_tool_that_takes_nothing() {
        let list = ToolDefinition {
            name: "fs__list_directory".into(),
            ..read_file()
        };
        let allowed = ToolDefinition {
            name: "fs__list_allowed_directories".into(),
            description: "List the directories this server may use.".into(),
            parameters: json!({"type": "object", "properties": {}}),
        };
        let known = KnownPaths {
            files: vec!["docs/plan.md".into()],
            directories: vec![".".into(), "docs".into()],
            repositories: Vec::new(),
        };
        let offered = [allowed.clone(), list.clone()];
        assert_eq!(
            named_directory_tools_only(&offered, &known, "What's in the docs folder?"),
            std::slice::from_ref(&list)
        );
        // No folder named, or none that exists: the model chooses.
        for asked in ["Which folders may you use?", "What's in the src folder?"] {
            assert_eq!(
                named_directory_tools_only(&offered, &known, asked).len(),
                2,
                "{asked}"
            );
        }
        // Nothing offered takes a directory: nothing goes.
        assert_eq!(
            named_directory_tools_only(std::slice::from_ref(&allowed), &known, "the docs folder")
                .len(),
            1
        );
    }

    #[test]
    fn typos_are_told_from_other_names() {
        assert!(edits_within("notse.txt", "notes.txt", 1));
        assert!(edits_within("note.txt", "notes.txt", 1));
        assert!(edits_within("nots.txt", "notes.txt", 2));
        assert!(!edits_within("todo.txt", "notes.txt", 2));
        assert!(!edits_within("pins.json", "notes.txt", 2));
        assert!(edits_within("", "ab", 2));
        assert!(!edits_within("", "abc", 2));
        assert!(edits_within("same", "same", 0));
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
            name: "files__get_file_info".into(),
            ..read_file()
        };
        let known = files_for(&[read_file()], &root);
        let files = known.files.clone();
        assert_eq!(known.directories, [".", "docs", "docs/deep"]);
        assert_eq!(known.repositories, ["."]);
        let unrelated = ToolDefinition {
            name: "calc__add".into(),
            description: "Add".into(),
            parameters: json!({"type": "object", "properties": {"a": {"type": "number"}}}),
        };
        assert_eq!(
            files_for(std::slice::from_ref(&unrelated), &root),
            KnownPaths::default()
        );
        let tools = existing_paths_only(&[read_file(), other.clone()], &known, "read it");
        assert_eq!(
            tools[0].parameters["properties"]["path"]["enum"],
            json!(["docs/deep/far.md", "docs/plan.md", "notes.txt"])
        );
        // A file the message names that is not there: offered too, for the server to say so,
        // unless it is a typo of one that is.
        for (text, extra) in [
            ("Read todo.txt", Some("todo.txt")),
            ("Read docs/missing.md please", Some("docs/missing.md")),
            ("Read notse.txt", None),
            ("Read Notes.TXT", None),
            ("Read plan.md", None),
        ] {
            let tools = existing_paths_only(&[read_file()], &known, text);
            let mut expected = files.clone();
            expected.extend(extra.map(str::to_string));
            assert_eq!(
                tools[0].parameters["properties"]["path"]["enum"],
                json!(expected),
                "{text}"
            );
        }
        // Another server's path may name a file or a directory that exists here, or what the
        // message writes out.
        let tools = existing_paths_only(
            std::slice::from_ref(&other),
            &known,
            "read /etc/hosts please",
        );
        assert_eq!(
            tools[0].parameters["properties"]["path"]["enum"],
            json!([
                "docs/deep/far.md",
                "docs/plan.md",
                "notes.txt",
                ".",
                "docs",
                "docs/deep",
                "/etc/hosts"
            ])
        );
        // A tool that reads names a file; one that lists, a directory; a repository
        // parameter, a directory holding `.git`.
        let reader = ToolDefinition {
            name: "files__read_text_file".into(),
            ..read_file()
        };
        let lister = ToolDefinition {
            name: "files__list_directory".into(),
            ..read_file()
        };
        let git = ToolDefinition {
            name: "git__git_status".into(),
            description: "Shows the working tree status".into(),
            parameters: json!({"type": "object", "properties": {"repo_path": {"type": "string"}}}),
        };
        let tools = existing_paths_only(&[reader, lister.clone(), git], &known, "look");
        assert_eq!(
            tools[0].parameters["properties"]["path"]["enum"],
            json!(["docs/deep/far.md", "docs/plan.md", "notes.txt"])
        );
        // A directory the message does not name is the working directory ("this folder").
        assert_eq!(
            tools[1].parameters["properties"]["path"]["enum"],
            json!(["."])
        );
        let named = existing_paths_only(
            std::slice::from_ref(&lister),
            &known,
            "what's in the docs folder and in src/app?",
        );
        assert_eq!(
            named[0].parameters["properties"]["path"]["enum"],
            json!(["docs", "src/app"])
        );
        assert_eq!(
            tools[2].parameters["properties"]["repo_path"]["enum"],
            json!(["."])
        );
        // A tool that writes may name a file that does not exist yet: left free.
        let writer = ToolDefinition {
            name: "files__write_file".into(),
            ..read_file()
        };
        let tools = existing_paths_only(std::slice::from_ref(&writer), &known, "save it");
        assert_eq!(tools[0], writer);
        let tools = existing_paths_only(&[read_file()], &known, "read it");
        let grammar = crate::grammar::tool_call_grammar(&tools[..1]);
        assert!(grammar.contains(r#""\"notes.txt\"""#), "{grammar}");

        // A message that names a file reads that file.
        assert_eq!(
            files_named_in("What's in notes.txt?", &files),
            ["notes.txt"]
        );
        assert_eq!(files_named_in("show me the plan", &files), ["docs/plan.md"]);
        assert!(files_named_in("hello there", &files).is_empty());
        let narrowed = read_named_files(&[unrelated.clone(), read_file()], "read my notes", &files)
            .expect("notes.txt is named");
        assert_eq!(narrowed.len(), 1);
        assert_eq!(
            narrowed[0].parameters["properties"]["path"]["enum"],
            json!(["notes.txt"])
        );
        assert!(read_named_files(std::slice::from_ref(&other), "read my notes", &files).is_none());
        // Another server's file tool was offered beside it: the model chooses.
        let info = ToolDefinition {
            name: "fs__get_file_info".into(),
            ..read_file()
        };
        assert!(read_named_files(&[info, read_file()], "how big are my notes", &files).is_none());
        let show = ToolDefinition {
            name: "git__git_show".into(),
            description: "Shows a commit".into(),
            parameters: json!({"type": "object", "properties": {"repo_path": {"type": "string"}}}),
        };
        assert!(read_named_files(&[show, read_file()], "show me my notes", &files).is_some());
        // A reporter of properties is no other reader when no property is asked.
        let info = ToolDefinition {
            name: "files__get_file_info".into(),
            ..read_file()
        };
        assert!(
            read_named_files(&[info.clone(), read_file()], "what's in notes.txt?", &files)
                .is_some()
        );
        // Asked to note something, a file's stem in the message is no request to read it.
        assert!(
            read_named_files(
                &[read_file()],
                "Note in my notes that Carol is a doctor",
                &files
            )
            .is_none()
        );
        let sizes = ToolDefinition {
            name: "fs__list_directory_with_sizes".into(),
            ..read_file()
        };
        assert!(read_named_files(&[sizes, read_file()], "how big are my notes", &files).is_none());
        // A file written out that is not here is read too, for the server to say so; a typo of
        // one that is, or a directory, is left to the narrowing of every path (existing files).
        let narrowed = read_named_files(&[read_file()], "What's in todo.md?", &files)
            .expect("todo.md is written out");
        assert_eq!(
            narrowed[0].parameters["properties"]["path"]["enum"],
            json!(["todo.md"])
        );
        assert!(read_named_files(&[read_file()], "Read notse.txt", &files).is_none());
        assert!(read_named_files(&[read_file()], "What is in src/?", &files).is_none());

        // Too many files to list: the path stays free.
        for i in 0..=MAX_FILES {
            std::fs::write(root.join(format!("f{i}.txt")), "x").unwrap();
        }
        let tools = existing_paths_only(&[read_file()], &files_for(&[read_file()], &root), "");
        assert!(
            tools[0].parameters["properties"]["path"]
                .get("enum")
                .is_none()
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
