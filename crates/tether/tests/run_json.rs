//! `tether run --json --input jsonl`: a program drives the session through ops on stdin and
//! reads its events on stdout. The real binary, the scripted model server on loopback and
//! server-everything; every event line is decoded into the documented schema
//! (`tether_agent::AgentEvent`).

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use test_support::model::{Recorded, Reply, ScriptedModel, Wire};
use test_support::{everything_stdio, npm_bin, scratch_dir};

/// A running `tether run --json --input jsonl` and its event lines as they come.
struct Driven {
    child: Child,
    stdin: Option<ChildStdin>,
    events: mpsc::Receiver<Value>,
    /// Every event read so far.
    seen: Vec<Value>,
    /// Events read while waiting for another kind, not yet taken by `next`: the stdin reader
    /// and the session run side by side, so an `op_rejected` may come after a question.
    unclaimed: std::collections::VecDeque<Value>,
}

impl Driven {
    fn start(dir: &std::path::Path, args: &[&str]) -> Driven {
        let mut child = test_support::own_data_dir(&mut Command::new(env!("CARGO_BIN_EXE_tether")))
            .args(["run", "--json", "--input", "jsonl"])
            .args(args)
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .env_remove("TETHER_MODEL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tether runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, events) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let event: Value =
                    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
                // Every line is an event of the documented schema.
                serde_json::from_value::<tether_agent::AgentEvent>(event.clone())
                    .unwrap_or_else(|e| panic!("not in the event schema ({e}): {line}"));
                if tx.send(event).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Driven {
            child,
            stdin,
            events,
            seen: Vec::new(),
            unclaimed: std::collections::VecDeque::new(),
        }
    }

    /// The first event of `kind` not taken yet, within a minute.
    fn next(&mut self, kind: &str) -> Value {
        if let Some(at) = self.unclaimed.iter().position(|e| e["type"] == kind) {
            return self.unclaimed.remove(at).unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let event = self
                .events
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {kind} event; saw {:#?}", self.seen));
            self.seen.push(event.clone());
            if event["type"] == kind {
                return event;
            }
            self.unclaimed.push_back(event);
        }
    }

    fn send(&mut self, op: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{op}").unwrap();
        stdin.flush().unwrap();
    }

    /// Every remaining event and the exit code.
    fn finish(mut self) -> (Vec<Value>, Option<i32>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Ok(event) = self
            .events
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            self.seen.push(event);
        }
        drop(self.stdin.take());
        let code = self.child.wait().unwrap().code();
        (self.seen, code)
    }
}

fn tool_reply<'a>(request: &'a Recorded, id: &str) -> &'a str {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no tool message for {id} in {:#}", request.body))
}

fn kinds(events: &[Value]) -> BTreeSet<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_script_approves_one_call_and_rejects_another_of_the_same_turn() {
    let dir = scratch_dir("run-json", "approve");
    // toggle-simulated-logging is not read-only: the default policy asks about each call.
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::calls(&[
                ("c1", "everything__toggle-simulated-logging", "{}"),
                ("c2", "everything__toggle-simulated-logging", "{}"),
            ]),
            Reply::text("One ran, one was refused."),
        ],
    );
    let base = model.base_url();
    let everything = everything_stdio();
    let mut run = Driven::start(
        &dir,
        &[
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "--stdio",
            &everything,
            "toggle logging twice",
        ],
    );
    let started = run.next("session_started");
    assert_eq!(
        started["schema_version"],
        tether_agent::EVENT_SCHEMA_VERSION
    );
    // A line that is not an op is refused in words, and the session goes on.
    run.send(json!({"type": "approve", "id": 1}));
    let rejected = run.next("op_rejected");
    assert!(
        rejected["message"]
            .as_str()
            .unwrap()
            .contains("stdin line 1: not an op"),
        "{rejected}"
    );
    for _ in 0..2 {
        let asked = run.next("permission_requested");
        assert_eq!(asked["name"], "everything__toggle-simulated-logging");
        assert_eq!(
            asked["options"],
            json!(["allow_once", "allow_always", "reject_once", "reject_always"])
        );
        let decision = match asked["call_id"].as_str().unwrap() {
            "c1" => "allow_once",
            "c2" => "reject_once",
            other => panic!("unexpected call {other}"),
        };
        run.send(
            json!({"type": "decide", "request_id": asked["request_id"], "decision": decision}),
        );
    }
    let ended = run.next("turn_ended");
    assert_eq!(ended["stop_reason"], "end_turn");
    assert_eq!(ended["text"], "One ran, one was refused.");
    let (events, code) = run.finish();
    assert_eq!(code, Some(0), "{events:#?}");
    assert_eq!(events.last().unwrap()["type"], "session_ended");

    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_started")
        .collect();
    assert_eq!(started.len(), 1, "{events:#?}");
    assert_eq!(started[0]["id"], "c1");
    let pending: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_pending")
        .collect();
    assert_eq!(
        pending.len(),
        2,
        "each call is announced before it is checked"
    );
    let requests = model.requests();
    assert!(
        !tool_reply(&requests[1], "c1").contains("denied"),
        "{}",
        tool_reply(&requests[1], "c1")
    );
    assert!(
        tool_reply(&requests[1], "c2").contains("the user denied this call"),
        "{}",
        tool_reply(&requests[1], "c2")
    );
    let seen = kinds(&events);
    for kind in [
        "session_started",
        "turn_started",
        "tool_call_pending",
        "permission_requested",
        "tool_call_started",
        "tool_call_finished",
        "text_delta",
        "usage",
        "message_added",
        "turn_ended",
        "op_rejected",
        "session_ended",
    ] {
        assert!(seen.contains(kind), "no {kind} event: {seen:?}");
    }
}

#[test]
fn an_interrupt_while_permission_is_pending_cancels_the_turn() {
    let dir = scratch_dir("run-json", "interrupt");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__toggle-simulated-logging", "{}"),
            Reply::text("unreachable"),
        ],
    );
    let base = model.base_url();
    let everything = everything_stdio();
    let mut run = Driven::start(
        &dir,
        &[
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "--stdio",
            &everything,
            "toggle logging",
        ],
    );
    let asked = run.next("permission_requested");
    run.send(json!({"type": "interrupt"}));
    let ended = run.next("turn_ended");
    assert_eq!(ended["stop_reason"], "cancelled");
    // The question was withdrawn: answering it now is refused in words.
    run.send(
        json!({"type": "decide", "request_id": asked["request_id"], "decision": "allow_once"}),
    );
    let (events, code) = run.finish();
    assert_eq!(code, Some(130), "{events:#?}");
    assert!(
        !events.iter().any(|e| e["type"] == "tool_call_started"),
        "the call never ran: {events:#?}"
    );
    assert_eq!(model.requests().len(), 1, "the model was not asked again");
}

#[test]
fn a_form_answered_after_the_servers_timeout_still_completes_the_call() {
    let dir = scratch_dir("run-json", "patient");
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"everything": {
            "command": npm_bin("mcp-server-everything"),
            "args": ["stdio"],
            "timeout": 2,
        }}})
        .to_string(),
    )
    .unwrap();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__trigger-elicitation-request", "{}"),
            Reply::text("Noted."),
        ],
    );
    let base = model.base_url();
    let config = config.display().to_string();
    let mut run = Driven::start(
        &dir,
        &[
            "--model",
            "openai:scripted",
            "--base-url",
            &base,
            "--config",
            &config,
            "--approve",
            "auto",
            "ask me something",
        ],
    );
    let asked = run.next("elicitation_requested");
    assert_eq!(asked["server"], "everything");
    assert_eq!(asked["call_id"], "c1", "the question names its call");
    // A person takes twice the server's own 2 s timeout to answer.
    std::thread::sleep(Duration::from_secs(4));
    run.send(json!({"type": "answer", "request_id": asked["request_id"], "action": "decline"}));
    let finished = run.next("tool_call_finished");
    let (events, code) = run.finish();
    assert_eq!(code, Some(0), "{events:#?}");
    assert_eq!(finished["is_error"], false, "{finished}");
    let told = tool_reply(&model.requests()[1], "c1").to_string();
    assert!(!told.contains("timed out"), "{told}");
    assert!(told.to_lowercase().contains("decline"), "{told}");
}
