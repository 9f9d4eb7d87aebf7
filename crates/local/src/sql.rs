//! SQL a small model writes for a tool that runs a query (sqlite's `read_query`, a Postgres
//! server's `query`). Asked "How many books are in the database?", the 135M model wrote
//! `SELECT * FROM books WHERE title = 'The Book of the City of Power'`: a filter on a value
//! nobody gave, which matched nothing, and rows where a count was asked. So a filter whose
//! quoted values appear neither in the question nor in this turn's results is dropped, and a
//! question that asks how many gets `COUNT(*)` where the model selected plain rows.
//!
//! This reads the model's call after it is made, unlike the narrowing modules, because a
//! grammar that forbids an invented literal leaves the model at `WHERE title = ` with nothing
//! sensible to write.

use serde_json::Value;
use tether_protocol::chat::ToolDefinition;

use crate::narrowing::{identifier_words, words_of};

/// The tools among `tools` that run SQL, each with the name of its query property: a string
/// property named for a query, SQL or a statement, in a tool whose name or descriptions
/// speak of SQL or SELECT.
pub(crate) fn query_properties(tools: &[ToolDefinition]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for tool in tools {
        let Some(properties) = tool.parameters.get("properties").and_then(Value::as_object) else {
            continue;
        };
        for (name, schema) in properties {
            let is_string = schema.get("type").and_then(Value::as_str) == Some("string");
            let named_for_sql = identifier_words(name)
                .iter()
                .any(|w| matches!(w.as_str(), "query" | "sql" | "statement"));
            let described = format!(
                "{} {} {}",
                tool.name,
                tool.description,
                schema
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            );
            // Descriptions write "SQL" in capitals, which the identifier splitter takes apart.
            let speaks_sql = words_of(&described)
                .into_iter()
                .chain(identifier_words(&tool.name))
                .any(|w| matches!(w.as_str(), "sql" | "select" | "sqlite"));
            if is_string && named_for_sql && speaks_sql {
                found.push((tool.name.clone(), name.clone()));
                break;
            }
        }
    }
    found
}

/// `arguments` (a JSON object) with the query in `property` grounded when it is a `SELECT`: a
/// filter on values `known` does not hold dropped, and a count made of plain rows when
/// `asks_count`. `None` when nothing changed.
pub(crate) fn grounded_arguments(
    arguments: &str,
    property: &str,
    known: &str,
    asks_count: bool,
) -> Option<String> {
    let mut value: Value = serde_json::from_str(arguments).ok()?;
    let query = value.get(property)?.as_str()?.to_string();
    // Only a query that reads: without its filter, an UPDATE or a DELETE would change every row.
    select_end(&query)?;
    let mut revised = without_invented_filter(&query, known);
    if asks_count {
        revised = counted(&revised);
    }
    if revised == query {
        return None;
    }
    value[property] = Value::String(revised);
    Some(value.to_string())
}

/// Whether `question` asks how many of something there are.
pub(crate) fn asks_how_many(question: &str) -> bool {
    let words = words_of(question);
    words.windows(2).any(|w| {
        matches!(
            (w[0].as_str(), w[1].as_str()),
            ("how", "many") | ("number", "of")
        )
    }) || words.iter().any(|w| w == "count")
}

/// Where the first of `keywords` at or after `from` starts and ends in `query`: outside
/// quoted strings, as whole words, case ignored.
fn keyword_at(query: &str, keywords: &[&str], from: usize) -> Option<(usize, usize)> {
    let lower = query.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut quote: Option<u8> = None;
    let mut i = from;
    while i < bytes.len() {
        let c = bytes[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'\'' || c == b'"' => quote = Some(c),
            None => {
                let starts_word = i == 0 || !bytes[i - 1].is_ascii_alphanumeric();
                if starts_word {
                    for keyword in keywords {
                        let end = i + keyword.len();
                        let whole = lower[i..].starts_with(keyword)
                            && bytes.get(end).is_none_or(|b| !b.is_ascii_alphanumeric());
                        if whole {
                            return Some((i, end));
                        }
                    }
                }
            }
        }
        i += 1;
    }
    None
}

/// What ends a `WHERE` clause.
const AFTER_WHERE: &[&str] = &["group by", "order by", "limit", "having", ";"];

/// The quoted values in `clause`, without SQL's `%` and `_` wildcards at their ends.
fn quoted_values(clause: &str) -> Vec<String> {
    let mut values = Vec::new();
    let mut rest = clause;
    while let Some(open) = rest.find('\'') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('\'') else {
            break;
        };
        values.push(after[..close].trim_matches(['%', '_']).to_string());
        rest = &after[close + 1..];
    }
    values
}

/// `query` without its `WHERE` clause when a value the clause quotes is not in `known`.
fn without_invented_filter(query: &str, known: &str) -> String {
    let Some((start, after)) = keyword_at(query, &["where"], 0) else {
        return query.to_string();
    };
    let end = keyword_at(query, AFTER_WHERE, after).map_or(query.len(), |(at, _)| at);
    let known = known.to_lowercase();
    let invented = quoted_values(&query[after..end])
        .iter()
        .any(|v| !known.contains(&v.to_lowercase()));
    if !invented {
        return query.to_string();
    }
    format!("{}{}", query[..start].trim_end(), {
        let rest = &query[end..];
        if rest.is_empty() || rest.starts_with(';') {
            rest.to_string()
        } else {
            format!(" {rest}")
        }
    })
}

/// Where the `SELECT` that opens `query` ends, after its leading space; `None` when `query`
/// does not open with one.
fn select_end(query: &str) -> Option<usize> {
    keyword_at(query.trim_start(), &["select"], 0)
        .filter(|(at, _)| *at == 0)
        .map(|(_, end)| end)
}

/// `query` counting its rows when it selects plain rows from one table: `SELECT * FROM t` or
/// `SELECT a, b FROM t`, with no aggregate, grouping or limit.
fn counted(query: &str) -> String {
    let trimmed = query.trim_start();
    let Some(select_end) = select_end(query) else {
        return query.to_string();
    };
    let Some((from_at, _)) = keyword_at(trimmed, &["from"], select_end) else {
        return query.to_string();
    };
    let selected = trimmed[select_end..from_at].trim().to_ascii_lowercase();
    let aggregate = selected.contains('(') || selected.starts_with("distinct");
    let grouped = keyword_at(trimmed, &["group by", "limit", "union"], from_at).is_some();
    if selected.is_empty() || aggregate || grouped {
        return query.to_string();
    }
    format!("SELECT COUNT(*) {}", &trimmed[from_at..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, description: &str, parameters: Value) -> ToolDefinition {
        ToolDefinition {
            name: name.into(),
            description: description.into(),
            parameters,
        }
    }

    #[test]
    fn finds_the_query_property_of_tools_that_run_sql() {
        let tools = [
            tool(
                "sqlite__read_query",
                "Execute a SELECT query on the SQLite database",
                json!({"type": "object", "properties": {"query": {"type": "string", "description": "SELECT SQL query to execute"}}}),
            ),
            tool(
                "memory__search_nodes",
                "Search for nodes in the knowledge graph based on a query",
                json!({"type": "object", "properties": {"query": {"type": "string"}}}),
            ),
            tool(
                "pg__run",
                "Run a read-only statement",
                json!({"type": "object", "properties": {"sql": {"type": "string", "description": "the SQL to run"}}}),
            ),
        ];
        assert_eq!(
            query_properties(&tools),
            vec![
                ("sqlite__read_query".to_string(), "query".to_string()),
                ("pg__run".to_string(), "sql".to_string())
            ]
        );
    }

    #[test]
    fn a_filter_on_a_value_nobody_gave_is_dropped() {
        let question = "How many books are in the database?";
        let arguments =
            json!({"query": "SELECT * FROM books WHERE title = 'The Book of the City of Power';"})
                .to_string();
        let revised = grounded_arguments(&arguments, "query", question, false).unwrap();
        assert_eq!(
            revised,
            json!({"query": "SELECT * FROM books;"}).to_string()
        );
        let revised = grounded_arguments(&arguments, "query", question, true).unwrap();
        assert_eq!(
            revised,
            json!({"query": "SELECT COUNT(*) FROM books;"}).to_string()
        );
    }

    #[test]
    fn queries_that_change_rows_are_left_alone() {
        let question = "Delete the books nobody reads.";
        for query in [
            "DELETE FROM books WHERE title = 'The Book of the City of Power'",
            "UPDATE books SET author = 'X' WHERE title = 'Nothing'",
            "WITH t AS (SELECT 1) DELETE FROM books WHERE title = 'Nothing'",
        ] {
            let arguments = json!({ "query": query }).to_string();
            assert_eq!(
                grounded_arguments(&arguments, "query", question, true),
                None
            );
        }
    }

    #[test]
    fn a_filter_on_values_the_question_or_a_result_gives_stays() {
        let known = "Which books did frank herbert write?\n[{'author': 'Frank Herbert'}]";
        for query in [
            "SELECT title FROM books WHERE author = 'Frank Herbert' ORDER BY title",
            "SELECT title FROM books WHERE author LIKE '%herbert%'",
            "SELECT title FROM books WHERE year > 1960",
        ] {
            let arguments = json!({ "query": query }).to_string();
            assert_eq!(grounded_arguments(&arguments, "query", known, false), None);
        }
        // What follows the filter stays when the filter goes.
        assert_eq!(
            without_invented_filter(
                "SELECT title FROM books WHERE title = 'Emma' ORDER BY title LIMIT 3",
                known
            ),
            "SELECT title FROM books ORDER BY title LIMIT 3"
        );
        // A keyword inside a quoted value is no clause.
        assert_eq!(
            without_invented_filter("SELECT * FROM t WHERE note = 'order by me'", "order by me"),
            "SELECT * FROM t WHERE note = 'order by me'"
        );
    }

    #[test]
    fn counts_are_made_only_of_plain_rows() {
        assert_eq!(counted("select * from books"), "SELECT COUNT(*) from books");
        assert_eq!(
            counted("SELECT title, author FROM books WHERE author = 'X'"),
            "SELECT COUNT(*) FROM books WHERE author = 'X'"
        );
        for kept in [
            "SELECT COUNT(*) FROM books",
            "SELECT author, count(*) FROM books GROUP BY author",
            "SELECT DISTINCT author FROM books",
            "SELECT * FROM books LIMIT 2",
            "PRAGMA table_info(books)",
        ] {
            assert_eq!(counted(kept), kept);
        }
        assert!(asks_how_many("How many books are in the database?"));
        assert!(asks_how_many("What's the number of tables?"));
        assert!(!asks_how_many("Which author wrote Dune?"));
    }
}
