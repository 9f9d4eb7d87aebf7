//! `tether acp` in editors played by the official ACP SDKs (the Python SDK's `acp.Client` and
//! the TypeScript SDK's `ClientApp`), each running the same scenario:
//! initialize, a session with the editor's MCP servers (server-everything, mcp-server-time and
//! a broken one), prompts whose tool call needs permission answered allow once, reject once
//! and cancelled mid-question, and `session/load` replaying the history. The model is the
//! scripted OpenAI-format server on loopback.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::Stdio;

use serde_json::Value;
use test_support::model::{Recorded, Reply, ScriptedModel, Wire};
use test_support::{everything_stdio, py_acp_client, scratch_dir, ts_acp_client, venv_bin};

fn tool_reply(request: &Recorded, id: &str) -> String {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool message for {id} in {:#}", request.body))
        .to_string()
}

/// The updates of `kind` about tool call `id`.
fn about<'a>(updates: &'a [Value], kind: &str, id: &str) -> Vec<&'a Value> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind && u["toolCallId"] == id)
        .collect()
}

fn said(updates: &[Value]) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

#[test]
fn the_python_sdk_client_drives_permissions_cancel_and_load() {
    editor_scenario("python", py_acp_client());
}

#[test]
fn the_typescript_sdk_client_drives_permissions_cancel_and_load() {
    editor_scenario("typescript", ts_acp_client());
}

/// Runs the scripted editor `client` against `tether acp` and checks its report.
fn editor_scenario(name: &str, mut client: std::process::Command) {
    let dir = scratch_dir("acp", name);
    let toggle = "everything__toggle-simulated-logging";
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", toggle, "{}"),
            Reply::text("Logging toggled."),
            Reply::call("c2", toggle, "{}"),
            Reply::text("It was refused."),
            Reply::call("c3", toggle, "{}"),
            Reply::text("unreachable: the turn was cancelled"),
        ],
    );
    let base = model.base_url();
    let time = venv_bin("mcp-server-time").display().to_string();
    let output = client
        .args([
            env!("CARGO_BIN_EXE_tether"),
            dir.to_str().unwrap(),
            &everything_stdio(),
            &time,
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
        ])
        .env("TETHER_DATA_DIR", dir.join("data"))
        .env_remove("TETHER_MODEL")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stdout)));

    assert_eq!(report["initialize"]["protocolVersion"], 1);
    assert_eq!(
        report["initialize"]["agentCapabilities"]["loadSession"],
        true
    );
    assert_eq!(report["modes"]["currentModeId"], "ask");

    // The editor's servers were started, the broken one reported in the thread.
    let offered = model.requests()[0].offered_tools();
    assert!(offered.iter().any(|t| t == toggle), "{offered:?}");
    assert!(
        offered.iter().any(|t| t.starts_with("time__")),
        "{offered:?}"
    );
    let updates: Vec<Value> = report["updates"].as_array().unwrap().clone();
    assert!(
        said(&updates).contains("\"broken\""),
        "the failed server is shown: {}",
        said(&updates)
    );

    // Every call asked with the four options, and each answer took effect.
    let asked = report["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 3, "{asked:#?}");
    for question in asked {
        assert_eq!(
            question["options"],
            serde_json::json!(["allow_once", "allow_always", "reject_once", "reject_always"])
        );
    }
    let turns = report["turns"].as_array().unwrap();
    assert_eq!(turns[0]["stopReason"], "end_turn");
    let first: Vec<Value> = turns[0]["updates"].as_array().unwrap().clone();
    let call = about(&first, "tool_call", "c1");
    assert_eq!(call.len(), 1, "{first:#?}");
    assert_eq!(call[0]["status"], "pending");
    assert!(call[0]["title"].as_str().unwrap().contains("everything"));
    let statuses: Vec<&str> = about(&first, "tool_call_update", "c1")
        .iter()
        .map(|u| u["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"], "{first:#?}");
    assert!(said(&first).contains("Logging toggled."));

    assert_eq!(turns[1]["stopReason"], "end_turn");
    let second: Vec<Value> = turns[1]["updates"].as_array().unwrap().clone();
    let statuses: Vec<&str> = about(&second, "tool_call_update", "c2")
        .iter()
        .map(|u| u["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["failed"], "never started: {second:#?}");
    let requests = model.requests();
    assert!(!tool_reply(&requests[1], "c1").contains("denied"));
    assert!(tool_reply(&requests[3], "c2").contains("the user denied this call"));

    assert_eq!(turns[2]["stopReason"], "cancelled");
    assert_eq!(
        requests.len(),
        5,
        "the cancelled turn asked the model nothing more"
    );

    // A second agent process replays the saved session.
    let replayed = report["replayed"].as_array().unwrap();
    let users: Vec<&str> = replayed
        .iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert_eq!(
        users,
        ["toggle logging", "toggle it again", "and once more"],
        "{replayed:#?}"
    );
    assert!(said(replayed).contains("Logging toggled."));

    // The slash commands are offered as data and run when typed.
    let offered: Vec<&str> = report["loadedUpdates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == "available_commands_update")
        .flat_map(|u| u["availableCommands"].as_array().unwrap())
        .filter_map(|c| c["name"].as_str())
        .collect();
    for name in [
        "help", "tools", "servers", "model", "clear", "compact", "usage",
    ] {
        assert!(offered.contains(&name), "{name}: {offered:?}");
    }
    assert!(!offered.contains(&"quit"), "{offered:?}");
    let commands = report["commands"].as_array().unwrap();
    let shown: Vec<String> = commands
        .iter()
        .map(|c| {
            assert_eq!(c["stopReason"], "end_turn", "{c:#?}");
            said(c["updates"].as_array().unwrap())
        })
        .collect();
    assert!(
        shown[0].contains("time__get_current_time") && !shown[0].contains(toggle),
        "/tools time: {}",
        shown[0]
    );
    assert!(shown[1].contains("messages in context"), "{}", shown[1]);
    assert!(!shown[1].contains("(0 messages"), "{}", shown[1]);
    assert!(shown[2].contains("conversation cleared"), "{}", shown[2]);
    assert!(shown[3].contains("(0 messages in context)"), "{}", shown[3]);
    assert_eq!(model.requests().len(), 5, "no command reached the model");

    // The model is a config option, switched by the editor.
    let options = report["configOptions"].as_array().unwrap();
    assert_eq!(options[0]["id"], "model", "{options:#?}");
    assert_eq!(options[0]["currentValue"], "openai:scripted");
    let switched = report["switched"].as_array().unwrap();
    assert_eq!(switched[0]["currentValue"], "openai:other-model");
}
