//! The checks a call's arguments get after the model made it and before anyone sees it: the
//! SQL it wrote grounded in what the question and the results give ([`sql`](crate::sql)), the
//! items its lists repeat dropped ([`repeats`](crate::repeats)), and the places the question
//! names given to a tool's zone parameters in order when the model gave one to all
//! ([`zones`](crate::zones)), and the words it ran together given back as the question
//! writes them ([`phrases`](crate::phrases)).

use tether_protocol::chat::ToolDefinition;

use crate::{phrases, repeats, sql, zones};

/// What the checks need of one request.
#[derive(Debug, Default)]
pub(crate) struct CallChecks {
    /// The offered tools that run SQL, with their query property.
    sql: Vec<(String, String)>,
    /// Whether the question asks how many of something there are.
    asks_count: bool,
    /// The offered tools with several zone parameters, those parameters, and the zones the
    /// question names, in its order.
    zones: Vec<(String, Vec<String>, Vec<String>)>,
    /// The question, whose words a call's texts may have run together.
    question: String,
}

impl CallChecks {
    /// The checks for a call to one of `tools`, asked `question`.
    pub(crate) fn new(tools: &[ToolDefinition], question: Option<&str>) -> Self {
        CallChecks {
            sql: sql::query_properties(tools),
            asks_count: question.is_some_and(sql::asks_how_many),
            zones: zones::zone_properties(tools),
            question: question.unwrap_or_default().to_string(),
        }
    }

    /// `arguments` (JSON) for a call to `tool`, checked against `known`, the question and this
    /// turn's results (the values a filter may name).
    pub(crate) fn checked(&self, tool: &str, arguments: String, known: &str) -> String {
        let arguments = self
            .sql
            .iter()
            .find(|(name, _)| name == tool)
            .and_then(|(_, property)| {
                sql::grounded_arguments(&arguments, property, known, self.asks_count)
            })
            .inspect(|revised| tracing::debug!(%revised, "embedded model query grounded"))
            .unwrap_or(arguments);
        let arguments = self
            .zones
            .iter()
            .find(|(name, _, _)| name == tool)
            .and_then(|(_, properties, zones)| zones::distinct_zones(&arguments, properties, zones))
            .inspect(|revised| tracing::debug!(%revised, "embedded model zones told apart"))
            .unwrap_or(arguments);
        let arguments = phrases::as_written(&arguments, &self.question)
            .inspect(|revised| tracing::debug!(%revised, "embedded model words given back"))
            .unwrap_or(arguments);
        repeats::without_repeats(&arguments)
            .inspect(|revised| tracing::debug!(%revised, "embedded model repeats dropped"))
            .unwrap_or(arguments)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_call_to_a_tool_that_runs_sql_is_grounded_and_others_only_lose_repeats() {
        let tools = [
            ToolDefinition {
                name: "sqlite__read_query".into(),
                description: "Execute a SELECT query on the SQLite database".into(),
                parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
            },
            ToolDefinition {
                name: "notes__search".into(),
                description: "Search the notes".into(),
                parameters: json!({"type": "object", "properties": {"query": {"type": "string"}}}),
            },
        ];
        let question = "How many books are there?";
        let checks = CallChecks::new(&tools, Some(question));
        let invented = json!({"query": "SELECT * FROM books WHERE title = 'Nothing'"}).to_string();
        assert_eq!(
            checks.checked("sqlite__read_query", invented.clone(), question),
            json!({"query": "SELECT COUNT(*) FROM books"}).to_string()
        );
        assert_eq!(
            checks.checked("notes__search", invented.clone(), question),
            invented
        );
        assert_eq!(
            checks.checked(
                "notes__search",
                json!({"tags": ["a", "a"]}).to_string(),
                question
            ),
            json!({"tags": ["a"]}).to_string()
        );
    }

    #[test]
    fn zones_are_told_apart_and_joined_words_given_back() {
        let convert = ToolDefinition {
            name: "time__convert_time".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {
                "source_timezone": {"type": "string", "enum": ["Europe/London", "Asia/Tokyo"]},
                "target_timezone": {"type": "string", "enum": ["Europe/London", "Asia/Tokyo"]},
            }}),
        };
        let remember = ToolDefinition {
            name: "memory__create_entities".into(),
            description: String::new(),
            parameters: json!({"type": "object", "properties": {"entities": {"type": "array"}}}),
        };
        let question = "Convert London time to Tokyo time, and remember that Bob likes green tea.";
        let checks = CallChecks::new(&[convert, remember], Some(question));
        let same = json!({"source_timezone": "Asia/Tokyo", "target_timezone": "Asia/Tokyo"});
        assert_eq!(
            checks.checked("time__convert_time", same.to_string(), question),
            json!({"source_timezone": "Europe/London", "target_timezone": "Asia/Tokyo"})
                .to_string()
        );
        let joined =
            json!({"entities": [{"name": "Bob", "observations": ["GreenTea", "green tea"]}]});
        assert_eq!(
            checks.checked("memory__create_entities", joined.to_string(), question),
            json!({"entities": [{"name": "Bob", "observations": ["green tea"]}]}).to_string()
        );
    }
}
