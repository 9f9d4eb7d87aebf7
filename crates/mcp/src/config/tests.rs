use super::*;
use proptest::strategy::Strategy;

fn parse(text: &str) -> Result<Config, McpError> {
    Config::parse_with_env(text, Path::new("cfg.json"), &|v| match v {
        "HOME_DIR" => Some("/home/u".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    })
}

#[test]
fn a_misplaced_servers_key_is_an_error_not_an_empty_config() {
    let message = |text: &str| match parse(text) {
        Err(McpError::Config { message, .. }) => message,
        other => panic!("expected a config error for {text}, got {other:?}"),
    };
    let vs_code = message(r#"{"servers": {"x": {"type": "http", "url": "http://h/"}}}"#);
    assert!(
        vs_code.contains("VS Code") && vs_code.contains("\"mcpServers\""),
        "{vs_code}"
    );
    for typo in ["mcpServer", "mcp_servers", "MCPServers", "mcpSevers"] {
        let text = format!(r#"{{"{typo}": {{"x": {{"command": "x"}}}}}}"#);
        let said = message(&text);
        assert!(
            said.contains(&format!("\"{typo}\"")) && said.contains("did you mean \"mcpServers\""),
            "{said}"
        );
    }
    // Settings alone are a valid config file (a user's own defaults), and so is an empty
    // server list; neither declares servers only in the second case.
    let settings = parse(r#"{"model": "openai:gpt-4o-mini"}"#).unwrap();
    assert!(!settings.declares_servers);
    assert!(parse(r#"{"mcpServers": {}}"#).unwrap().declares_servers);
}

#[test]
fn absurd_timeouts_are_errors_not_panics() {
    for (text, fragment) in [
        (r#""timeout": 1e30"#, "too long"),
        (r#""timeout": "1e300s""#, "too long"),
        (r#""timeout": -1"#, "positive"),
    ] {
        let config = format!(r#"{{"mcpServers": {{"a": {{"command": "x", {text}}}}}}}"#);
        let error = parse(&config).unwrap_err().to_string();
        assert!(error.contains(fragment), "{text}: {error}");
    }
    assert_eq!(duration_from_seconds(2.5), Ok(Duration::from_millis(2500)));
}

#[test]
fn claude_desktop_shape_parses_unchanged() {
    let config = parse(
        r#"{"mcpServers": {
            "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "${HOME_DIR}"], "autoApprove": []},
            "remote": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-Key": "${KEY:-none}"}, "timeout": "500ms"},
            "old": {"type": "sse", "url": "http://127.0.0.1:9/sse", "disabled": true}
        }}"#,
    )
    .unwrap();
    assert_eq!(config.servers.len(), 3);
    assert_eq!(config.servers[0].name, "files");
    let Transport::Stdio { args, .. } = &config.servers[0].transport else {
        panic!()
    };
    assert_eq!(args[2], "/home/u");
    let Transport::Http { headers, .. } = &config.servers[1].transport else {
        panic!()
    };
    assert_eq!(headers["X-Key"], "none");
    assert_eq!(config.servers[1].timeout, Duration::from_millis(500));
    assert!(matches!(config.servers[2].transport, Transport::Sse { .. }));
    assert!(config.servers[2].disabled);
    // Another host's key is tolerated but mentioned.
    assert_eq!(config.warnings.len(), 1);
    assert!(config.warnings[0].contains("autoApprove"));
}

#[test]
fn syntax_error_names_file_line_and_column() {
    let err =
        parse("{\n  \"mcpServers\": {\n    \"a\": {\"command\": \"x\",}\n  }\n}").unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("config cfg.json:3:"), "{text}");
}

#[test]
fn wrong_type_names_the_key() {
    let err =
        parse(r#"{"mcpServers": {"a": {"command": "x", "args": "not-a-list"}}}"#).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("mcpServers.a.args"), "{text}");
    assert!(text.contains("expected a sequence"), "{text}");
}

#[test]
fn missing_command_and_url_says_what_to_add() {
    let err = parse(r#"{"mcpServers": {"a": {"comand": "x"}}}"#).unwrap_err();
    assert!(err.to_string().contains("needs \"command\""), "{err}");
}

#[test]
fn typo_warning_suggests_the_key() {
    let config = parse(r#"{"mcpServers": {"a": {"command": "x", "arsg": []}}}"#).unwrap();
    assert!(
        config.warnings[0].contains("did you mean \"args\""),
        "{:?}",
        config.warnings
    );
}

#[test]
fn unset_variable_without_default_is_an_error() {
    let err =
        parse(r#"{"mcpServers": {"a": {"command": "x", "env": {"T": "${TOKEN}"}}}}"#).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("mcpServers.a: env.T: environment variable TOKEN is not set"),
        "{text}"
    );
}

#[test]
fn substitution_forms() {
    let env = |v: &str| (v == "A").then(|| "1".to_string());
    assert_eq!(substitute("x${A}y", &env).unwrap(), "x1y");
    assert_eq!(substitute("${B:-dflt}", &env).unwrap(), "dflt");
    assert_eq!(substitute("$$HOME $5", &env).unwrap(), "$HOME $5");
    assert!(substitute("${A", &env).is_err());
}

#[test]
fn tool_filters_use_globs() {
    let mut s = ServerConfig::stdio("a", "x", vec![]);
    s.allowed_tools = Some(vec!["read_*".into(), "list".into()]);
    s.disabled_tools = vec!["read_secret*".into()];
    assert!(s.offers_tool("read_file"));
    assert!(s.offers_tool("list"));
    assert!(!s.offers_tool("write_file"));
    assert!(!s.offers_tool("read_secret_key"));
    assert!(glob_match("*", "anything"));
    assert!(glob_match("a*c*e", "abcde"));
    assert!(!glob_match("a*c*e", "abcdf"));
}

#[test]
fn adhoc_names_are_short_and_unique() {
    let words = |s: &str| shlex::split(s).unwrap();
    assert_eq!(
        derive_server_name(&words(
            "npx -y @modelcontextprotocol/server-everything@2026.8.31"
        )),
        "everything"
    );
    assert_eq!(
        derive_server_name(&words(
            "peers/node_modules/.bin/mcp-server-everything stdio"
        )),
        "everything"
    );
    assert_eq!(
        derive_server_name(&words("uvx mcp-server-time --local-timezone UTC")),
        "time"
    );
    assert_eq!(
        derive_server_name(&words("python3 my_tools.py")),
        "my_tools"
    );
    // An entry file is named by its project's directory, not by the arguments after it.
    assert_eq!(
        derive_server_name(&words(
            "node /opt/servers/src/filesystem/dist/index.js /tmp"
        )),
        "filesystem"
    );
    assert_eq!(
        derive_server_name(&words("node ./weather-mcp/build/index.js")),
        "weather"
    );
    assert_eq!(derive_server_name(&words("node index.js /tmp")), "server");
    let taken = vec!["everything".to_string()];
    let s = adhoc_stdio("mcp-server-everything", &taken).unwrap();
    assert_eq!(s.name, "everything-2");
    assert!(adhoc_url("ftp://x", &[]).is_err());
    assert_eq!(adhoc_stdio("files=npx -y pkg", &[]).unwrap().name, "files");
    assert_eq!(
        adhoc_url("ev=http://127.0.0.1:1/mcp", &[]).unwrap().name,
        "ev"
    );
    assert_eq!(
        adhoc_url("http://127.0.0.1:3001/mcp", &[]).unwrap().name,
        "http"
    );
    assert_eq!(
        adhoc_url("https://mcp.example.com/mcp", &[]).unwrap().name,
        "mcp"
    );
}

proptest::proptest! {
    /// Whatever the config file holds, loading it gives a config or an error naming the
    /// file; it never panics.
    #[test]
    fn any_config_text_loads_or_names_the_file(text in "\\PC{0,200}") {
        if let Err(error) = parse(&text) {
            proptest::prop_assert!(error.to_string().contains("cfg.json"), "{}", error);
        }
    }

    /// The same for JSON of the right outer shape with arbitrary server entries.
    #[test]
    fn any_server_entry_loads_or_names_the_file(
        name in "\\PC{0,12}",
        key in "(command|args|url|env|timeout|disabled|type|headers|x)",
        value in proptest::prop_oneof![
            proptest::strategy::Just(serde_json::json!(null)),
            proptest::num::f64::ANY.prop_map(|f| serde_json::json!(f)),
            "\\PC{0,20}".prop_map(|s| serde_json::json!(s)),
            proptest::collection::vec("\\PC{0,8}", 0..3).prop_map(|v| serde_json::json!(v)),
        ],
    ) {
        let text = serde_json::json!({"mcpServers": {name: {key: value}}}).to_string();
        if let Err(error) = parse(&text) {
            proptest::prop_assert!(error.to_string().contains("cfg.json"), "{}", error);
        }
    }
}
