//! Unit tests of the lexical index and the readings it ranks with.

use super::*;
use serde_json::json;

fn tool(server: &str, name: &str, description: &str) -> QualifiedTool {
    QualifiedTool {
        qualified_name: format!("{server}__{name}"),
        server: server.into(),
        tool: serde_json::from_value(json!({"name": name, "description": description})).unwrap(),
    }
}

fn catalogue() -> Vec<QualifiedTool> {
    vec![
        tool("weather", "getWeather", "Current conditions for a city."),
        tool("weather", "get_forecast", "Forecast for the next days."),
        tool("files", "read_file", "Read a file's contents."),
        tool("files", "write_file", "Write text to a file."),
        tool("math", "add", "Add two numbers."),
        tool("git", "git_status", "Show the working tree status."),
    ]
}

#[test]
fn a_file_named_in_the_query_is_a_file_not_a_topic() {
    let mut tools = catalogue();
    tools.push(tool(
        "music",
        "note_duration",
        "Duration of a musical note.",
    ));
    tools.push(tool("music", "notes_in_scale", "The notes of a scale."));
    let index = SearchIndex::build(&tools, Ranking::default());
    let hits = index.search("what's in my notes.txt?", 3);
    assert_eq!(tools[hits[0].index].tool.name, "read_file", "{hits:?}");
    // Plain BM25 reads the file's name as words.
    let plain = SearchIndex::build(&tools, Ranking::plain());
    let hits = plain.search("what's in my notes.txt?", 3);
    assert_eq!(tools[hits[0].index].server, "music", "{hits:?}");
}

#[test]
fn identifiers_are_split_every_way() {
    assert_eq!(split_identifiers("getWeather"), ["get", "weather"]);
    assert_eq!(split_identifiers("get_weather"), ["get", "weather"]);
    assert_eq!(
        split_identifiers("weather__get-weather"),
        ["weather", "get", "weather"]
    );
    assert_eq!(
        split_identifiers("getHTTPResponse2"),
        ["get", "http", "response", "2"]
    );
}

#[test]
fn words_find_tools_through_their_identifiers() {
    let tools = catalogue();
    let index = SearchIndex::build(&tools, Ranking::default());
    let hits = index.search("what's the weather like in Paris", 3);
    assert_eq!(tools[hits[0].index].tool.name, "getWeather", "{hits:?}");
    let hits = index.search("forecasts", 3);
    assert_eq!(tools[hits[0].index].tool.name, "get_forecast");
    let hits = index.search("reading files", 3);
    assert_eq!(tools[hits[0].index].tool.name, "read_file");
}

#[test]
fn exact_names_and_select_always_rank_first() {
    let tools = catalogue();
    let index = SearchIndex::build(&tools, Ranking::default());
    // "file" words would favour the file tools; the named tool still comes first.
    let hits = index.search("call git_status on the file read", 3);
    assert_eq!(tools[hits[0].index].tool.name, "git_status");
    assert!(hits[0].exact);
    let hits = index.search("files__write_file", 1);
    assert_eq!(tools[hits[0].index].qualified_name, "files__write_file");
    let hits = index.search("select:math__add, read_file", 5);
    let names: Vec<&str> = hits
        .iter()
        .map(|h| tools[h.index].tool.name.as_str())
        .collect();
    assert_eq!(names, ["add", "read_file"]);
    let (_, missing) = index.select("nope,add");
    assert_eq!(missing, ["nope"]);
}

#[test]
fn everyday_words_find_the_tools_that_name_things_otherwise() {
    let tools = vec![
        tool("fs", "create_directory", "Create a new directory."),
        tool("fs", "move_file", "Move or rename a file."),
        tool("fs", "write_file", "Write a new file."),
        tool("notes", "delete_entities", "Delete entities from memory."),
        tool("fs", "search_files", "Search for files matching a pattern."),
        tool("fs", "get_file_info", "Size and times of a file."),
        tool("db", "read_query", "Run a SELECT query on the database."),
    ];
    let index = SearchIndex::build(&tools, Ranking::default());
    let first = |q: &str| tools[index.search(q, 1)[0].index].tool.name.clone();
    assert_eq!(
        first("make a new folder called archive"),
        "create_directory"
    );
    assert_eq!(first("forget about Bob"), "delete_entities");
    assert_eq!(first("where is invoice.pdf kept?"), "search_files");
    assert_eq!(
        first("is there a file called budget anywhere in my documents?"),
        "search_files"
    );
    assert_eq!(first("rows of the db"), "read_query");
    // The person's own word still wins where a tool uses it.
    assert_eq!(first("rename a.txt"), "move_file");
}

#[test]
fn abbreviated_joined_and_everyday_names_are_found() {
    let tools = vec![
        tool("sci", "contrib_lookup", "What a scientist gave to science."),
        tool("sci", "science_quiz", "Quiz questions about science."),
        tool("games", "boardgame_info", "Ratings and player counts."),
        tool("games", "board_search", "Search circuit boards."),
        tool("games", "game_search", "Search video games by rating."),
        tool(
            "money",
            "convert_currency",
            "Convert an amount between currencies.",
        ),
        tool("history", "euro_history", "Events of European history."),
    ];
    let index = SearchIndex::build(&tools, Ranking::default());
    let first = |q: &str| tools[index.search(q, 1)[0].index].tool.name.clone();
    // `contrib` abbreviates "contributions"; nothing else in the question names the tool.
    assert_eq!(
        first("Einstein's contributions to science"),
        "contrib_lookup"
    );
    // "board game" is the tool's `boardgame`, above tools with one of the two words.
    assert_eq!(first("rating of the board game Catan"), "boardgame_info");
    // Money words are a currency, not the history of Europe.
    assert_eq!(first("100 euros in dollars"), "convert_currency");
}

#[test]
fn plain_ranking_does_not_split_or_boost() {
    let tools = catalogue();
    let index = SearchIndex::build(&tools, Ranking::plain());
    assert!(index.search("forecasts", 3).is_empty());
    assert!(index.search("weather", 3).iter().all(|h| !h.exact));
}
