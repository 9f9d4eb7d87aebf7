//! The `tether` binary: parses the command line, builds the server set from the config file
//! or ad-hoc flags, runs one command and maps failures to documented exit codes. It is glue:
//! connections live in `tether-mcp`, printing in `render`, argument parsing in `arguments`.

// First, so its safe_println!/safe_eprintln! reach every module after it.
#[macro_use]
mod render;
mod acp;
mod approver;
mod arguments;
mod auth;
mod chat;
mod chat_input;
mod commands;
mod conformance;
mod engine;
mod host;
mod json_run;
mod markdown;
mod models;
#[cfg(feature = "local")]
mod named_files;
mod run;
mod semantic;
mod serve;
mod session;
mod sessions;
mod slash;
mod telemetry;
mod terminal_view;
mod tester;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tether_mcp::{ErrorClass, McpError};

/// Exit codes, documented in the README; scripts rely on them.
mod exit {
    pub const USAGE: u8 = 1;
    pub const UNREACHABLE: u8 = 2;
    pub const TOOL_ERROR: u8 = 3;
    /// The server needs the user to do something first (open a URL it named).
    pub const ACTION_REQUIRED: u8 = 5;
}

/// Tether: an MCP host. Connect any LLM to any number of MCP servers, or use the tester
/// commands to inspect and call servers from the shell.
#[derive(Debug, Parser)]
#[command(name = "tether", version, about, max_term_width = 100)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    /// With none, `chat` when in a terminal.
    #[command(subcommand)]
    command: Option<Command>,
}

/// Options every command accepts.
#[derive(Debug, clap::Args)]
struct GlobalArgs {
    /// Config file in the Claude Desktop `mcpServers` shape [default: ./.tether.json, else the
    /// user config dir's tether/config.json].
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// An ad-hoc stdio server: "COMMAND ARGS…", optionally "NAME=COMMAND ARGS…"; repeatable.
    /// Used instead of the config file unless --config is also given.
    #[arg(long, global = true, value_name = "CMD")]
    stdio: Vec<String>,
    /// An ad-hoc Streamable HTTP server: URL or NAME=URL; repeatable.
    #[arg(long, global = true, value_name = "URL")]
    url: Vec<String>,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Seconds each server start and each request may take (overrides the config).
    #[arg(long, global = true, value_name = "SECS")]
    timeout: Option<f64>,
    /// Least severe server log message (notifications/message) to show.
    #[arg(long, global = true, value_name = "LEVEL", default_value = "info",
          value_parser = clap::builder::PossibleValuesParser::new(host::LOG_LEVELS))]
    log_level: String,
    /// A directory offered to servers as a root (repeatable; also `"roots"` in the config). None
    /// by default: a server that takes roots (server-filesystem) would otherwise widen its reach
    /// to the working directory.
    #[arg(long = "root", global = true, value_name = "DIR")]
    roots: Vec<PathBuf>,
    /// For scripts: warnings (unknown config keys) are errors, and `batch` stops at its first
    /// failing line.
    #[arg(long, global = true)]
    strict: bool,
    /// More logging on stderr (-v: info, -vv: debug incl. server stderr).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
}

/// `run --input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum InputFormat {
    /// One JSON op per line.
    Jsonl,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer a question with a model and the servers' tools.
    Run {
        /// The question; `-` reads it from standard input (`git diff | tether run -`).
        question: String,
        #[command(flatten)]
        model: models::ModelArgs,
        /// With --json: read ops (decisions on permission requests, answers to forms,
        /// interrupts) as JSON lines on standard input; see the README's event schema.
        #[arg(long, value_enum, value_name = "FORMAT")]
        input: Option<InputFormat>,
    },
    /// Serve one editor as an Agent Client Protocol agent on stdin and stdout (Zed,
    /// JetBrains, Neovim, Emacs); sessions take the editor's MCP servers beside the config's.
    Acp {
        #[command(flatten)]
        model: models::ModelArgs,
    },
    /// A conversation with a model and the servers' tools, saved as it goes.
    Chat {
        #[command(flatten)]
        model: models::ModelArgs,
        /// Continue a saved session: the latest, or the one with this id (or name).
        #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
        resume: Option<String>,
    },
    /// Saved chat sessions: list them (id, date, model, turns, first line), or export one.
    Sessions {
        #[command(subcommand)]
        action: Option<SessionsAction>,
    },
    /// Run tester commands from FILE (`-` for standard input), one per line, against servers
    /// started once; `#` starts a comment. Exits with the first failing line's code.
    Batch {
        /// The file of commands, e.g. lines like `call everything echo message=hi`.
        file: std::path::PathBuf,
    },
    /// Print a completion script for SHELL: `tether completions bash > ~/.local/share/bash-completion/completions/tether`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Start every configured server and report status, protocol, capabilities and counts.
    Servers,
    /// Tool pins: what each server's tools looked like when first seen; a tool that changes
    /// later needs approval before each call until its server's pins are accepted again.
    Pins {
        #[command(subcommand)]
        action: PinsAction,
    },
    /// OAuth sign-in for HTTP servers: login, logout, status.
    Auth {
        #[command(subcommand)]
        action: auth::AuthAction,
    },
    /// Manage the embedded model: `pull` downloads and verifies the default model, `path`
    /// prints where it is cached.
    Model {
        /// `pull` or `path`.
        #[arg(value_parser = ["pull", "path"])]
        action: String,
    },
    /// Serve every configured server as one MCP server, on stdio (for another host's config)
    /// or Streamable HTTP (--http ADDR).
    Serve {
        #[command(flatten)]
        args: serve::ServeArgs,
    },
    /// Run the built-in tools as an MCP server on stdio (used when no servers are configured).
    #[command(hide = true)]
    BuiltinServer {
        /// The digest of the tools this build serves, which Tether passes so that the pin book
        /// sees a changed set of built-in tools as a new command line (ignored here).
        #[arg(long)]
        tools: Option<String>,
    },
    /// The client the MCP conformance suite drives: connects to URL and acts out the
    /// scenario named by MCP_CONFORMANCE_SCENARIO.
    #[command(hide = true)]
    ConformanceClient {
        /// The suite's mock server.
        url: String,
    },
    /// List tools with their qualified names, descriptions and annotations.
    Tools {
        /// Only this server.
        server: Option<String>,
        /// Also print input and output schemas.
        #[arg(long)]
        schema: bool,
        /// Rank every tool for QUERY as the model's tool search does (words, a tool's name, or
        /// select:NAME,NAME) and print score, qualified name and description.
        #[arg(long, value_name = "QUERY")]
        search: Option<String>,
        /// With --search: how many tools to print.
        #[arg(long, default_value_t = 10, value_name = "K")]
        limit: usize,
        /// Tokens of tool definitions per server, and per request in each --tools mode.
        #[arg(long, conflicts_with = "search")]
        tokens: bool,
    },
    /// Call a tool: arguments as one JSON object or as key=value pairs.
    Call {
        /// Server name.
        server: String,
        /// Tool name on that server.
        tool: String,
        /// '{"a": 2}' or a=2 b=3 (values are typed by the tool's input schema).
        args: Vec<String>,
    },
    /// List resources and resource templates.
    Resources {
        /// Only this server.
        server: Option<String>,
    },
    /// Read one resource.
    Read {
        /// Server name.
        server: String,
        /// Resource URI.
        uri: String,
    },
    /// Complete an argument of a prompt or a resource template (`completion/complete`).
    Complete {
        /// Server name.
        server: String,
        /// The prompt whose argument to complete.
        #[arg(
            long,
            conflicts_with = "template",
            required_unless_present = "template"
        )]
        prompt: Option<String>,
        /// The resource template (its URI template) whose variable to complete.
        #[arg(long)]
        template: Option<String>,
        /// The argument (or template variable) name.
        argument: String,
        /// What is typed so far.
        #[arg(default_value = "")]
        value: String,
        /// An argument already chosen, as context for the suggestions (`--context
        /// department=Engineering`); repeatable.
        #[arg(long = "context", value_name = "NAME=VALUE")]
        context: Vec<String>,
    },
    /// List prompts and their arguments.
    Prompts {
        /// Only this server.
        server: Option<String>,
    },
    /// Expand a prompt with key=value arguments.
    Prompt {
        /// Server name.
        server: String,
        /// Prompt name.
        name: String,
        /// key=value arguments.
        args: Vec<String>,
    },
}

/// `tether pins …`.
#[derive(Debug, Subcommand)]
enum PinsAction {
    /// Every pinned server: its endpoint, tool count and when it was pinned.
    List,
    /// Pin a server's tools as they are now (after reviewing a change).
    Accept {
        /// The server's config name.
        server: String,
    },
    /// Forget the pins of one server, or of all; they are taken again on the next run.
    Reset {
        /// The server's config name (all servers when left out).
        server: Option<String>,
    },
}

/// `tether sessions …`.
#[derive(Debug, Subcommand)]
enum SessionsAction {
    /// Print one session as Markdown (or JSON with --json).
    Export {
        /// Session id (a unique prefix) or name.
        id: String,
    },
}

/// A failure with the exit code it maps to.
#[derive(Debug)]
pub struct Failure {
    code: u8,
    message: Option<String>,
}

impl Failure {
    /// A usage or config problem (exit 1).
    pub fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::USAGE,
            message: Some(message.into()),
        }
    }

    /// The tool ran and reported an error (exit 3); its content is already printed.
    pub fn tool_error() -> Failure {
        Failure {
            code: exit::TOOL_ERROR,
            message: None,
        }
    }

    /// Some servers were unreachable; what worked is already printed (exit 2).
    pub fn partial(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::UNREACHABLE,
            message: Some(message.into()),
        }
    }
}

impl From<McpError> for Failure {
    fn from(error: McpError) -> Failure {
        let code = match error.class() {
            ErrorClass::Usage => exit::USAGE,
            ErrorClass::Unreachable | ErrorClass::Server => exit::UNREACHABLE,
            ErrorClass::UserAction => exit::ACTION_REQUIRED,
        };
        Failure {
            code,
            message: Some(error.to_string()),
        }
    }
}

impl From<anyhow::Error> for Failure {
    fn from(error: anyhow::Error) -> Failure {
        match error.downcast::<McpError>() {
            Ok(mcp) => mcp.into(),
            Err(other) => Failure::usage(format!("{other:#}")),
        }
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        // rmcp logs every error it hands us (a 401, an error we answer a server with); we
        // report those ourselves, once, with the fix.
        0 => "warn,rmcp=off",
        1 => "info,rmcp=warn",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none(),
        )
        .without_time()
        .init();
}

/// Which signals end Tether through [`stop_servers_on`].
enum ExitSignals {
    None,
    Termination,
    TerminationAndInterrupt,
}

/// On SIGTERM or SIGHUP (and Ctrl-C where the command has no use for it), kills every server
/// Tether started, whole process trees, then exits as the signal would have: servers run in
/// their own process groups, so nothing else would stop them. The handlers are installed before
/// this returns (it must be called inside the runtime), so no early signal slips past them.
fn stop_servers_on(signals: ExitSignals) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        // Registering a handler replaces the default action, so only where one is wanted.
        if matches!(signals, ExitSignals::None) {
            return;
        }
        let (Ok(mut term), Ok(mut hangup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return;
        };
        let mut interrupt = match signals {
            ExitSignals::TerminationAndInterrupt => signal(SignalKind::interrupt()).ok(),
            _ => None,
        };
        tokio::spawn(async move {
            let interrupted = async {
                match interrupt.as_mut() {
                    Some(interrupt) => {
                        interrupt.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            let code = tokio::select! {
                _ = term.recv() => 143,
                _ = hangup.recv() => 129,
                () = interrupted => 130,
            };
            tether_mcp::kill_all_servers();
            std::process::exit(code);
        });
    }
    #[cfg(not(unix))]
    let _ = signals;
}

/// `tether tools | head -1`: once the reader is gone, printing fails and `println!` panics.
/// That is a clean end of the command (ripgrep's rule), not a crash: stop the servers and exit
/// 0, without a backtrace. Matched by the error number, which no locale translates.
fn end_quietly_when_stdout_closes() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("(os error 32)") {
            tether_mcp::kill_all_servers();
            std::process::exit(0);
        }
        default(info);
    }));
}

fn main() -> ExitCode {
    end_quietly_when_stdout_closes();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let is_help = matches!(
                error.kind(),
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion
            );
            let _ = error.print();
            return if is_help {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(exit::USAGE)
            };
        }
    };
    if let Some(Command::Completions { shell }) = &cli.command {
        // Into a buffer first: clap_complete panics when its writer fails (`| head`).
        let mut script = Vec::new();
        clap_complete::generate(
            *shell,
            &mut <Cli as clap::CommandFactory>::command(),
            "tether",
            &mut script,
        );
        let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
        return ExitCode::SUCCESS;
    }
    init_logging(cli.global.verbose);
    render::JSON_ERRORS.store(cli.global.json, std::sync::atomic::Ordering::Relaxed);
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if matches!(cli.command, Some(Command::Serve { .. }))
        && std::env::var_os("TOKIO_WORKER_THREADS").is_none()
    {
        builder.worker_threads(gateway_workers());
    }
    let runtime = match builder.enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            safe_eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let command = match cli.command {
        Some(command) => command,
        None if std::io::IsTerminal::is_terminal(&std::io::stdin()) => Command::Chat {
            model: models::ModelArgs::default(),
            resume: None,
        },
        None => {
            safe_eprintln!(
                "error: no command; `tether --help` lists them (plain `tether` starts a chat only in a terminal)"
            );
            return ExitCode::from(exit::USAGE);
        }
    };
    let signals = match &command {
        // `serve` stops its servers itself on SIGTERM and Ctrl-C; the built-in server has none.
        Command::Serve { .. } | Command::BuiltinServer { .. } => ExitSignals::None,
        // These cancel the turn on Ctrl-C themselves.
        Command::Run { .. } | Command::Chat { .. } => ExitSignals::Termination,
        _ => ExitSignals::TerminationAndInterrupt,
    };
    {
        let _inside = runtime.enter();
        stop_servers_on(signals);
    }
    let outcome = runtime.block_on(commands::run(cli.global, command));
    // Children are killed on drop; don't wait for stray background tasks.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    // What a server started outside its process group (`setsid`) goes too.
    tether_mcp::process_ties::stop_escaped_descendants();
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if let Some(message) = failure.message {
                render::print_error(&message, Some(failure.code));
            }
            ExitCode::from(failure.code)
        }
    }
}

/// The gateway's worker threads: half the machine's CPUs (at least one), the other half left
/// to the stdio servers it runs and their clients. Its per-call work is wake-ups between the
/// connection, the server's pipes and its output reader; with a worker per CPU those cross
/// threads (a futex each) on every call. Measured on two CPUs with the gateway benchmark: one
/// worker spent about a fifth less CPU per call than two and answered more calls per second at
/// every concurrency (docs/decisions.md). `TOKIO_WORKER_THREADS` overrides it.
fn gateway_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| (n.get() / 2).max(1))
        .unwrap_or(1)
}
