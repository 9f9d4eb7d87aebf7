//! Revisions a small model may name. A tool that takes a repository and a revision
//! (`git_show`'s `revision`) gets that revision narrowed to what the repository has: `HEAD`,
//! the commit before it, its branches and tags, and any commit id the message writes out.
//! Left free, the 135M model asked for "the last commit" invented `1234567890`.

use std::path::Path;

use serde_json::json;
use tether_protocol::chat::ToolDefinition;

use crate::narrowing::{edit_properties, is_free};

/// More names than this and the list would crowd the grammar; the revision stays free.
const MAX_REVISIONS: usize = 64;

/// Whether the parameter `name` names a revision: `revision`, `rev`, `ref`, `commit`, `sha`,
/// `commit_sha`, `hash`. Branch parameters are left alone: `create_branch` names a new one.
fn names_a_revision(name: &str) -> bool {
    let lower = name.to_lowercase();
    matches!(
        lower.as_str(),
        "revision" | "rev" | "ref" | "commit" | "sha" | "commit_sha" | "commit_hash" | "hash"
    )
}

/// Whether the tool's properties include a repository (`repo_path`, `repository`).
fn takes_a_repository(properties: &serde_json::Map<String, serde_json::Value>) -> bool {
    properties
        .keys()
        .any(|name| name.to_lowercase().contains("repo"))
}

/// What the repository at `repository` can resolve by name: `HEAD`, `HEAD~1`, then its
/// branches and tags (loose and packed), sorted. Empty when it holds no `.git` directory.
pub fn revisions_of(repository: &Path) -> Vec<String> {
    let git = repository.join(".git");
    if !git.is_dir() {
        return Vec::new();
    }
    let mut names = Vec::new();
    for (kind, dir) in [
        ("heads", git.join("refs/heads")),
        ("tags", git.join("refs/tags")),
    ] {
        let mut pending = vec![(dir, String::new())];
        while let Some((dir, prefix)) = pending.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = format!("{prefix}{}", entry.file_name().to_string_lossy());
                match entry.file_type() {
                    Ok(t) if t.is_dir() => pending.push((entry.path(), format!("{name}/"))),
                    Ok(t) if t.is_file() => names.push(name),
                    _ => {}
                }
            }
        }
        let packed = std::fs::read_to_string(git.join("packed-refs")).unwrap_or_default();
        let prefix = format!("refs/{kind}/");
        for line in packed.lines() {
            if let Some(name) = line
                .split_once(' ')
                .and_then(|(_, r)| r.strip_prefix(&prefix))
            {
                names.push(name.to_string());
            }
        }
    }
    names.sort();
    names.dedup();
    let mut revisions = vec!["HEAD".to_string(), "HEAD~1".to_string()];
    revisions.extend(names);
    revisions
}

/// Commit ids `text` writes out: runs of 7 to 40 hexadecimal characters holding a digit.
fn commit_ids_written_in(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| {
            (7..=40).contains(&w.len())
                && w.chars().all(|c| c.is_ascii_hexdigit())
                && w.chars().any(|c| c.is_ascii_digit())
        })
        .map(str::to_lowercase)
        .collect()
}

/// `tools` with the revision parameters of those that take a repository limited to
/// `revisions` (see [`revisions_of`]) and the commit ids `text` writes out.
pub fn known_revisions_only(
    tools: &[ToolDefinition],
    revisions: &[String],
    text: &str,
) -> Vec<ToolDefinition> {
    if revisions.is_empty() {
        return tools.to_vec();
    }
    let mut allowed = revisions.to_vec();
    for id in commit_ids_written_in(text) {
        if !allowed.contains(&id) {
            allowed.push(id);
        }
    }
    if allowed.len() > MAX_REVISIONS {
        return tools.to_vec();
    }
    edit_properties(tools, |_, _, properties| {
        if !takes_a_repository(properties) {
            return;
        }
        for (name, schema) in properties.iter_mut() {
            if names_a_revision(name) && is_free(schema, &["string"]) {
                schema["enum"] = json!(allowed);
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn git_show() -> ToolDefinition {
        ToolDefinition {
            name: "git__git_show".into(),
            description: "Shows the contents of a commit".into(),
            parameters: json!({"type": "object", "properties": {
                "repo_path": {"type": "string"},
                "revision": {"type": "string"},
            }, "required": ["repo_path", "revision"]}),
        }
    }

    #[test]
    fn a_repository_names_head_its_branches_and_tags() {
        let dir = std::env::temp_dir().join(format!("tether-revisions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join(".git/refs/heads/feature")).unwrap();
        std::fs::create_dir_all(dir.join(".git/refs/tags")).unwrap();
        std::fs::write(dir.join(".git/refs/heads/main"), "0\n").unwrap();
        std::fs::write(dir.join(".git/refs/heads/feature/x"), "0\n").unwrap();
        std::fs::write(
            dir.join(".git/packed-refs"),
            "# pack-refs with: peeled\nabc123 refs/tags/v1.0\nabc124 refs/remotes/origin/main\n",
        )
        .unwrap();
        assert_eq!(
            revisions_of(&dir),
            ["HEAD", "HEAD~1", "feature/x", "main", "v1.0"]
        );
        assert!(revisions_of(&dir.join("nowhere")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_revision_is_one_the_repository_has_or_the_message_writes() {
        let revisions = vec!["HEAD".to_string(), "HEAD~1".to_string(), "main".to_string()];
        let narrowed =
            known_revisions_only(&[git_show()], &revisions, "show commit 3f2a9c1 please");
        assert_eq!(
            narrowed[0].parameters["properties"]["revision"]["enum"],
            json!(["HEAD", "HEAD~1", "main", "3f2a9c1"])
        );
        assert!(
            narrowed[0].parameters["properties"]["repo_path"]
                .get("enum")
                .is_none()
        );
        // A tool without a repository keeps its revision free: it may be anything's.
        let mut other = git_show();
        other.parameters["properties"]
            .as_object_mut()
            .unwrap()
            .remove("repo_path");
        let kept = known_revisions_only(&[other], &revisions, "");
        assert!(
            kept[0].parameters["properties"]["revision"]
                .get("enum")
                .is_none()
        );
        // No repository known: nothing changes.
        let free = known_revisions_only(&[git_show()], &[], "");
        assert!(
            free[0].parameters["properties"]["revision"]
                .get("enum")
                .is_none()
        );
    }
}
