//! `tether chat` in a real terminal (tmux): a conversation with a tool call and an approval,
//! slash commands, history recall across runs, Ctrl-C during a call, and sessions that
//! survive `kill -9` and resume with every earlier turn.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use test_support::model::{Gate, Reply, ScriptedModel, Wire};
use test_support::terminal::Terminal;
use test_support::{everything_stdio, time_stdio};

/// Terminal tests run one at a time: each drives a tmux session, a chat and a server, and ten
/// at once on two cores slowed the chat enough for keystrokes to race its prompt.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn workdir(test: &str) -> PathBuf {
    test_support::scratch_dir("chat", test)
}

/// Starts `tether ARGS` in `dir`, with its own data dir and piped standard streams.
fn spawn_in(dir: &Path, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .current_dir(dir)
        .env("TETHER_DATA_DIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `tether … chat …` as a shell command line for the terminal.
fn chat_command(dir: &Path, model: &ScriptedModel, extra: &str) -> String {
    format!(
        "cd {} && {} --stdio '{}' chat --model openai:scripted --base-url {} {extra}",
        dir.display(),
        env!("CARGO_BIN_EXE_tether"),
        everything_stdio(),
        model.base_url()
    )
}

fn env(dir: &Path) -> Vec<(&'static str, String)> {
    vec![
        ("TETHER_DATA_DIR", dir.display().to_string()),
        ("XDG_CONFIG_HOME", dir.display().to_string()),
        ("NO_COLOR", "1".to_string()),
    ]
}

/// Waits for the first prompt and for server-everything's log of the roots it fetched at
/// start: that line comes when the server gets round to it, and must not land on a later
/// prompt line where a test waits for an empty prompt.
fn wait_until_ready(terminal: &Terminal) {
    terminal.wait_for("you> ");
    terminal.wait_for("Roots updated:");
}

/// Like [`chat_command`], with the servers of `config` instead of server-everything.
fn chat_command_with_config(dir: &Path, config: &Path, model: &ScriptedModel) -> String {
    format!(
        "cd {} && {} --config {} chat --model openai:scripted --base-url {}",
        dir.display(),
        env!("CARGO_BIN_EXE_tether"),
        config.display(),
        model.base_url()
    )
}

fn start(dir: &Path, command: &str) -> Terminal {
    let env = env(dir);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Terminal::start(command, &pairs)
}

#[test]
fn run_remembers_an_approval_in_the_config_it_was_given() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("run-remember");
    let config = dir.join("team.json");
    std::fs::write(&config, r#"{"approval": {"deny": ["*__delete_*"]}}"#).unwrap();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__toggle-subscriber-updates", "{}"),
            Reply::text("Updates are on."),
        ],
    );
    let command = format!(
        "cd {} && {} --config {} --stdio '{}' run --model openai:scripted --base-url {} 'turn updates on'",
        dir.display(),
        env!("CARGO_BIN_EXE_tether"),
        config.display(),
        everything_stdio(),
        model.base_url()
    );
    let terminal = start(&dir, &command);
    terminal.wait_for("[r]emember in the config, then Enter:");
    terminal.type_text("r");
    terminal.press(&["Enter"]);
    terminal.wait_for("Updates are on.");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(
        written["approval"]["allow"],
        serde_json::json!(["everything__toggle-subscriber-updates"])
    );
    // What was there stays.
    assert_eq!(
        written["approval"]["deny"],
        serde_json::json!(["*__delete_*"])
    );
}

#[test]
fn a_conversation_with_approval_commands_history_and_ctrl_c() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("terminal");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__toggle-subscriber-updates", "{}"),
            Reply::text("Updates are **on**."),
            Reply::call(
                "c2",
                "everything__trigger-long-running-operation",
                r#"{"duration": 60, "steps": 60}"#,
            ),
            Reply::text("It was stopped."),
        ],
    );
    let terminal = start(&dir, &chat_command(&dir, &model, ""));
    wait_until_ready(&terminal);

    // A typo suggests the closest command; /tools filters.
    terminal.type_text("/tols");
    terminal.press(&["Enter"]);
    terminal.wait_for("unknown command /tols; did you mean /tools?");
    terminal.type_text("/tools long");
    terminal.press(&["Enter"]);
    terminal.wait_for("everything__trigger-long-running-operation  Demonstrates a long running");

    // A tool that is not read-only asks; "r" allows it and remembers that in the config.
    terminal.type_text("run it");
    terminal.press(&["Enter"]);
    terminal.wait_for("always for [s]erver \"everything\" / [r]emember in the config, then Enter:");
    terminal.type_text("r");
    terminal.press(&["Enter"]);
    let screen = terminal.wait_for("Updates are on.");
    assert!(screen.contains("→ everything__toggle-subscriber-updates"));
    terminal.wait_for(" tokens; ");
    let config: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tether/config.json")).unwrap())
            .unwrap();
    assert_eq!(
        config["approval"]["allow"],
        serde_json::json!(["everything__toggle-subscriber-updates"])
    );
    // The summarised result can be expanded.
    terminal.type_text("/result");
    terminal.press(&["Enter"]);
    terminal.wait_for("Client will receive updates for any resources");

    // History: Up recalls the last line.
    terminal.press(&["Up"]);
    // Counted without the prompt: a server's log line may land on the prompt line before the
    // typed command.
    terminal.wait_for_count("/result", 2, Duration::from_secs(30));
    terminal.press(&["C-u"]);

    // Ctrl-C during a long (read-only, so not asked) call cancels the turn, not the chat.
    terminal.type_text("run it longer");
    terminal.press(&["Enter"]);
    terminal.wait_for("(1/60)");
    terminal.press(&["C-c"]);
    terminal.wait_for("(cancelled)");
    terminal.wait_for_count("you> ", 5, Duration::from_secs(30));
    // The cancelled call has a result in the conversation, so the next request is one a
    // provider accepts: the call c2, then its result, then the new question.
    terminal.type_text("what happened?");
    terminal.press(&["Enter"]);
    terminal.wait_for("It was stopped.");
    let requests = model.requests();
    let messages = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let call = messages
        .iter()
        .position(|m| m["tool_calls"][0]["id"] == "c2")
        .expect("the cancelled call is in the history");
    assert_eq!(messages[call + 1]["role"], "tool", "{messages:?}");
    assert_eq!(messages[call + 1]["tool_call_id"], "c2");
    assert!(
        messages[call + 1]["content"]
            .as_str()
            .unwrap()
            .contains("cancelled"),
        "{messages:?}"
    );
    assert_eq!(messages[call + 2]["content"], "what happened?");
    terminal.wait_for_count("you> ", 6, Duration::from_secs(30));
    terminal.press(&["C-d"]);
    terminal.wait_for("[exit 0]");
    drop(terminal);

    // The next run remembers the history.
    let model = ScriptedModel::start(Wire::OpenAi, vec![]);
    let terminal = start(&dir, &chat_command(&dir, &model, ""));
    wait_until_ready(&terminal);
    terminal.press(&["Up"]);
    terminal.wait_for("you> what happened?");
    terminal.press(&["C-u", "C-d"]);
    terminal.wait_for("[exit 0]");
}

#[test]
fn a_session_survives_kill_9_during_a_tool_call_and_resumes_with_every_turn() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("kill");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::text("Hello! Ask me anything."),
            Reply::call(
                "c1",
                "everything__trigger-long-running-operation",
                r#"{"duration": 60, "steps": 60}"#,
            ),
            Reply::text("Welcome back; the operation was interrupted."),
        ],
    );
    let mut child = spawn_in(
        &dir,
        &[
            "--stdio",
            &everything_stdio(),
            "chat",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &model.base_url(),
        ],
    );
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    stdin.write_all(b"hi\n").unwrap();
    assert!(
        stdout
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("Hello!"))
    );
    stdin.write_all(b"start the long operation\n").unwrap();
    // The call is running once its progress shows.
    assert!(
        stderr
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("(1/60)"))
    );
    Command::new("kill")
        .args(["-9", &child.id().to_string()])
        .status()
        .unwrap();
    child.wait().unwrap();

    let listing = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["sessions", "--json"])
        .env("TETHER_DATA_DIR", &dir)
        .output()
        .unwrap();
    let sessions: Value = serde_json::from_slice(&listing.stdout).unwrap();
    assert_eq!(sessions[0]["turns"], 1, "{sessions}");
    assert_eq!(sessions[0]["interrupted"], true);
    assert_eq!(sessions[0]["title"], "hi");

    // Resuming shows every earlier turn, marks the interrupted one, and goes on.
    let resumed = spawn_in(
        &dir,
        &[
            "--stdio",
            &everything_stdio(),
            "chat",
            "--resume",
            "--model",
            "openai:scripted",
            "--base-url",
            &model.base_url(),
        ],
    );
    let mut resumed_stdin = resumed.stdin.as_ref().unwrap();
    resumed_stdin.write_all(b"are you there?\n").unwrap();
    let output = resumed.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    for expected in [
        "you> hi",
        "Hello! Ask me anything.",
        "you> start the long operation",
        "→ everything__trigger-long-running-operation",
        "the last turn was interrupted",
    ] {
        assert!(stderr.contains(expected), "missing {expected:?}:\n{stderr}");
    }
    assert!(String::from_utf8_lossy(&output.stdout).contains("Welcome back"));
    let history = model.requests()[2].body["messages"].clone();
    let roles: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "user"
        ],
        "{history}"
    );
    assert!(
        history[5]["content"]
            .as_str()
            .unwrap()
            .contains("interrupted")
    );

    let export = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["sessions", "export", sessions[0]["id"].as_str().unwrap()])
        .env("TETHER_DATA_DIR", &dir)
        .output()
        .unwrap();
    let markdown = String::from_utf8_lossy(&export.stdout);
    assert!(markdown.contains("## You\n\nhi"), "{markdown}");
    assert!(markdown.contains("Welcome back"), "{markdown}");
}

/// The lines of `screen` from the one containing `from` up to (not including) the first
/// line after it containing `to`.
fn between<'a>(screen: &'a str, from: &str, to: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = screen.lines().collect();
    let start = lines.iter().position(|l| l.contains(from)).unwrap();
    let end = lines[start + 1..]
        .iter()
        .position(|l| l.contains(to))
        .map_or(lines.len(), |i| start + 1 + i);
    lines[start..end].to_vec()
}

#[test]
fn markdown_answers_render_in_the_terminal_and_input_spans_lines_and_completes() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("markdown");
    let answer = "# Plan\n\nFirst **read** the `config`, then see [the docs](https://example.com/docs).\n\n- one\n- two\n\n```rust\nfn main() {\n    let x = \"hi\"; // greet\n}\n```\nDone.";
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text(answer)]);
    let terminal = start(&dir, &chat_command(&dir, &model, ""));
    wait_until_ready(&terminal);
    // Tab completes a slash command.
    terminal.type_text("/he");
    terminal.press(&["Tab"]);
    terminal.wait_for("you> /help");
    terminal.press(&["Enter"]);
    terminal.wait_for("/compact");
    // A line ending in a backslash continues on the next.
    terminal.type_text("show me\\");
    terminal.press(&["Enter"]);
    terminal.type_text("the plan");
    terminal.press(&["Enter"]);
    let screen = terminal.wait_for(" tokens; ");
    // Everything after the typed question, up to the usage line.
    let rendered = &between(&screen, "the plan", "tokens;")[1..];
    let snapshot_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/markdown_answer.txt");
    let got = rendered.join("\n").trim_end().to_string() + "\n";
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&snapshot_path, &got).unwrap();
    }
    let expected = std::fs::read_to_string(&snapshot_path).unwrap();
    assert_eq!(
        got,
        expected,
        "rendered answer differs from {}",
        snapshot_path.display()
    );
    let sent = model.requests()[0].body["messages"].clone();
    let user = sent
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap()["content"]
        .clone();
    assert_eq!(user, "show me\nthe plan");
    terminal.wait_for_idle_prompt("you> ");
    terminal.press(&["C-d"]);
    terminal.wait_for("[exit 0]");
}

#[test]
fn near_the_context_window_old_tool_results_are_shortened_not_lost() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("context");
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        serde_json::json!({
            "contextWindow": 3000,
            "mcpServers": {"everything": {"command": test_support::npm_bin("mcp-server-everything"), "args": ["stdio"]}}
        })
        .to_string(),
    )
    .unwrap();
    let long = "word ".repeat(1200);
    let arguments = serde_json::json!({ "message": long }).to_string();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__echo", &arguments),
            Reply::text("Echoed."),
            Reply::text("Still here."),
        ],
    );
    let mut child = spawn_in(
        &dir,
        &[
            "--config",
            config.to_str().unwrap(),
            "chat",
            "--model",
            "openai:scripted",
            "--base-url",
            &model.base_url(),
        ],
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo a lot\nand now?\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("near the model's context window")
            && stderr.contains("shortened 1 older tool results"),
        "{stderr}"
    );
    let third = model.requests()[2].body["messages"].clone();
    let tool = third
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        tool.contains("shortened to fit the context window"),
        "{tool}"
    );
    // The session file keeps the whole result.
    let sessions = std::fs::read_dir(dir.join("sessions")).unwrap();
    let file = sessions.map(|e| e.unwrap().path()).next().unwrap();
    let saved = std::fs::read_to_string(file).unwrap();
    assert!(
        saved.contains(&"word ".repeat(1000)),
        "nothing is lost on disk"
    );
}

#[test]
fn slash_commands_in_a_terminal() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("commands");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::text("First answer."),
            Reply::text("A short summary of the talk."),
            Reply::text("After compacting."),
        ],
    );
    let terminal = start(&dir, &chat_command(&dir, &model, ""));
    wait_until_ready(&terminal);
    terminal.type_text("/servers");
    terminal.press(&["Enter"]);
    terminal.wait_for("everything: connected (2025-11-25");
    terminal.type_text("/prompts");
    terminal.press(&["Enter"]);
    terminal.wait_for("/prompt everything args-prompt city=… state=…");
    terminal.type_text("/resources");
    terminal.press(&["Enter"]);
    terminal.wait_for("@everything:demo://resource/static/document/architecture.md");
    // Completion of an @server:uri mention.
    terminal.type_text("read @everything:demo://resource/static/document/arch");
    terminal.press(&["Tab"]);
    terminal.wait_for("read @everything:demo://resource/static/document/architecture.md");
    terminal.press(&["C-u"]);
    terminal.type_text("/approve sometimes");
    terminal.press(&["Enter"]);
    terminal.wait_for("/approve sometimes: use ask, auto or never");
    terminal.type_text("/approve never");
    terminal.press(&["Enter"]);
    terminal.wait_for("approval: never");
    terminal.type_text("/system Answer in one sentence.");
    terminal.press(&["Enter"]);
    terminal.wait_for("system prompt set");
    terminal.type_text("hello");
    terminal.press(&["Enter"]);
    terminal.wait_for("First answer.");
    let system = model.requests()[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.contains("Answer in one sentence."), "{system}");
    terminal.type_text("/usage");
    terminal.press(&["Enter"]);
    terminal.wait_for("tokens this session (2 messages in context)");
    terminal.type_text("/save demo-talk");
    terminal.press(&["Enter"]);
    terminal.wait_for("session named \"demo-talk\"");
    terminal.type_text("/sessions");
    terminal.press(&["Enter"]);
    terminal.wait_for("[demo-talk]");
    terminal.type_text("again");
    terminal.press(&["Enter"]);
    terminal.wait_for_count(" tokens; ", 1, Duration::from_secs(30));
    terminal.type_text("/compact");
    terminal.press(&["Enter"]);
    terminal.wait_for("compacted 2 earlier messages into a summary");
    terminal.type_text("/export talk.md");
    terminal.press(&["Enter"]);
    terminal.wait_for("wrote talk.md");
    let exported = std::fs::read_to_string(dir.join("talk.md")).unwrap();
    assert!(
        exported.contains("[Summary of the earlier conversation]"),
        "{exported}"
    );
    // The JSON export carries the session's start, its finished turns and its name.
    terminal.type_text("/export talk.json");
    terminal.press(&["Enter"]);
    terminal.wait_for("wrote talk.json");
    let exported: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("talk.json")).unwrap()).unwrap();
    assert!(
        exported["created"].as_str().is_some_and(|c| c.len() >= 10),
        "{exported}"
    );
    assert!(exported["turns"].as_u64().unwrap() >= 2, "{exported}");
    // Any other name is refused, not written as Markdown it did not ask for.
    terminal.type_text("/export talk.txt");
    terminal.press(&["Enter"]);
    terminal.wait_for("/export talk.txt: name a .md file (Markdown) or a .json file");
    assert!(!dir.join("talk.txt").exists());
    terminal.type_text("/model nowhere:thing");
    terminal.press(&["Enter"]);
    terminal.wait_for("error: --model \"nowhere:thing\"");
    terminal.type_text("/model openai:other-model");
    terminal.press(&["Enter"]);
    terminal.wait_for("model: openai:other-model");
    terminal.type_text("/clear");
    terminal.press(&["Enter"]);
    terminal.wait_for("conversation cleared");
    terminal.type_text("/resume nope");
    terminal.press(&["Enter"]);
    terminal.wait_for("no session \"nope\"");
    terminal.type_text("/resume demo-talk");
    terminal.press(&["Enter"]);
    terminal.wait_for("resumed session");
    terminal.type_text("/quit");
    terminal.press(&["Enter"]);
    terminal.wait_for("[exit 0]");
    let sessions = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["sessions"])
        .env("TETHER_DATA_DIR", &dir)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&sessions.stdout);
    assert!(
        listing.contains("[demo-talk]") && listing.contains("openai:other-model"),
        "{listing}"
    );
}

#[test]
fn plain_tether_in_a_terminal_starts_a_chat_and_a_pipe_gets_no_prompts() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("plain");
    let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("piped answer")]);
    let terminal = start(
        &dir,
        &format!(
            // The model is never asked here; a hosted preset still wants its key to start.
            "cd {} && TETHER_MODEL=openai:scripted OPENAI_API_KEY=unused {} --stdio '{}'",
            dir.display(),
            env!("CARGO_BIN_EXE_tether"),
            everything_stdio()
        ),
    );
    terminal.wait_for("tether chat with openai:scripted");
    terminal.wait_for_idle_prompt("you> ");
    terminal.press(&["C-d"]);
    terminal.wait_for("[exit 0]");
    let saved = |dir: &Path| {
        std::fs::read_dir(dir.join("sessions"))
            .map(|entries| entries.filter_map(Result::ok).count())
            .unwrap_or(0)
    };
    assert_eq!(saved(&dir), 0, "a chat without a message leaves no session");

    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args([
            "--stdio",
            &everything_stdio(),
            "chat",
            "--model",
            "openai:scripted",
            "--base-url",
            &model.base_url(),
        ])
        .current_dir(&dir)
        .env("TETHER_DATA_DIR", &dir)
        .env_remove("NO_COLOR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"**hi**\n").unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stdout.trim(),
        "piped answer",
        "raw text, no styling: {stdout:?}"
    );
    assert!(
        !stderr.contains("you>") && !stderr.contains('\x1b'),
        "{stderr:?}"
    );
    assert_eq!(saved(&dir), 1, "a chat with a message is saved");
}

#[test]
fn colour_in_a_terminal_unless_no_color() {
    let _one_at_a_time = one_at_a_time();
    for no_color in [false, true] {
        let dir = workdir(if no_color { "no-color" } else { "color" });
        let model = ScriptedModel::start(Wire::OpenAi, vec![Reply::text("Some **bold** words.")]);
        let mut env = vec![
            ("TETHER_DATA_DIR", dir.display().to_string()),
            ("TERM", "xterm-256color".to_string()),
        ];
        if no_color {
            env.push(("NO_COLOR", "1".to_string()));
        }
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let terminal = Terminal::start(&chat_command(&dir, &model, ""), &pairs);
        wait_until_ready(&terminal);
        terminal.type_text("style?");
        terminal.press(&["Enter"]);
        terminal.wait_for("Some bold words.");
        let styled = terminal.screen_with_styles();
        assert_eq!(
            styled.contains("\x1b[1mbold"),
            !no_color,
            "NO_COLOR={no_color}: {styled:?}"
        );
        terminal.wait_for_idle_prompt("you> ");
        terminal.press(&["C-d"]);
        terminal.wait_for("[exit 0]");
    }
}

#[test]
fn a_spinner_while_waiting_and_ctrl_c_in_the_middle_of_a_streamed_answer() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("stream");
    let gate = Gate::new();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::Held {
                gate: gate.clone(),
                reply: Box::new(Reply::text("Worth the wait.")),
            },
            // The first piece is one whole line ("Go on"), which the Markdown view shows.
            Reply::Stalled("Go on\nand on and on".into()),
            Reply::text("Back again."),
        ],
    );
    let terminal = start(&dir, &chat_command(&dir, &model, ""));
    wait_until_ready(&terminal);
    terminal.type_text("slow one");
    terminal.press(&["Enter"]);
    terminal.wait_for("waiting for the model");
    gate.open();
    let screen = terminal.wait_for("Worth the wait.");
    assert!(
        !screen.contains("waiting for the model"),
        "the spinner is erased: {screen}"
    );
    terminal.type_text("endless one");
    terminal.press(&["Enter"]);
    terminal.wait_for("Go on");
    terminal.press(&["C-c"]);
    terminal.wait_for("(cancelled)");
    terminal.type_text("still there?");
    terminal.press(&["Enter"]);
    terminal.wait_for("Back again.");
    terminal.wait_for_idle_prompt("you> ");
    terminal.press(&["C-d"]);
    terminal.wait_for("[exit 0]");
}

#[test]
fn completion_of_tools_servers_and_prompts_and_errors_in_red() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("complete");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__get-sum", r#"{"a": "two", "b": 3}"#),
            Reply::text("That failed."),
        ],
    );
    let env = [
        ("TETHER_DATA_DIR", dir.display().to_string()),
        ("TERM", "xterm-256color".to_string()),
    ];
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let terminal = Terminal::start(&chat_command(&dir, &model, "--approve auto"), &pairs);
    wait_until_ready(&terminal);
    terminal.type_text("/tools everything__get-su");
    terminal.press(&["Tab"]);
    terminal.wait_for("you> /tools everything__get-sum");
    terminal.press(&["C-u"]);
    terminal.type_text("/prompt ever");
    terminal.press(&["Tab"]);
    terminal.wait_for("you> /prompt everything");
    terminal.type_text(" args-");
    terminal.press(&["Tab"]);
    terminal.wait_for("you> /prompt everything args-prompt");
    terminal.press(&["C-u"]);
    // A failing call is shown in red (the model sent a string where a number belongs, so
    // the call is refused before it reaches the server).
    terminal.type_text("add");
    terminal.press(&["Enter"]);
    terminal.wait_for("That failed.");
    let styled = terminal.screen_with_styles();
    assert!(
        styled.contains("\x1b[31m✗ everything__get-sum"),
        "{styled:?}"
    );
    terminal.wait_for_idle_prompt("you> ");
    terminal.press(&["C-d"]);
    terminal.wait_for("[exit 0]");
}

#[test]
fn prompts_roots_and_context_in_a_terminal() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("terminal-context");
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        serde_json::json!({
            "contextWindow": 3000,
            "mcpServers": {"everything": {"command": test_support::npm_bin("mcp-server-everything"), "args": ["stdio"]}}
        })
        .to_string(),
    )
    .unwrap();
    let long = "word ".repeat(1200);
    let arguments = serde_json::json!({ "message": long }).to_string();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::text("Paris it is."),
            Reply::call("c1", "everything__echo", &arguments),
            Reply::text("Echoed."),
            Reply::text("Still here."),
        ],
    );
    let command = chat_command_with_config(&dir, &config, &model);
    let terminal = start(&dir, &command);
    terminal.wait_for("you> ");
    terminal.type_text("/prompt everything args-prompt city=Paris");
    terminal.press(&["Enter"]);
    terminal.wait_for("Paris it is.");
    let prompt = model.requests()[0].body["messages"].to_string();
    assert!(prompt.contains("Paris"), "{prompt}");
    terminal.type_text("/root /srv/delta");
    terminal.press(&["Enter"]);
    terminal.wait_for("added root /srv/delta");
    // The server logs the new roots when it has fetched them; wait for that line so it
    // cannot land on a later prompt line.
    terminal.wait_for("Roots updated: 1 root(s)");
    terminal.type_text("echo a lot");
    terminal.press(&["Enter"]);
    terminal.wait_for("Echoed.");
    terminal.type_text("and now?");
    terminal.press(&["Enter"]);
    terminal.wait_for("shortened 1 older tool results");
    terminal.wait_for("Still here.");
    terminal.wait_for_idle_prompt("you> ");
    terminal.press(&["C-d"]);
    terminal.wait_for("[exit 0]");
}

#[test]
fn server_logs_never_print_over_the_prompt_or_a_question() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("terminal-chatty");
    let ticks = dir.join("ticks");
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        serde_json::json!({"mcpServers": {"chatty": {
            "command": "python3",
            "args": [test_support::fixture("misbehaving_server.py"), "working"],
            "env": {"LOG_EVERY": "0.2", "TICK_LOG": &ticks},
        }}})
        .to_string(),
    )
    .unwrap();
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "chatty__boom", "{}"),
            Reply::text("Done."),
        ],
    );
    let command = chat_command_with_config(&dir, &config, &model);
    let terminal = start(&dir, &command);
    // At the idle prompt, logs print above it and the prompt is drawn again below them.
    terminal.wait_for("tick 3");
    let screen = terminal.wait_for_idle_prompt("you> ");
    assert!(
        !screen
            .lines()
            .any(|l| l.starts_with("you> ") && l.contains("tick")),
        "a log line landed on the prompt:\n{screen}"
    );
    // While a question waits for its answer, logs wait too: the server sends two more ticks
    // (it says so in a file) and the question is still the last line.
    terminal.type_text("boom please");
    terminal.press(&["Enter"]);
    terminal.wait_for("then Enter: ");
    let asked_at = ticks_after(&ticks, 2);
    assert_question_is_last(&terminal);
    terminal.type_text("y");
    terminal.press(&["Enter"]);
    terminal.wait_for("Done.");
    terminal.wait_for(&format!("tick {}", asked_at + 2));
    terminal.wait_for_idle_prompt("you> ");
    terminal.press(&["C-d"]);
    terminal.wait_for("[exit 0]");
}

/// `/add` starts a server in a running chat and the next request offers (and calls) its
/// tools; `/remove` stops it and the request after that no longer offers them.
#[test]
fn servers_added_and_removed_in_a_running_chat() {
    let dir = workdir("add-remove");
    let model = ScriptedModel::start(
        Wire::OpenAi,
        vec![
            Reply::call("c1", "everything__get-sum", r#"{"a": 2, "b": 3}"#),
            Reply::text("It is 5."),
            Reply::text("Gone."),
        ],
    );
    let mut child = spawn_in(
        &dir,
        &[
            "chat",
            "--approve",
            "auto",
            "--model",
            "openai:scripted",
            "--base-url",
            &model.base_url(),
        ],
    );
    let input = format!(
        "/add {}\n/add clock={}\nadd 2 and 3\n/remove everything\n/tools everything\nand now?\n",
        everything_stdio(),
        time_stdio()
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("everything: connected"), "{stdout}");
    assert!(stdout.contains("everything: stopped"), "{stdout}");
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "{stdout}\n{stderr}");
    assert!(
        requests[0]
            .offered_tools()
            .contains(&"everything__get-sum".to_string())
    );
    let result = requests[1].body["messages"].to_string();
    assert!(result.contains("The sum of 2 and 3 is 5"), "{result}");
    assert!(
        requests[2]
            .offered_tools()
            .iter()
            .all(|t| !t.starts_with("everything__")),
        "{:?}",
        requests[2].offered_tools()
    );

    // A resumed chat starts again the servers its session added and did not remove.
    let mut child = spawn_in(
        &dir,
        &[
            "chat",
            "--resume",
            "--model",
            "openai:scripted",
            "--base-url",
            &model.base_url(),
        ],
    );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"/servers\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("  clock: connected ("),
        "{stdout}\n{stderr}"
    );
    assert!(!stdout.contains("everything:"), "{stdout}");
}

/// The fixture's tick count when called, once the server (which writes its last tick's number
/// to `ticks`) has sent `more` ticks beyond it.
fn ticks_after(ticks: &Path, more: u32) -> u32 {
    let sent = || {
        std::fs::read_to_string(ticks)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    let asked_at = sent();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sent() < asked_at + more {
        assert!(
            std::time::Instant::now() < deadline,
            "the server stopped ticking"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    asked_at
}

/// The question on screen is still the last line: no log line landed in it.
fn assert_question_is_last(terminal: &Terminal) {
    let screen = terminal.screen();
    let last = screen
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    assert!(
        last.trim_end().ends_with("then Enter:"),
        "a log line landed in the question:\n{screen}"
    );
}

/// The tester asks on the terminal too (a server's form during `tether call`); a server's log
/// lines wait while the question is on screen and come after the answer.
#[test]
fn a_testers_question_is_not_interrupted_by_the_servers_log_lines() {
    let _one_at_a_time = one_at_a_time();
    let dir = workdir("tester-question");
    let ticks = dir.join("ticks");
    let config = dir.join("tether.json");
    std::fs::write(
        &config,
        serde_json::json!({"mcpServers": {"asker": {
            "command": "python3",
            "args": [test_support::fixture("misbehaving_server.py"), "asks-input"],
            "env": {"LOG_EVERY": "0.2", "TICK_LOG": &ticks},
        }}})
        .to_string(),
    )
    .unwrap();
    let command = format!(
        "cd {} && {} --config {} call asker boom",
        dir.display(),
        env!("CARGO_BIN_EXE_tether"),
        config.display()
    );
    let terminal = start(&dir, &command);
    terminal.wait_for("Which colour?");
    terminal.wait_for("then Enter: ");
    let asked_at = ticks_after(&ticks, 3);
    assert_question_is_last(&terminal);
    terminal.type_text("n");
    terminal.press(&["Enter"]);
    terminal.wait_for("the user chose decline");
    terminal.wait_for(&format!("tick {}", asked_at + 3));
    terminal.wait_for("[exit 0]");
}
