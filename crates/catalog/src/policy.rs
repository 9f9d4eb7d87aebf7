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

/// Decides for one tool. `interactive` says whether anyone can be asked.
pub fn decide(
    mode: ApprovalMode,
    rules: &ApprovalRules,
    qualified_name: &str,
    hints: &ToolAnnotations,
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
    let read_only = hints.read_only_hint == Some(true);
    let destructive = !read_only && hints.destructive_hint == Some(true);
    let wanted = if matching(&rules.ask).is_some() {
        Decision::Ask
    } else if read_only {
        Decision::Allow
    } else if destructive {
        Decision::Ask
    } else {
        match mode {
            ApprovalMode::Auto => Decision::Allow,
            ApprovalMode::Ask | ApprovalMode::Never => Decision::Ask,
        }
    };
    match wanted {
        Decision::Ask if mode == ApprovalMode::Never => Decision::Deny(
            "tools that change things are disabled (--approve never); only read-only tools may run"
                .into(),
        ),
        Decision::Ask if !interactive => Decision::Deny(format!(
            "\"{qualified_name}\" needs the user's approval and this run is non-interactive; the user can allow it with --approve auto or an \"allow\" rule in the config"
        )),
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
        let table: Vec<(
            ApprovalMode,
            &ApprovalRules,
            &str,
            &ToolAnnotations,
            bool,
            &str,
        )> = vec![
            // mode, rules, tool, hints, interactive, expected
            (Ask, &none, "a__read", &ro, true, "allow"),
            (Ask, &none, "a__write", &plain, true, "ask"),
            (Ask, &none, "a__write", &plain, false, "deny"),
            (Ask, &none, "a__rm", &destructive, true, "ask"),
            (Auto, &none, "a__write", &plain, false, "allow"),
            (Auto, &none, "a__rm", &destructive, true, "ask"),
            (Auto, &none, "a__rm", &destructive, false, "deny"),
            (Never, &none, "a__read", &ro, true, "allow"),
            (Never, &none, "a__write", &plain, true, "deny"),
            (Auto, &rules, "disk__format_disk", &ro, true, "deny"),
            (
                Ask,
                &rules,
                "files__delete_tmp",
                &destructive,
                false,
                "allow",
            ),
            (Never, &rules, "safe__anything", &plain, true, "allow"),
            (Auto, &rules, "files__read_secret_key", &ro, true, "ask"),
            (Auto, &rules, "files__read_secret_key", &ro, false, "deny"),
            (Ask, &none, "a__odd", &contradictory, true, "allow"),
        ];
        for (mode, rules, tool, hints, interactive, expected) in table {
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
            &hints(None, None),
            false,
        ) else {
            panic!("expected a denial")
        };
        assert!(
            reason.contains("non-interactive") && reason.contains("--approve auto"),
            "{reason}"
        );
    }
}
