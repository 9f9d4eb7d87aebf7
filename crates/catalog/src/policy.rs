//! The approval policy: a pure function from the mode, the config's rules and a tool's hints
//! to allow / ask / deny. It lives beside the catalogue so every front end (the chat, `run`, the
//! gateway) enforces the same rules; kept free of I/O so the whole table is unit-tested.

use serde::{Deserialize, Serialize};
use tether_mcp::config::glob_match;
use tether_protocol::ToolAnnotations;

/// `--approve`: what to do with tools that need approval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Ask before any tool not marked read-only (the default).
    #[default]
    Ask,
    /// Run tools without asking, except destructive ones, which still ask.
    Auto,
    /// Never run a tool that would need approval: only read-only tools and explicit allows.
    Never,
}

/// Per-tool rules from the config, glob patterns on qualified names (`files__write_*`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRules {
    /// Always run, even destructive tools.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Always ask.
    #[serde(default)]
    pub ask: Vec<String>,
    /// Never run.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// What to do with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Allow,
    /// Ask the user first.
    Ask,
    /// Refuse; the reason goes back to the model.
    Deny(String),
}

/// A tool's annotations and whether they may be believed. The spec calls annotations
/// hints: a hostile server can mark `delete_everything` read-only, so under `never` only
/// trusted hints (Tether's own server, or one the user marked `"trustHints"`) count.
#[derive(Debug, Clone, Copy)]
pub struct Hints<'a> {
    /// What the server says about the tool.
    pub annotations: &'a ToolAnnotations,
    /// Whether the server's word is enough to run it unasked under `never`.
    pub trusted: bool,
}

/// Decides for one tool. `interactive` says whether anyone can be asked.
pub fn decide(
    mode: ApprovalMode,
    rules: &ApprovalRules,
    qualified_name: &str,
    hints: Hints<'_>,
    interactive: bool,
) -> Decision {
    let matching = |patterns: &[String]| {
        patterns
            .iter()
            .find(|p| glob_match(p, qualified_name))
            .cloned()
    };
    if let Some(pattern) = matching(&rules.deny) {
        return Decision::Deny(format!(
            "the config's approval rule deny \"{pattern}\" forbids this tool"
        ));
    }
    if matching(&rules.allow).is_some() {
        return Decision::Allow;
    }
    let read_only = hints.annotations.read_only_hint == Some(true);
    let destructive = !read_only && hints.annotations.destructive_hint == Some(true);
    let asked_by = matching(&rules.ask);
    let wanted = if asked_by.is_some() {
        Decision::Ask
    } else if read_only && (mode != ApprovalMode::Never || hints.trusted) {
        Decision::Allow
    } else if destructive {
        Decision::Ask
    } else {
        match mode {
            ApprovalMode::Auto => Decision::Allow,
            ApprovalMode::Ask | ApprovalMode::Never => Decision::Ask,
        }
    };
    let allow_rule = format!("an \"allow\" rule for \"{qualified_name}\" in the config");
    match wanted {
        Decision::Ask if mode == ApprovalMode::Never => Decision::Deny(if read_only {
            format!(
                "--approve never runs only tools the user allowed; the server calls this one read-only, but that is its own claim (allow it with {allow_rule}, or mark the server \"trustHints\": true)"
            )
        } else {
            format!(
                "tools that change things are disabled (--approve never); allow this one with {allow_rule}"
            )
        }),
        Decision::Ask if !interactive => {
            let why = match (&asked_by, mode) {
                (Some(pattern), _) => format!("the config's rule ask \"{pattern}\" covers it"),
                (None, ApprovalMode::Auto) => {
                    "it is marked destructive, and --approve auto still asks for those".into()
                }
                (None, _) => "it is not marked read-only".into(),
            };
            let fix = match (&asked_by, mode) {
                (None, ApprovalMode::Ask) => format!("--approve auto or {allow_rule}"),
                _ => allow_rule,
            };
            Decision::Deny(format!(
                "\"{qualified_name}\" needs the user's approval ({why}) and this run is non-interactive; the user can allow it with {fix}"
            ))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(read_only: Option<bool>, destructive: Option<bool>) -> ToolAnnotations {
        ToolAnnotations {
            read_only_hint: read_only,
            destructive_hint: destructive,
            ..Default::default()
        }
    }

    #[test]
    fn decision_table() {
        use ApprovalMode::*;
        let none = ApprovalRules::default();
        let rules = ApprovalRules {
            allow: vec!["files__delete_tmp".into(), "safe__*".into()],
            ask: vec!["files__read_secret*".into()],
            deny: vec!["*__format_disk".into()],
        };
        let ro = hints(Some(true), None);
        let plain = hints(None, None);
        let destructive = hints(Some(false), Some(true));
        let contradictory = hints(Some(true), Some(true));
        // mode, rules, tool, (hints, trusted), interactive, expected
        type Row<'a> = (
            ApprovalMode,
            &'a ApprovalRules,
            &'a str,
            (&'a ToolAnnotations, bool),
            bool,
            &'a str,
        );
        let table: Vec<Row<'_>> = vec![
            // mode, rules, tool, hints, interactive, expected
            (Ask, &none, "a__read", (&ro, false), true, "allow"),
            (Ask, &none, "a__write", (&plain, false), true, "ask"),
            (Ask, &none, "a__write", (&plain, false), false, "deny"),
            (Ask, &none, "a__rm", (&destructive, false), true, "ask"),
            (Auto, &none, "a__write", (&plain, false), false, "allow"),
            (Auto, &none, "a__rm", (&destructive, false), true, "ask"),
            (Auto, &none, "a__rm", (&destructive, false), false, "deny"),
            (Never, &none, "a__read", (&ro, false), true, "deny"),
            (Never, &none, "builtin__read", (&ro, true), true, "allow"),
            (Never, &none, "a__write", (&plain, false), true, "deny"),
            (
                Auto,
                &rules,
                "disk__format_disk",
                (&ro, false),
                true,
                "deny",
            ),
            (
                Ask,
                &rules,
                "files__delete_tmp",
                (&destructive, false),
                false,
                "allow",
            ),
            (
                Never,
                &rules,
                "safe__anything",
                (&plain, false),
                true,
                "allow",
            ),
            (
                Auto,
                &rules,
                "files__read_secret_key",
                (&ro, false),
                true,
                "ask",
            ),
            (
                Auto,
                &rules,
                "files__read_secret_key",
                (&ro, false),
                false,
                "deny",
            ),
            (Ask, &none, "a__odd", (&contradictory, false), true, "allow"),
        ];
        for (mode, rules, tool, (annotations, trusted), interactive, expected) in table {
            let hints = Hints {
                annotations,
                trusted,
            };
            let got = match decide(mode, rules, tool, hints, interactive) {
                Decision::Allow => "allow",
                Decision::Ask => "ask",
                Decision::Deny(_) => "deny",
            };
            assert_eq!(got, expected, "{mode:?} {tool} interactive={interactive}");
        }
    }

    #[test]
    fn denials_explain_themselves() {
        let Decision::Deny(reason) = decide(
            ApprovalMode::Ask,
            &ApprovalRules::default(),
            "a__write",
            Hints {
                annotations: &hints(None, None),
                trusted: false,
            },
            false,
        ) else {
            panic!("expected a denial")
        };
        assert!(
            reason.contains("non-interactive") && reason.contains("--approve auto"),
            "{reason}"
        );
        // Under auto the fix is never "use --approve auto".
        let Decision::Deny(reason) = decide(
            ApprovalMode::Auto,
            &ApprovalRules::default(),
            "a__rm",
            Hints {
                annotations: &hints(None, Some(true)),
                trusted: false,
            },
            false,
        ) else {
            panic!("expected a denial")
        };
        assert!(
            reason.contains("destructive") && !reason.contains("--approve auto or"),
            "{reason}"
        );
        assert!(reason.contains("\"allow\" rule for \"a__rm\""), "{reason}");
        // A server's read-only claim alone does not run a tool under never.
        let Decision::Deny(reason) = decide(
            ApprovalMode::Never,
            &ApprovalRules::default(),
            "evil__delete_everything",
            Hints {
                annotations: &hints(Some(true), None),
                trusted: false,
            },
            true,
        ) else {
            panic!("expected a denial")
        };
        assert!(reason.contains("its own claim"), "{reason}");
    }
}
