//! A permission question as data, the same in every front end: the four answers a person may
//! give ([`PermissionOption`]), the decision that comes back ([`PermissionDecision`], `cancelled`
//! when the question was withdrawn), the "always" answers a session keeps
//! ([`StandingAnswers`]), and the form that asks a person through an MCP client's elicitation
//! (`tether serve`'s `ask` rules), so a client's user answers with the same four options an
//! editor or a terminal offers.

use std::collections::HashSet;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// One answer a person may give to a permission question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionOption {
    /// Run this call.
    AllowOnce,
    /// Run this call and later calls of the same tool in this session.
    AllowAlways,
    /// Do not run this call.
    RejectOnce,
    /// Do not run this call nor later calls of the same tool in this session.
    RejectAlways,
}

impl PermissionOption {
    /// Every option, in the order they are offered.
    pub const ALL: [PermissionOption; 4] = [
        PermissionOption::AllowOnce,
        PermissionOption::AllowAlways,
        PermissionOption::RejectOnce,
        PermissionOption::RejectAlways,
    ];

    /// The label a person reads.
    pub fn label(self) -> &'static str {
        match self {
            PermissionOption::AllowOnce => "Allow once",
            PermissionOption::AllowAlways => "Always allow",
            PermissionOption::RejectOnce => "Reject",
            PermissionOption::RejectAlways => "Always reject",
        }
    }

    /// Its wire name (`allow_once`, …).
    pub fn id(self) -> &'static str {
        match self {
            PermissionOption::AllowOnce => "allow_once",
            PermissionOption::AllowAlways => "allow_always",
            PermissionOption::RejectOnce => "reject_once",
            PermissionOption::RejectAlways => "reject_always",
        }
    }
}

/// A person's answer to a permission or sampling question.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionDecision {
    /// Yes, this once.
    AllowOnce,
    /// Yes, and for every later call of this tool in the session.
    AllowAlways,
    /// No, this once.
    RejectOnce,
    /// No, and for every later call of this tool in the session.
    RejectAlways,
    /// The question was withdrawn (the turn was interrupted).
    Cancelled,
}

impl PermissionDecision {
    /// Whether the call may run.
    pub fn allows(self) -> bool {
        matches!(
            self,
            PermissionDecision::AllowOnce | PermissionDecision::AllowAlways
        )
    }
}

impl From<PermissionOption> for PermissionDecision {
    fn from(option: PermissionOption) -> PermissionDecision {
        match option {
            PermissionOption::AllowOnce => PermissionDecision::AllowOnce,
            PermissionOption::AllowAlways => PermissionDecision::AllowAlways,
            PermissionOption::RejectOnce => PermissionDecision::RejectOnce,
            PermissionOption::RejectAlways => PermissionDecision::RejectAlways,
        }
    }
}

/// The "always" answers of one session, per qualified tool name.
#[derive(Debug, Default)]
pub struct StandingAnswers {
    allowed: Mutex<HashSet<String>>,
    rejected: Mutex<HashSet<String>>,
}

impl StandingAnswers {
    /// What a standing answer says about `tool`: `Some(true)` always allowed, `Some(false)`
    /// always rejected, `None` ask.
    pub fn lookup(&self, tool: &str) -> Option<bool> {
        if self.rejected.lock().is_ok_and(|s| s.contains(tool)) {
            return Some(false);
        }
        if self.allowed.lock().is_ok_and(|s| s.contains(tool)) {
            return Some(true);
        }
        None
    }

    /// Keeps `decision` for `tool` when it is an "always" answer.
    pub fn remember(&self, tool: &str, decision: PermissionDecision) {
        let set = match decision {
            PermissionDecision::AllowAlways => &self.allowed,
            PermissionDecision::RejectAlways => &self.rejected,
            _ => return,
        };
        if let Ok(mut set) = set.lock() {
            set.insert(tool.to_string());
        }
    }
}

/// The property of [`permission_form`] that carries the decision.
pub const DECISION_FIELD: &str = "decision";

/// The elicitation form schema that asks a permission question: one single-select field with
/// the four options, titled, allow once first.
pub fn permission_form() -> Value {
    let choices: Vec<Value> = PermissionOption::ALL
        .iter()
        .map(|o| json!({"const": o.id(), "title": o.label()}))
        .collect();
    json!({
        "type": "object",
        "properties": {DECISION_FIELD: {
            "type": "string", "title": "Decision", "oneOf": choices,
            "default": PermissionOption::AllowOnce.id(),
        }},
    })
}

/// The decision an accepted [`permission_form`] carries: its choice, or allow once when the
/// client accepted without filling the field (a client that shows only accept and decline).
pub fn decision_from_form(content: &Map<String, Value>) -> PermissionDecision {
    content
        .get(DECISION_FIELD)
        .and_then(|v| serde_json::from_value::<PermissionOption>(v.clone()).ok())
        .map_or(PermissionDecision::AllowOnce, PermissionDecision::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standing_answers_keep_only_always_and_reject_wins() {
        let answers = StandingAnswers::default();
        answers.remember("a__x", PermissionDecision::AllowOnce);
        assert_eq!(answers.lookup("a__x"), None);
        answers.remember("a__x", PermissionDecision::AllowAlways);
        assert_eq!(answers.lookup("a__x"), Some(true));
        answers.remember("a__x", PermissionDecision::RejectAlways);
        assert_eq!(answers.lookup("a__x"), Some(false));
    }

    #[test]
    fn the_form_offers_the_four_options_and_reads_them_back() {
        let form = permission_form();
        let ids: Vec<&str> = form["properties"][DECISION_FIELD]["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["const"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["allow_once", "allow_always", "reject_once", "reject_always"]
        );
        let mut content = Map::new();
        assert_eq!(decision_from_form(&content), PermissionDecision::AllowOnce);
        content.insert(DECISION_FIELD.into(), json!("reject_always"));
        assert_eq!(
            decision_from_form(&content),
            PermissionDecision::RejectAlways
        );
        for option in PermissionOption::ALL {
            assert_eq!(
                serde_json::to_value(option).unwrap(),
                json!(option.id()),
                "the wire name and id() agree"
            );
        }
    }
}
