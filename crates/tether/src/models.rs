//! The model a front end talks to: `run` and `chat`'s flags, the provider they name (or the
//! embedded model, fetched once), and the loop's settings read from flags and config.

use std::io::IsTerminal;

use tether_agent::results::DEFAULT_MAX_RESULT_CHARS;
use tether_agent::{AgentOptions, ApprovalMode, ToolMode};
use tether_catalog::SelectionMode;
use tether_catalog::SelectionOptions;
use tether_catalog::selection::DEFAULT_CONTEXT_WINDOW;
use tether_llm::{Provider, ProviderOptions, provider_for};

use tether_agent::Settings;

use crate::Failure;

/// Flags of `run` and `chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// provider:model, e.g. openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, ollama:qwen3:4b
    /// [env: TETHER_MODEL; or "model" in the config].
    #[arg(long, value_name = "PROVIDER:MODEL")]
    pub model: Option<String>,
    /// Base URL of the provider's API (for local or proxied servers).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// How tools reach the model: native tool calling, prompt-based JSON, or auto (native,
    /// falling back to prompt when the provider rejects tools).
    #[arg(long, value_enum, default_value = "auto")]
    pub tool_mode: ToolModeArg,
    /// Most model calls per question.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub max_steps: usize,
    /// ask: ask before tools not marked read-only; auto: run them, still asking for destructive
    /// ones; never: only read-only tools and explicit allows run.
    #[arg(long, value_enum, default_value = "ask")]
    pub approve: ApproveArg,
    /// Extra system prompt, added after Tether's.
    #[arg(long, value_name = "TEXT")]
    pub system_prompt: Option<String>,
    /// Which tools each request carries: all of them; search (a search_tools tool, the
    /// always-loaded tools and those found so far); meta (one mcp_query tool); auto (all while
    /// they fit in a tenth of the context window, search beyond) [config: "toolSelection"].
    #[arg(long, value_enum, value_name = "MODE")]
    pub tools: Option<ToolsArg>,
    /// Embedded model only: decode tool calls without the grammar (to measure its effect).
    #[arg(long, hide = true)]
    pub no_grammar: bool,
    /// Embedded model only: threads for llama.cpp (default: the physical cores less those
    /// other jobs keep busy, chosen per request).
    #[arg(long, value_name = "N", env = "TETHER_THREADS")]
    pub threads: Option<u16>,
}

impl Default for ModelArgs {
    /// The same values as the flags' defaults (for plain `tether`, which starts a chat).
    fn default() -> ModelArgs {
        ModelArgs {
            model: None,
            base_url: None,
            tool_mode: ToolModeArg::Auto,
            max_steps: 20,
            approve: ApproveArg::Ask,
            system_prompt: None,
            tools: None,
            no_grammar: false,
            threads: None,
        }
    }
}

/// `--tool-mode`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ToolModeArg {
    /// Native, falling back to prompt-based.
    Auto,
    /// Native tool calling only.
    Native,
    /// Tools in the system prompt, JSON replies.
    Prompt,
}

/// `--tools`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ToolsArg {
    /// Every tool on every request.
    All,
    /// Tools found by search, loaded as the conversation goes.
    Search,
    /// One mcp_query meta-tool.
    Meta,
    /// All while they fit in a tenth of the context window, search beyond.
    Auto,
}

/// `--approve`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ApproveArg {
    /// Ask before tools that are not read-only.
    Ask,
    /// Run without asking, except destructive tools.
    Auto,
    /// Never run tools that would need approval.
    Never,
}

pub(crate) struct Setup {
    pub(crate) provider: Box<dyn Provider>,
    pub(crate) options: AgentOptions,
    /// The `provider:model` it was built from.
    pub(crate) spec: String,
    /// How tools are selected for each request.
    pub(crate) selection: SelectionOptions,
}

pub(crate) async fn setup(args: &ModelArgs, settings: &Settings) -> Result<Setup, Failure> {
    let spec = args
        .model
        .clone()
        .or_else(|| std::env::var("TETHER_MODEL").ok().filter(|m| !m.is_empty()))
        .or_else(|| settings.model.clone())
        .or_else(default_model)
        .ok_or_else(|| {
            Failure::usage(
                "no model configured; pass --model provider:model (e.g. openai:gpt-4o-mini with OPENAI_API_KEY, or ollama:qwen3:4b), set TETHER_MODEL, or add \"model\" to the config",
            )
        })?;
    let provider = build_provider(&spec, args, settings).await?;
    let approval_rules = settings.approval.clone();
    let selection = selection_options(args, settings, &spec, provider.as_ref())?;
    let max_result_chars = settings
        .max_result_chars
        .unwrap_or(DEFAULT_MAX_RESULT_CHARS);
    let options = AgentOptions {
        max_result_chars,
        max_steps: args.max_steps.max(1),
        tool_mode: match args.tool_mode {
            ToolModeArg::Auto => ToolMode::Auto,
            ToolModeArg::Native => ToolMode::Native,
            ToolModeArg::Prompt => ToolMode::Prompt,
        },
        approval_mode: match args.approve {
            ApproveArg::Ask => ApprovalMode::Ask,
            ApproveArg::Auto => ApprovalMode::Auto,
            ApproveArg::Never => ApprovalMode::Never,
        },
        approval_rules,
        system_prompt: args.system_prompt.clone(),
        context_window: context_window(settings, provider.as_ref()),
        saved_results: crate::session::results_dir(),
        ..AgentOptions::default()
    };
    Ok(Setup {
        provider,
        options,
        spec,
        selection,
    })
}

/// `--tools`, else `"toolSelection"` in the config, else auto; tuned for the embedded model,
/// which is offered only the tools pre-selected for each question (its grammar is built over
/// them, and a 135M model does better choosing among three tools than calling a search).
pub(crate) fn selection_options(
    args: &ModelArgs,
    settings: &Settings,
    spec: &str,
    provider: &dyn Provider,
) -> Result<SelectionOptions, Failure> {
    let mode = match args.tools {
        Some(ToolsArg::All) => SelectionMode::All,
        Some(ToolsArg::Search) => SelectionMode::Search,
        Some(ToolsArg::Meta) => SelectionMode::Meta,
        Some(ToolsArg::Auto) => SelectionMode::Auto,
        None => settings.tool_selection.unwrap_or(SelectionMode::Auto),
    };
    let local = spec == "local" || spec.starts_with("local:");
    // A small model offered every tool chooses among them far worse than among the few
    // pre-selected for the question (the embedded model's benchmark: 41% against 91%), so
    // for it `auto` pre-selects however few tools there are.
    let mode = if local && mode == SelectionMode::Auto {
        SelectionMode::Search
    } else {
        mode
    };
    Ok(SelectionOptions {
        mode,
        context_window: context_window(settings, provider).unwrap_or(DEFAULT_CONTEXT_WINDOW),
        search_tool: !local,
        preload: if local { 3 } else { 5 },
        preload_margin: local.then_some(tether_catalog::SMALL_MODEL_PRELOAD_MARGIN),
        keep_loaded: !local,
        ..SelectionOptions::default()
    })
}

/// `"contextWindow"` in the config, else what the provider knows.
pub(crate) fn context_window(settings: &Settings, provider: &dyn Provider) -> Option<usize> {
    settings
        .context_window
        .or_else(|| provider.context_window())
}

/// The provider for `provider:model` (or `local`), with `--base-url` / `"baseUrl"` applied.
pub(crate) async fn build_provider(
    spec: &str,
    args: &ModelArgs,
    settings: &Settings,
) -> Result<Box<dyn Provider>, Failure> {
    let base_url = args.base_url.clone().or_else(|| settings.base_url.clone());
    if spec == "local" || spec.starts_with("local:") {
        return local_provider(spec, args).await;
    }
    provider_for(
        spec,
        &ProviderOptions {
            base_url,
            ..ProviderOptions::default()
        },
    )
    .map_err(|e| Failure::usage(e.to_string()))
}

/// The model used when none is configured: the embedded one, when built in.
fn default_model() -> Option<String> {
    cfg!(feature = "local").then(|| "local".to_string())
}

/// Prints download progress on stderr: a live line on a terminal, quarters otherwise.
pub(crate) fn progress_printer(what: &'static str) -> impl Fn(u64, Option<u64>, &str) + Sync {
    let terminal = std::io::stderr().is_terminal();
    let last_quarter = std::sync::atomic::AtomicU64::new(0);
    move |done, total, source| {
        let mb = |b: u64| b as f64 / 1_000_000.0;
        let Some(total) = total.filter(|t| *t > 0) else {
            return;
        };
        let percent = done * 100 / total;
        if terminal {
            crate::render::redraw_status(&format!(
                "downloading {what} from {source}: {percent:3}% ({:.0}/{:.0} MB)",
                mb(done),
                mb(total)
            ));
            if done >= total {
                safe_eprintln!();
            }
        } else {
            let quarter = percent / 25;
            if quarter > last_quarter.swap(quarter, std::sync::atomic::Ordering::Relaxed)
                || done == 0
            {
                safe_eprintln!("downloading {what} from {source}: {percent}%");
            }
        }
    }
}

#[cfg(feature = "local")]
async fn local_provider(spec: &str, args: &ModelArgs) -> Result<Box<dyn Provider>, Failure> {
    use tether_local::{DEFAULT_MODEL_NAME, LocalOptions, LocalProvider};
    use tether_models as provision;
    let (path, name) = match spec.strip_prefix("local:") {
        Some(path) => (std::path::PathBuf::from(path), spec.to_string()),
        None => {
            let progress = progress_printer("the default model");
            let path = provision::ensure_default_model(&progress)
                .await
                .map_err(Failure::partial)?;
            (path, DEFAULT_MODEL_NAME.to_string())
        }
    };
    let options = LocalOptions {
        grammar: !args.no_grammar,
        threads: args.threads.map_or(0, |n| i32::from(n.max(1))),
        prompt_cache: prompt_cache_dir(std::env::var_os("TETHER_PROMPT_CACHE")),
        keep_context: true,
    };
    let provider = tokio::task::spawn_blocking(move || LocalProvider::load(&path, name, options))
        .await
        .map_err(|e| Failure::partial(format!("loading the model failed: {e}")))?
        .map_err(|e| model_failure(&e))?;
    Ok(Box::new(provider))
}

/// Where the embedded model keeps its prompt cache: `$TETHER_PROMPT_CACHE` (`off`: nowhere),
/// else `prompt-cache` beside the models.
#[cfg(feature = "local")]
fn prompt_cache_dir(setting: Option<std::ffi::OsString>) -> Option<std::path::PathBuf> {
    match setting {
        Some(off) if off == "off" || off.is_empty() => None,
        Some(dir) => Some(dir.into()),
        None => Some(tether_models::model_dir().join("prompt-cache")),
    }
}

#[cfg(not(feature = "local"))]
async fn local_provider(spec: &str, _args: &ModelArgs) -> Result<Box<dyn Provider>, Failure> {
    Err(Failure::usage(format!(
        "--model {spec}: this build has no embedded model; rebuild with the \"local\" feature or use a remote provider"
    )))
}

/// `tether model pull|path`: the default model (in a build with the embedded model) and the
/// search encoder (in every build).
pub async fn model_command(action: &str) -> Result<(), Failure> {
    use tether_models as provision;
    if action == "path" {
        safe_println!(
            "{}",
            provision::model_dir()
                .join(provision::DEFAULT_MODEL_FILE)
                .display()
        );
        return Ok(());
    }
    if cfg!(feature = "local") {
        let progress = progress_printer("the default model");
        let path = provision::ensure_default_model(&progress)
            .await
            .map_err(Failure::partial)?;
        safe_println!("{}", path.display());
    }
    let progress = progress_printer("the search encoder");
    let encoder = provision::ensure_encoder_model(&progress)
        .await
        .map_err(Failure::partial)?;
    safe_println!("{}", encoder.display());
    Ok(())
}

#[cfg(feature = "local")]
fn model_failure(error: &tether_llm::LlmError) -> Failure {
    match error {
        tether_llm::LlmError::Config(message) => Failure::usage(message.clone()),
        other => Failure::partial(other.to_string()),
    }
}
