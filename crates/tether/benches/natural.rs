//! The embedded model on questions as people ask them, end to end through `tether run --json`
//! (issue 28 item 4): the twelve questions over the built-in tools (alone, then beside
//! server-everything and server-filesystem), and twenty across the seven reference servers
//! written before any change they measure (`fixtures/natural_twenty.json`, held out: measured,
//! never tuned on), and twenty more over the same servers and files to develop on
//! (`fixtures/natural_dev.json`, `TETHER_BENCH_ONLY=naturaldev`). Each is scored on the tool it called (none for small talk and for questions
//! no offered tool answers) and on what its answer holds.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};
use test_support::{npm_bin, venv_bin, workspace_root};

/// What one `tether run --json` did: the tools it called, its final answer, whether it exited 0.
struct Asked {
    called: Vec<String>,
    answer: String,
    success: bool,
}

fn verbose() -> bool {
    std::env::var_os("TETHER_BENCH_VERBOSE").is_some()
}

/// The binary asked: this build's, or `TETHER_BENCH_TETHER` (another build, to compare).
fn tether() -> std::path::PathBuf {
    std::env::var_os("TETHER_BENCH_TETHER")
        .map_or_else(|| env!("CARGO_BIN_EXE_tether").into(), Into::into)
}

/// Asks `question` in `dir` with the servers of `config` (the built-in tools when `None`);
/// with `approve`, tools that need a person's approval get it, as a person saying yes would
/// give it (`--approve auto`).
fn ask(dir: &Path, config: Option<&Path>, question: &str, approve: bool) -> Asked {
    let mut command = Command::new(tether());
    // The run's own pins and results: the person's pin file must not decide the answers (a
    // built-in tool pinned by an older build was refused and read as a wrong answer).
    test_support::own_data_dir(&mut command)
        .arg("run")
        .arg("--json")
        .current_dir(dir);
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    if approve {
        command.arg("--approve").arg("auto");
    }
    let output = command.arg(question).output().unwrap();
    let events: Vec<Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let called = events
        .iter()
        .filter(|e| e["type"] == "tool_call_started")
        .filter_map(|e| e["name"].as_str().map(str::to_string))
        .collect();
    let answer = events
        .iter()
        .rfind(|e| e["type"] == "turn_ended")
        .and_then(|e| e["text"].as_str())
        .unwrap_or_default()
        .to_string();
    Asked {
        called,
        answer,
        success: output.status.success(),
    }
}

/// Whether `answer` holds `expected`, a number only as a whole number ("13" is not in "-13"
/// or "130").
fn holds(answer: &str, expected: &str) -> bool {
    let numeric_start = expected.starts_with(|c: char| c.is_ascii_digit());
    let numeric_end = expected.ends_with(|c: char| c.is_ascii_digit());
    answer.match_indices(expected).any(|(at, _)| {
        let before = answer[..at].chars().next_back();
        let after = answer[at + expected.len()..].chars().next();
        let glued_before = numeric_start && before.is_some_and(|c| c.is_ascii_digit() || c == '-');
        let glued_after = numeric_end && after.is_some_and(|c| c.is_ascii_digit());
        !(glued_before || glued_after)
    })
}

/// An answer a person can use: not empty, not a call written out, not our prompt recited.
fn readable(asked: &Asked) -> bool {
    asked.success
        && !asked.answer.trim().is_empty()
        && !asked.answer.contains("{\"tool\"")
        && !asked.answer.to_lowercase().contains("use this to answer")
}

/// Twelve questions as people ask them, answered end to end by `tether run --json` with the
/// embedded model in a directory with three files: the built-in tools alone, then with
/// server-everything and server-filesystem beside them. Scored on the tool (none for small
/// talk) and on the answer containing what it must.
pub fn natural_questions() {
    let year = command_output("date", &["+%Y"]);
    // (question, the tool that should run or "" for none, text the answer must contain)
    let questions: Vec<(&str, &str, String)> = vec![
        ("What is 12 plus 30?", "builtin__add", "42".into()),
        ("How much is 9 times 8?", "builtin__multiply", "72".into()),
        ("What's 100 divided by 4?", "builtin__divide", "25".into()),
        ("Take 7 away from 20.", "builtin__subtract", "13".into()),
        ("What time is it?", "builtin__current_time", year.clone()),
        ("What's today's date?", "builtin__current_time", year),
        (
            "What's in notes.txt?",
            "builtin__read_file",
            "Tuesday".into(),
        ),
        (
            "Show me my shopping list.",
            "builtin__read_file",
            "eggs".into(),
        ),
        (
            "Which files are in this folder?",
            "builtin__list_files",
            "notes.txt".into(),
        ),
        ("hello", "", String::new()),
        ("thanks!", "", String::new()),
        ("Can you add 2 and 2 for me?", "builtin__add", "4".into()),
    ];
    let dir = three_files("natural");
    let with_peers = dir.join("peers.json");
    std::fs::write(
        &with_peers,
        json!({"mcpServers": {
            "builtin": {"command": tether(), "args": ["builtin-server"]},
            "everything": {"command": npm_bin("mcp-server-everything"), "args": ["stdio"]},
            "filesystem": {"command": npm_bin("mcp-server-filesystem"), "args": [&dir]},
        }})
        .to_string(),
    )
    .unwrap();
    println!("twelve natural questions end to end (tether run --json, embedded model):");
    for (label, config) in [
        ("built-in tools", None),
        (
            "built-in + server-everything + server-filesystem",
            Some(with_peers.as_path()),
        ),
    ] {
        let (mut right_tool, mut right_answer) = (0, 0);
        let started = Instant::now();
        for (question, tool, expected) in &questions {
            let asked = ask(&dir, config, question, false);
            let called = asked.called.first().cloned().unwrap_or_default();
            right_tool += usize::from(called == *tool);
            right_answer += usize::from(readable(&asked) && holds(&asked.answer, expected));
            if verbose() {
                println!(
                    "    {question:?}: called {called:?}, answered {:?}",
                    asked.answer
                );
            }
        }
        let n = questions.len();
        println!(
            "  {label}: right tool {right_tool}/{n}, right answer {right_answer}/{n}, {:.1}s per question",
            started.elapsed().as_secs_f64() / n as f64
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The twenty held-out questions of `fixtures/natural_twenty.json`, asked with all seven
/// reference servers configured, in a git repository with three files, a SQLite database of
/// three books and a memory graph that knows Alice.
pub fn natural_twenty() {
    natural_set(
        "natural_twenty.json",
        "twenty held-out natural questions across the seven reference servers (tether run --json, embedded model):",
    );
}

/// The development set of natural questions (`fixtures/natural_dev.json`): the same seven
/// servers and files as the held-out twenty, questions that changes may be tuned on.
pub fn natural_dev() {
    natural_set(
        "natural_dev.json",
        "twenty development questions across the seven reference servers (tether run --json, embedded model):",
    );
}

/// The second development set (`fixtures/natural_dev2.json`), written to find what the first
/// no longer shows.
pub fn natural_dev2() {
    natural_set(
        "natural_dev2.json",
        "twenty more development questions across the seven reference servers (tether run --json, embedded model):",
    );
}

/// The third development set (`fixtures/natural_dev3.json`), written to find where a right
/// tool still gives a wrong answer.
pub fn natural_dev3() {
    natural_set(
        "natural_dev3.json",
        "a third twenty development questions across the seven reference servers (tether run --json, embedded model):",
    );
}

/// Asks the questions of `fixtures/<fixture>` with the seven reference servers, over the same
/// files, repository, database and memory.
fn natural_set(fixture: &str, title: &str) {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(
            workspace_root()
                .join("crates/tether/benches/fixtures")
                .join(fixture),
        )
        .unwrap(),
    )
    .unwrap();
    let dir = three_files("twenty");
    test_support::git_commit_files(
        &dir,
        "main",
        &["notes.txt", "shopping.md", "docs/plan.md"],
        "Add the plan",
    );
    std::fs::write(dir.join("draft.txt"), "Not committed yet.").unwrap();
    let db = dir.join("library.db");
    let status = Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); \
             c.execute('create table books (title text, author text)'); \
             c.executemany('insert into books values (?, ?)', [('Dune', 'Frank Herbert'), \
             ('Emma', 'Jane Austen'), ('Ulysses', 'James Joyce')]); c.commit()",
        )
        .arg(&db)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "python3 could not write the bench's database"
    );
    std::fs::write(
        dir.join("memory.jsonl"),
        json!({"type": "entity", "name": "Alice", "entityType": "person", "observations": ["works as a pilot"]}).to_string() + "\n",
    )
    .unwrap();
    let config = dir.join("servers.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {
            "builtin": {"command": tether(), "args": ["builtin-server"]},
            "everything": {"command": npm_bin("mcp-server-everything"), "args": ["stdio"]},
            "filesystem": {"command": npm_bin("mcp-server-filesystem"), "args": [&dir]},
            "memory": {"command": npm_bin("mcp-server-memory"),
                       "env": {"MEMORY_FILE_PATH": dir.join("memory.jsonl")}},
            "time": {"command": venv_bin("mcp-server-time")},
            "git": {"command": venv_bin("mcp-server-git"), "args": ["--repository", &dir]},
            "sqlite": {"command": workspace_root().join("peers/.venv-sqlite/bin/mcp-server-sqlite"),
                       "args": ["--db-path", &db]},
        }})
        .to_string(),
    )
    .unwrap();
    let fill = |text: &str| {
        text.replace("{tokyo_h24}", &command_env_output("Asia/Tokyo", &["+%H"]))
            .replace("{tokyo_h12}", &command_env_output("Asia/Tokyo", &["+%-I"]))
            .replace("{weekday}", &command_output("date", &["+%A"]))
            .replace(
                "{sydney_h24}",
                &command_env_output("Australia/Sydney", &["+%H"]),
            )
            .replace(
                "{sydney_h12}",
                &command_env_output("Australia/Sydney", &["+%-I"]),
            )
            .replace("{year}", &command_output("date", &["+%Y"]))
            .replace(
                "{london_h24}",
                &command_env_output("Europe/London", &["+%H"]),
            )
            .replace(
                "{london_h12}",
                &command_env_output("Europe/London", &["+%-I"]),
            )
    };
    println!("{title}");
    let questions = fixture["questions"].as_array().unwrap();
    let (mut right_tool, mut right_answer) = (0, 0);
    let started = Instant::now();
    for case in questions {
        let question = case["question"].as_str().unwrap();
        let tools: Vec<&str> = case["tools"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let asked = ask(&dir, Some(&config), question, true);
        let tool_ok = match asked.called.first() {
            None => tools.is_empty(),
            Some(called) => tools.contains(&called.as_str()),
        };
        let mut answer_ok = readable(&asked);
        if let Some(alternatives) = case["answer"].as_array() {
            answer_ok &= alternatives
                .iter()
                .filter_map(Value::as_str)
                .any(|a| holds(&asked.answer.to_lowercase(), &fill(a).to_lowercase()));
        }
        if let Some([file, text]) = case["file"].as_array().map(Vec::as_slice) {
            let held =
                std::fs::read_to_string(dir.join(file.as_str().unwrap())).unwrap_or_default();
            answer_ok &= held.contains(text.as_str().unwrap());
        }
        right_tool += usize::from(tool_ok);
        right_answer += usize::from(tool_ok && answer_ok);
        if verbose() {
            println!(
                "    {question:?}: called {:?}, answered {:?}",
                asked.called, asked.answer
            );
        }
    }
    let n = questions.len();
    println!(
        "  seven servers: right tool {right_tool}/{n}, right answer {right_answer}/{n}, {:.1}s per question",
        started.elapsed().as_secs_f64() / n as f64
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh directory holding notes.txt, shopping.md and docs/plan.md.
fn three_files(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tether-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("docs")).unwrap();
    std::fs::write(dir.join("notes.txt"), "The meeting is on Tuesday.").unwrap();
    std::fs::write(dir.join("shopping.md"), "Milk, eggs, bread.").unwrap();
    std::fs::write(dir.join("docs/plan.md"), "Ship on Friday.").unwrap();
    dir
}

fn command_output(program: &str, args: &[&str]) -> String {
    let output = Command::new(program).args(args).output().unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// `date args` in time zone `zone`.
fn command_env_output(zone: &str, args: &[&str]) -> String {
    let output = Command::new("date")
        .env("TZ", zone)
        .args(args)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}
