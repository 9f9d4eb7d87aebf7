use super::*;
use crate::catalog::ServerTools;
use crate::semantic::{SemanticRanker, Words};
use tether_protocol::Tool;

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    serde_json::from_value(json!({"name": name, "description": description, "inputSchema": schema}))
        .unwrap()
}

fn snapshot() -> Snapshot {
    let number = json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]});
    let mut math: Vec<Tool> = vec![
        tool("add", "Add two numbers.", number.clone()),
        tool("multiply", "Multiply two numbers.", number),
    ];
    for i in 0..200 {
        math.push(tool(
            &format!("filler_{i}"),
            &format!("Filler operation number {i} on widgets."),
            json!({"type": "object"}),
        ));
    }
    Snapshot::new(vec![
        ServerTools {
            server: "time".into(),
            tools: vec![tool("now", "The current time.", json!({"type": "object"}))],
            always_load: true,
        },
        ServerTools {
            server: "math".into(),
            tools: math,
            always_load: false,
        },
    ])
}

fn names(definitions: &[ToolDefinition]) -> Vec<&str> {
    definitions.iter().map(|d| d.name.as_str()).collect()
}

#[test]
fn search_preloads_then_appends_what_a_search_loads() {
    let snapshot = snapshot();
    let search = SearchTools::new(SelectionOptions {
        mode: SelectionMode::Search,
        preload: 1,
        ..SelectionOptions::default()
    });
    assert_eq!(
        names(&search.offer(&snapshot)),
        ["time__now", SEARCH_TOOL],
        "always-loaded first, then the search tool"
    );
    assert_eq!(
        search.start_turn(&snapshot, "please add 2 and 3"),
        ["math__add"]
    );
    let Resolved::Answered { text, loaded } = search.resolve(
        &snapshot,
        SEARCH_TOOL,
        json!({"query": "multiply numbers", "limit": 1}),
    ) else {
        panic!("a search is answered by the selection")
    };
    assert_eq!(loaded, ["math__multiply"]);
    assert!(
        text.contains("math__multiply: Multiply two numbers."),
        "{text}"
    );
    assert_eq!(
        names(&search.offer(&snapshot)),
        ["time__now", SEARCH_TOOL, "math__add", "math__multiply"],
        "loaded tools are appended in load order"
    );
    assert!(matches!(
        search.resolve(&snapshot, "math__nothing", json!({})),
        Resolved::Unknown
    ));
}

#[test]
fn meta_validates_against_the_real_schema() {
    let snapshot = snapshot();
    let meta = MetaTool::new(SelectionOptions::default());
    assert_eq!(names(&meta.offer(&snapshot)), ["time__now", META_TOOL]);
    let call = |args: Value| meta.resolve(&snapshot, META_TOOL, args);
    match call(json!({"server": "math", "tool": "add", "params": {"a": 1, "b": 2}})) {
        Resolved::Tool { tool, arguments } => {
            assert_eq!(tool.qualified_name, "math__add");
            assert_eq!(arguments, json!({"a": 1, "b": 2}));
        }
        other => panic!("{other:?}"),
    }
    let Resolved::Refused(bad) =
        call(json!({"server": "math", "tool": "add", "params": {"a": "x"}}))
    else {
        panic!("bad params are refused")
    };
    assert!(
        bad.contains("\"required\":[\"a\",\"b\"]"),
        "the schema is in the error: {bad}"
    );
    let Resolved::Refused(wrong) = call(json!({"server": "maths", "tool": "add"})) else {
        panic!()
    };
    assert!(
        wrong.contains("unknown server \"maths\"") && wrong.contains("math"),
        "{wrong}"
    );
    let Resolved::Refused(typo) = call(json!({"server": "math", "tool": "ad"})) else {
        panic!()
    };
    assert!(typo.contains("no tool \"ad\" on server \"math\""), "{typo}");
    let Resolved::Answered { text, .. } = call(json!({"query": "multiply"})) else {
        panic!()
    };
    assert!(
        text.contains("tool \"multiply\"") && text.contains("Parameters"),
        "{text}"
    );
}

#[test]
fn meta_without_search_is_narrowed_to_the_preselected_tools() {
    let snapshot = snapshot();
    let meta = MetaTool::new(SelectionOptions {
        mode: SelectionMode::Meta,
        search_tool: false,
        preload: 1,
        ..SelectionOptions::default()
    });
    assert_eq!(
        meta.start_turn(&snapshot, "please add 2 and 3"),
        ["math__add"]
    );
    let offered = meta.offer(&snapshot);
    assert_eq!(names(&offered), ["time__now", META_TOOL]);
    let narrowed = &offered[1];
    assert!(
        narrowed
            .description
            .contains("tool \"add\": Add two numbers.")
            && !narrowed.description.contains("multiply"),
        "{}",
        narrowed.description
    );
    assert_eq!(
        narrowed.parameters["oneOf"][0]["properties"]["tool"],
        json!({"const": "add"})
    );
    assert_eq!(
        narrowed.parameters["oneOf"][0]["properties"]["params"]["required"],
        json!(["a", "b"])
    );
    // Narrowing is only what is offered: any tool can still be reached by a call.
    assert!(matches!(
        meta.resolve(
            &snapshot,
            META_TOOL,
            json!({"server": "math", "tool": "multiply", "params": {"a": 1, "b": 2}})
        ),
        Resolved::Tool { .. }
    ));
}

#[test]
fn meta_description_shrinks_to_its_budget() {
    let snapshot = snapshot();
    let definition = MetaTool::definition(&snapshot);
    assert!(definition.description.len() / 4 <= META_DESCRIPTION_BUDGET);
    assert!(definition.description.contains("math"));
}

#[test]
fn auto_is_all_while_it_fits_and_search_beyond() {
    let snapshot = snapshot();
    let roomy = AutoTools::new(SelectionOptions {
        context_window: 1_000_000,
        ..SelectionOptions::default()
    });
    assert_eq!(roomy.offer(&snapshot).len(), snapshot.tools().len());
    let tight = AutoTools::new(SelectionOptions {
        context_window: 8_000,
        ..SelectionOptions::default()
    });
    let offered = tight.offer(&snapshot);
    assert!(
        names(&offered).contains(&SEARCH_TOOL),
        "{:?}",
        names(&offered)
    );
    assert!(offered.len() < 5);
}

/// A pre-selected tool whose call failed gives way to the others ranked for the message,
/// once a turn; a tool that was not offered changes nothing.
#[test]
fn a_failed_pre_selected_call_gives_way_to_the_runners_up() {
    let snapshot = Snapshot::new(vec![ServerTools {
        server: "math".into(),
        tools: vec![
            tool("add", "Add two numbers.", json!({"type": "object"})),
            tool(
                "subtract",
                "Subtract two numbers.",
                json!({"type": "object"}),
            ),
            tool(
                "multiply",
                "Multiply two numbers.",
                json!({"type": "object"}),
            ),
            tool(
                "forecast",
                "Weather for the week.",
                json!({"type": "object"}),
            ),
        ],
        always_load: false,
    }])
    .with_semantic(Some(SemanticRanker::new(Arc::new(Words), None)));
    let selection = SearchTools::new(SelectionOptions {
        mode: SelectionMode::Search,
        search_tool: false,
        preload: 3,
        preload_margin: Some(1.0),
        keep_loaded: false,
        ..SelectionOptions::default()
    });
    let asked = "take away 9 from 30";
    assert_eq!(selection.start_turn(&snapshot, asked), ["math__subtract"]);
    assert!(
        selection
            .after_failed_call(&snapshot, "math__forecast")
            .is_empty(),
        "not offered: nothing changes"
    );
    let instead = selection.after_failed_call(&snapshot, "math__subtract");
    assert_eq!(instead.len(), 2, "{instead:?}");
    assert!(!instead.contains(&"math__subtract".to_string()));
    assert_eq!(
        selection.loaded(),
        instead,
        "the failed tool is no longer offered"
    );
    assert!(
        selection
            .after_failed_call(&snapshot, &instead[0])
            .is_empty(),
        "once a turn"
    );
    // The next turn ranks afresh.
    assert_eq!(selection.start_turn(&snapshot, asked), ["math__subtract"]);
}
