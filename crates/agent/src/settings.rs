//! The config's top-level settings, typed. They are read once, when the config loads, so a
//! wrong value is one line naming the key and the fix for every command (not only for the
//! commands that happen to read it), and the front ends read fields instead of looking keys up
//! by string. Unknown keys are the config loader's business: it warns about them, with the
//! key they may have meant.

use serde_json::{Map, Value};
use tether_catalog::{ApprovalRules, SelectionMode};

/// Everything the config sets beside its servers.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `"model"`: the `provider:model` (or `local`) used when no flag names one.
    pub model: Option<String>,
    /// `"baseUrl"`: the model API's base URL when no flag names one.
    pub base_url: Option<String>,
    /// `"toolSelection"`: how tools are offered when no flag says.
    pub tool_selection: Option<SelectionMode>,
    /// `"approval"`: per-tool allow, ask and deny patterns.
    pub approval: ApprovalRules,
    /// `"maxResultChars"`: the longest tool result the model reads whole.
    pub max_result_chars: Option<usize>,
    /// `"contextWindow"`: the model's context window in tokens, when the provider does not
    /// know it.
    pub context_window: Option<usize>,
    /// `"roots"`: directories offered to servers, as written (`~/` and relative paths are
    /// resolved by the front end, against the config's folder).
    pub roots: Vec<String>,
    /// `"semanticSearch"`: rank tools by meaning as well as by words (on unless `false`).
    pub semantic_search: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            model: None,
            base_url: None,
            tool_selection: None,
            approval: ApprovalRules::default(),
            max_result_chars: None,
            context_window: None,
            roots: Vec::new(),
            semantic_search: true,
        }
    }
}

/// A setting with a value of the wrong kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{key}\" is {value}; {fix}")]
pub struct SettingsError {
    /// The key.
    pub key: &'static str,
    /// The value found, as JSON (clipped).
    pub value: String,
    /// What to write instead.
    pub fix: String,
}

impl Settings {
    /// The settings in a config's top-level `map` (every key but `"mcpServers"`).
    pub fn from_map(map: &Map<String, Value>) -> Result<Settings, SettingsError> {
        let mut settings = Settings::default();
        for (key, value) in map {
            match key.as_str() {
                "model" => settings.model = Some(text("model", value, "openai:gpt-4o-mini")?),
                "baseUrl" => {
                    settings.base_url = Some(text("baseUrl", value, "http://localhost:8080/v1")?)
                }
                "toolSelection" => {
                    let mode = value
                        .as_str()
                        .and_then(|text| SelectionMode::parse(text).ok())
                        .ok_or_else(|| {
                            wrong(
                                "toolSelection",
                                value,
                                "use \"all\", \"search\", \"meta\" or \"auto\"",
                            )
                        })?;
                    settings.tool_selection = Some(mode);
                }
                "approval" => {
                    settings.approval = serde_json::from_value(value.clone()).map_err(|e| {
                        wrong(
                            "approval",
                            value,
                            format!("{e}; expected {{\"allow\": [patterns], \"ask\": [...], \"deny\": [...]}}"),
                        )
                    })?;
                }
                "maxResultChars" => {
                    settings.max_result_chars = Some(whole(
                        "maxResultChars",
                        value,
                        1_000,
                        "give a whole number of characters, at least 1000",
                    )?);
                }
                "contextWindow" => {
                    settings.context_window = Some(whole(
                        "contextWindow",
                        value,
                        512,
                        "give the model's context window in tokens, at least 512, e.g. 8192",
                    )?);
                }
                "roots" => {
                    let fix = "give a list of directories, e.g. [\"~/projects/site\"]";
                    settings.roots = value
                        .as_array()
                        .and_then(|items| {
                            items
                                .iter()
                                .map(|item| item.as_str().map(str::to_string))
                                .collect::<Option<Vec<_>>>()
                        })
                        .ok_or_else(|| wrong("roots", value, fix))?;
                }
                "semanticSearch" => {
                    settings.semantic_search = value
                        .as_bool()
                        .ok_or_else(|| wrong("semanticSearch", value, "expected true or false"))?;
                }
                _ => {}
            }
        }
        Ok(settings)
    }
}

fn wrong(key: &'static str, value: &Value, fix: impl Into<String>) -> SettingsError {
    let mut shown = value.to_string();
    if shown.chars().count() > 80 {
        shown = shown.chars().take(80).collect::<String>() + "…";
    }
    SettingsError {
        key,
        value: shown,
        fix: fix.into(),
    }
}

fn text(key: &'static str, value: &Value, example: &str) -> Result<String, SettingsError> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| wrong(key, value, format!("give a string, e.g. \"{example}\"")))
}

fn whole(key: &'static str, value: &Value, least: u64, fix: &str) -> Result<usize, SettingsError> {
    value
        .as_u64()
        .filter(|n| *n >= least)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| wrong(key, value, fix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(value: Value) -> Result<Settings, SettingsError> {
        match value {
            Value::Object(map) => Settings::from_map(&map),
            _ => unreachable!(),
        }
    }

    #[test]
    fn every_setting_is_read_into_its_field() {
        let settings = parse(json!({
            "model": "ollama:qwen3:4b", "baseUrl": "http://h:1/v1", "toolSelection": "search",
            "approval": {"deny": ["files__delete_*"]}, "maxResultChars": 5000,
            "contextWindow": 8192, "roots": ["~/site"], "semanticSearch": false,
            "$schema": "https://example.com/schema.json",
        }))
        .unwrap();
        assert_eq!(settings.model.as_deref(), Some("ollama:qwen3:4b"));
        assert_eq!(settings.base_url.as_deref(), Some("http://h:1/v1"));
        assert_eq!(settings.tool_selection, Some(SelectionMode::Search));
        assert_eq!(settings.approval.deny, ["files__delete_*"]);
        assert_eq!(settings.max_result_chars, Some(5000));
        assert_eq!(settings.context_window, Some(8192));
        assert_eq!(settings.roots, ["~/site"]);
        assert!(!settings.semantic_search);
        assert_eq!(parse(json!({})).unwrap(), Settings::default());
    }

    #[test]
    fn a_wrong_value_names_the_key_and_the_fix() {
        for (config, expected) in [
            (
                json!({"contextWindow": "big"}),
                "\"contextWindow\" is \"big\"; give the model's context window in tokens",
            ),
            (
                json!({"maxResultChars": 10}),
                "\"maxResultChars\" is 10; give a whole number of characters, at least 1000",
            ),
            (
                json!({"toolSelection": "some"}),
                "\"toolSelection\" is \"some\"; use \"all\", \"search\", \"meta\" or \"auto\"",
            ),
            (
                json!({"roots": "/srv"}),
                "\"roots\" is \"/srv\"; give a list",
            ),
            (
                json!({"semanticSearch": "no"}),
                "\"semanticSearch\" is \"no\"; expected true or false",
            ),
            (json!({"model": 4}), "\"model\" is 4; give a string"),
            (
                json!({"approval": {"deny": "x"}}),
                "\"approval\" is {\"deny\":\"x\"}; invalid type",
            ),
        ] {
            let error = parse(config).unwrap_err().to_string();
            assert!(error.starts_with(expected), "{error}");
        }
    }
}
