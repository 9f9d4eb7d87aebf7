//! The embedded model: a GGUF model run in-process with llama.cpp (through `llama-cpp-2`),
//! exposed as a `tether-llm` [`Provider`]. Prompts are rendered with the model's own chat
//! template; tool calls are made reliable for small models by grammar-constrained decoding
//! (the tool name first, then its typed arguments); the default model is fetched, verified and
//! cached on first use.
//!
//! Tool policy: with `tool_choice: required` the strict grammar applies. In auto mode a model
//! of a billion parameters or more decides by itself, under a lazy grammar that takes over once
//! it writes the call opener `{"tool": `; a smaller model cannot be trusted to decide, so when
//! the last message is the user's a call is required, and after tool results it answers in
//! free text. With `tool_choice: none` no grammar is used.
//!
//! The model files themselves are `tether-models`' job, so that the sentence encoder, which
//! needs no C++, can be fetched by a build without this crate.

mod answer_guards;
mod call_policy;
pub mod described;
pub mod grammar;
mod named;
mod narrowing;
pub mod numbers;
pub mod paths;
pub mod revisions;
pub mod template;
pub mod zones;

use std::num::NonZeroU32;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use serde_json::Value;
use tether_llm::provider::EventStream;
use tether_llm::{ChatRequest, LlmError, Provider, StopReason, StreamEvent, ToolChoice};
use tether_protocol::chat::{Message, ToolDefinition, Usage};

use crate::answer_guards::{
    EchoGuard, answer_ends, find_call, last_result, last_result_sentence, settle_answer,
};
use crate::call_policy::{
    NO_TOOL_ANSWER, NO_TOOL_FITS, asks_to_look_up_unserved, mentions_a_tool, this_turn_text,
    with_system_note, without_server_instructions,
};
use crate::grammar::tool_call_grammar;
use crate::template::ChatTemplate;

/// The model name `--model local` stands for.
pub const DEFAULT_MODEL_NAME: &str = "local:SmolLM2-135M-Instruct";
const MAX_CONTEXT: u32 = 8192;
const DEFAULT_MAX_TOKENS: u32 = 512;
const MAX_CALL_TOKENS: u32 = 256;

static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();

fn backend() -> Result<&'static LlamaBackend, LlmError> {
    BACKEND
        .get_or_init(|| {
            // llama.cpp logs a lot; route it to tracing (visible with -vv) instead of stderr.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| format!("cannot start llama.cpp: {e}"))
        })
        .as_ref()
        .map_err(|e| LlmError::Config(e.clone()))
}

/// Physical cores, which is what llama.cpp runs best on.
pub fn default_threads() -> i32 {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let physical = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .map(|info| {
            let mut pairs = std::collections::HashSet::new();
            let mut physical_id = String::new();
            for line in info.lines() {
                if let Some(v) = line.strip_prefix("physical id") {
                    physical_id = v.trim_start_matches([' ', '\t', ':']).to_string();
                } else if let Some(v) = line.strip_prefix("core id") {
                    pairs.insert((
                        physical_id.clone(),
                        v.trim_start_matches([' ', '\t', ':']).to_string(),
                    ));
                }
            }
            pairs.len()
        })
        .filter(|&n| n > 0)
        .unwrap_or(logical);
    i32::try_from(physical.min(logical).max(1)).unwrap_or(1)
}

/// Threads for one request when none were set: the physical cores less those another job is
/// keeping busy right now (`procs_running` in `/proc/stat`, less the running threads of this
/// process and of the servers it started, the fewest of a few samples), at least one.
/// llama.cpp's threads meet at a barrier after every layer, so one thread that shares its core
/// with another job holds all the others back: on a two-core machine with one busy job, two
/// threads took twice as long as one.
pub fn threads_for_now() -> i32 {
    let physical = default_threads();
    let logical = std::thread::available_parallelism()
        .map(|n| i32::try_from(n.get()).unwrap_or(i32::MAX))
        .unwrap_or(1);
    // Sampled a few times a millisecond apart, the fewest: a thread that runs for an instant
    // (this process's own runtime, a server starting up) is no job keeping a core busy, and
    // one sample took it for one on a quiet machine and halved the threads.
    let ours = own_processes();
    let mut others: Option<i32> = None;
    for sample in 0..SAMPLES {
        if sample > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let Some(running) = procs_running() else {
            return physical;
        };
        let now = running - running_tasks(&ours).max(1);
        others = Some(others.map_or(now, |o| o.min(now)));
    }
    threads_left(physical, logical, others.unwrap_or(0))
}

/// How many times [`threads_for_now`] looks at the running tasks.
const SAMPLES: usize = 5;

/// The machine's running tasks (`procs_running` in `/proc/stat`).
fn procs_running() -> Option<i32> {
    std::fs::read_to_string("/proc/stat").ok().and_then(|stat| {
        stat.lines()
            .find_map(|l| l.strip_prefix("procs_running "))
            .and_then(|n| n.trim().parse::<i32>().ok())
    })
}

/// This process and the processes it started (its servers, theirs), from `/proc`.
fn own_processes() -> Vec<u32> {
    let me = std::process::id();
    // Every process's parent, to find this one's descendants.
    let mut parents: Vec<(u32, u32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let parent = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|stat| parent_in_stat(&stat));
            if let Some(parent) = parent {
                parents.push((pid, parent));
            }
        }
    }
    let mut ours = vec![me];
    let mut i = 0;
    while let Some(&pid) = ours.get(i) {
        ours.extend(parents.iter().filter(|(_, p)| *p == pid).map(|(c, _)| *c));
        i += 1;
    }
    ours
}

/// The running threads of `processes`.
fn running_tasks(processes: &[u32]) -> i32 {
    let running: usize = processes
        .iter()
        .map(|pid| {
            std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| {
                tasks
                    .flatten()
                    .filter(|task| {
                        std::fs::read_to_string(task.path().join("stat"))
                            .is_ok_and(|stat| state_in_stat(&stat) == Some('R'))
                    })
                    .count()
            })
        })
        .sum();
    i32::try_from(running).unwrap_or(i32::MAX)
}

/// The state letter of a `/proc/…/stat` line (after the command's closing parenthesis, which
/// a command name may itself contain).
fn state_in_stat(stat: &str) -> Option<char> {
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The parent's pid in a `/proc/…/stat` line.
fn parent_in_stat(stat: &str) -> Option<u32> {
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// [`threads_for_now`]'s arithmetic: `others` is how many other threads are running.
fn threads_left(physical: i32, logical: i32, others: i32) -> i32 {
    physical.min(logical - others.max(0)).max(1)
}

/// A loaded model, shared by every request.
struct Engine {
    model: LlamaModel,
    template: ChatTemplate,
    threads: i32,
    context_size: u32,
}

/// Settings of the embedded provider.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Use grammar-constrained decoding for tool calls (off only to measure its effect).
    pub grammar: bool,
    /// Threads for llama.cpp; 0: chosen per request ([`threads_for_now`]).
    pub threads: i32,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            grammar: true,
            threads: 0,
        }
    }
}

/// A GGUF model running in this process.
pub struct LocalProvider {
    name: String,
    engine: Arc<Engine>,
    options: LocalOptions,
}

impl LocalProvider {
    /// Loads `path`; `name` is what messages call it.
    pub fn load(
        path: &Path,
        name: String,
        options: LocalOptions,
    ) -> Result<LocalProvider, LlmError> {
        let backend = backend()?;
        if !path.is_file() {
            return Err(LlmError::Config(format!(
                "{name}: model file {} does not exist",
                path.display()
            )));
        }
        let model = LlamaModel::load_from_file(backend, path, &LlamaModelParams::default())
            .map_err(|e| {
                LlmError::Config(format!("{name}: cannot load {}: {e}", path.display()))
            })?;
        let source = model.meta_val_str("tokenizer.chat_template").ok();
        let piece = |token| {
            String::from_utf8_lossy(&model.vocab().token_to_piece(token, true, None)).into_owned()
        };
        let template = ChatTemplate::new(
            source,
            piece(model.vocab().bos()),
            piece(model.vocab().eos()),
        );
        let context_size = model.n_ctx_train().clamp(512, MAX_CONTEXT);
        let engine = Engine {
            model,
            template,
            threads: options.threads,
            context_size,
        };
        Ok(LocalProvider {
            name,
            engine: Arc::new(engine),
            options,
        })
    }
}

/// What the grammar does for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CallMode {
    /// Free text.
    Answer,
    /// Exactly one tool call, grammar-constrained.
    RequiredCall,
    /// Text or a call; the grammar applies from the call opener on.
    LazyCall,
    /// No grammar, but the text is checked for a call (grammar switched off).
    UnconstrainedCall,
}

/// Tools described compactly (`name(a: number, b?: string): description`): small models
/// read JSON schemas poorly, and every prompt token costs time on a CPU.
fn tool_guide(tools: &[ToolDefinition]) -> String {
    let mut text = String::from(
        "You have tools. To use one, reply only with JSON: {\"tool\": \"<name>\", \"arguments\": {...}}\nTools:\n",
    );
    for tool in tools {
        let required: Vec<&str> = tool.parameters["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let arguments: Vec<String> = tool.parameters["properties"]
            .as_object()
            .map(|properties| {
                properties
                    .iter()
                    .map(|(name, schema)| {
                        let optional = if required.contains(&name.as_str()) {
                            ""
                        } else {
                            "?"
                        };
                        let kind = schema["type"].as_str().unwrap_or("value");
                        format!("{name}{optional}: {kind}")
                    })
                    .collect()
            })
            .unwrap_or_default();
        let description = tool.description.lines().next().unwrap_or_default();
        text.push_str(&format!(
            "- {}({}): {description}\n",
            tool.name,
            arguments.join(", ")
        ));
    }
    text
}

impl Provider for LocalProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn context_window(&self) -> Option<usize> {
        Some(self.engine.context_size as usize)
    }

    fn stream<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> BoxFuture<'a, Result<EventStream, LlmError>> {
        Box::pin(async move {
            let prepared = self.prepare(request)?;
            let (tx, rx) = futures::channel::mpsc::unbounded();
            let engine = self.engine.clone();
            let name = self.name.clone();
            tokio::task::spawn_blocking(move || {
                let failure = tx.clone();
                if let Err(error) = generate(&engine, &name, &prepared, &tx) {
                    let _ = failure.unbounded_send(Err(error));
                }
            });
            Ok(Box::pin(rx) as EventStream)
        })
    }
}

/// What one request runs: the rendered prompt, the grammar of a call, how it is decoded.
struct Prepared {
    prompt: String,
    /// The GBNF grammar of a call, when one is required or allowed.
    grammar: Option<String>,
    mode: CallMode,
    max_tokens: u32,
    /// What to answer instead when an answer turns out to be another call.
    fallback: Option<String>,
    /// The whole answer, given without running the model.
    fixed: Option<&'static str>,
    /// The question and the results it got: the numbers an answer may give.
    known: String,
    /// The last tool result, which a short answer must report.
    result: String,
}

impl LocalProvider {
    /// The prompt and the GBNF grammar (when the answer must be a call) that `request` gives
    /// the model, as the provider would run it: for comparing with llama.cpp's own tools on
    /// the same work.
    pub fn prompt_and_grammar(
        &self,
        request: &ChatRequest,
    ) -> Result<(String, Option<String>), LlmError> {
        let prepared = self.prepare(request)?;
        Ok((prepared.prompt, prepared.grammar))
    }

    fn prepare(&self, request: &ChatRequest) -> Result<Prepared, LlmError> {
        let last_user = match request.messages.last() {
            Some(Message::User { content }) => Some(content.as_str()),
            _ => None,
        };
        // A small model is made to call a tool after each user message, unless the
        // message has nothing to do with any tool ("hello", "thanks"): then it answers.
        // The built-in server reads under the working directory, ours too.
        let root = std::env::current_dir().unwrap_or_else(|_| ".".into());
        let known = paths::files_for(&request.tools, &root);
        let named_files =
            last_user.and_then(|text| paths::read_named_files(&request.tools, text, &known.files));
        let names_a_file = last_user.is_some_and(|text| {
            named_files.is_some() || !paths::files_named_in(text, &known.files).is_empty()
        });
        // Asked for something looked up live that no offered tool names (the weather with a
        // file search offered because its description says "like"): no call, and no answer
        // made up either.
        let unserved = last_user.is_some_and(|t| asks_to_look_up_unserved(t, &request.tools));
        let last_is_user = !unserved
            && (names_a_file
                || last_user.is_some_and(|text| mentions_a_tool(text, &request.tools)));
        let small = self.engine.model.n_params() < 1_000_000_000;
        let has_tools = !request.tools.is_empty() && request.tool_choice != ToolChoice::None;
        let mode = if !has_tools {
            CallMode::Answer
        } else if request.tool_choice == ToolChoice::Required || (small && last_is_user) {
            if self.options.grammar {
                CallMode::RequiredCall
            } else {
                CallMode::UnconstrainedCall
            }
        } else if small {
            CallMode::Answer
        } else if self.options.grammar {
            CallMode::LazyCall
        } else {
            CallMode::UnconstrainedCall
        };
        let tools = if mode == CallMode::Answer {
            &[][..]
        } else {
            &request.tools[..]
        };
        let guide = tool_guide(tools);
        // A small model with tools, asked something none of them fits, is told so: left to
        // itself it invents what a tool would have looked up (a weather forecast).
        let no_tool_fits = small && has_tools && mode == CallMode::Answer && last_user.is_some();
        let noted;
        let messages = if no_tool_fits {
            // Servers' instructions are for using their tools; with none to use, the 135M
            // model recites them.
            noted = with_system_note(
                &without_server_instructions(&request.messages),
                NO_TOOL_FITS,
            );
            &noted[..]
        } else {
            &request.messages[..]
        };
        let prompt = self
            .engine
            .template
            .render(messages, tools, Some(&guide), !small)
            .map_err(|e| LlmError::InvalidResponse {
                provider: self.name.clone(),
                message: e,
            })?;
        // A repository's revisions, for the tools that take one (`git_show`).
        let revisions = known
            .repositories
            .first()
            .map(|repo| revisions::revisions_of(&root.join(repo)))
            .unwrap_or_default();
        // Places the question names narrow time-zone arguments to their zones.
        let zones = last_user.map(zones::zones_named_in).unwrap_or_default();
        let grammar = matches!(mode, CallMode::RequiredCall | CallMode::LazyCall).then(|| {
            match (&named_files, mode) {
                (Some(read), CallMode::RequiredCall) => tool_call_grammar(read),
                _ => {
                    let text = last_user.unwrap_or_default();
                    let narrowed = paths::property_tools_only(tools, text);
                    let narrowed = paths::existing_paths_only(&narrowed, &known, text);
                    let narrowed = numbers::written_numbers_only(&narrowed, text);
                    let narrowed = described::described_values_only(&narrowed, text);
                    let narrowed = named::named_things_only(&narrowed, text);
                    let narrowed = revisions::known_revisions_only(&narrowed, &revisions, text);
                    tool_call_grammar(&zones::named_zones_only(&narrowed, &zones))
                }
            }
        });
        let max_tokens = match mode {
            CallMode::Answer | CallMode::LazyCall => {
                request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)
            }
            CallMode::RequiredCall | CallMode::UnconstrainedCall => MAX_CALL_TOKENS,
        };
        // Asked for something looked up live with no tool for it, a small model invents it.
        let fixed = (no_tool_fits && unserved).then_some(NO_TOOL_ANSWER);
        let fallback = (mode == CallMode::Answer)
            .then(|| last_result_sentence(&request.messages))
            .flatten();
        let known = this_turn_text(&request.messages);
        Ok(Prepared {
            prompt,
            grammar,
            mode,
            max_tokens,
            fallback,
            fixed,
            known,
            result: last_result(&request.messages).to_string(),
        })
    }
}

type Sender = futures::channel::mpsc::UnboundedSender<Result<StreamEvent, LlmError>>;

/// Decodes `prepared` on `engine`, sending what it makes to `tx`.
fn generate(engine: &Engine, name: &str, prepared: &Prepared, tx: &Sender) -> Result<(), LlmError> {
    let prompt = prepared.prompt.as_str();
    let grammar = prepared.grammar.as_deref();
    let fallback = prepared.fallback.as_deref();
    let (mode, max_tokens) = (prepared.mode, prepared.max_tokens);
    if let Some(answer) = prepared.fixed {
        let _ = tx.unbounded_send(Ok(StreamEvent::TextDelta(answer.to_string())));
        let _ = tx.unbounded_send(Ok(StreamEvent::Stop(StopReason::EndTurn)));
        return Ok(());
    }
    let backend = backend()?;
    let model = &engine.model;
    let vocab = model.vocab();
    let fail = |message: String| LlmError::InvalidResponse {
        provider: name.to_string(),
        message,
    };
    let tokens = vocab.tokenize(prompt.as_bytes(), vocab.should_add_bos(), true);
    let budget = engine.context_size as usize;
    if tokens.len() + max_tokens as usize > budget {
        return Err(LlmError::ContextWindow {
            provider: name.to_string(),
            message: format!(
                "the prompt is {} tokens and the answer may need {max_tokens}, but the context holds {budget}",
                tokens.len()
            ),
        });
    }
    // Size the context to this request, not the model's maximum: allocating and clearing an
    // 8k-token cache per request costs more than a short answer.
    let needed = (tokens.len() + max_tokens as usize).div_ceil(256) * 256;
    let needed_context = u32::try_from(needed.min(budget)).unwrap_or(engine.context_size);
    let batch_size = tokens.len().max(512);
    let threads = if engine.threads > 0 {
        engine.threads
    } else {
        threads_for_now()
    };
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(needed_context))
        .with_n_batch(u32::try_from(batch_size).unwrap_or(u32::MAX))
        .with_n_threads(threads)
        .with_n_threads_batch(threads);
    let started = std::time::Instant::now();
    let mut context = model
        .new_context(backend, params)
        .map_err(|e| fail(format!("cannot create a context: {e}")))?;
    let mut batch = LlamaBatch::new(batch_size, 1);
    let last = tokens.len().saturating_sub(1);
    for (position, token) in tokens.iter().enumerate() {
        batch
            .add(
                *token,
                i32::try_from(position).unwrap_or(i32::MAX),
                &[0],
                position == last,
            )
            .map_err(|e| fail(format!("cannot queue the prompt: {e}")))?;
    }
    let made = started.elapsed();
    context
        .decode(&mut batch)
        .map_err(|e| fail(format!("cannot evaluate the prompt: {e}")))?;
    let evaluated = started.elapsed();

    // Grammar-constrained decoding checks the greedy token first and only filters the whole
    // vocabulary when that token breaks the grammar: filtering 49k candidates against a
    // grammar with many tools on every step was measured ~30x slower.
    let mut grammar_sampler = match grammar {
        Some(grammar) if mode == CallMode::LazyCall => Some(
            LlamaSampler::grammar_lazy(
                model,
                grammar,
                "root",
                [grammar::CALL_OPENER.as_bytes()],
                &[],
            )
            .map_err(|e| fail(format!("the tool grammar is invalid: {e}")))?,
        ),
        Some(grammar) => Some(
            LlamaSampler::grammar(model, grammar, "root")
                .map_err(|e| fail(format!("the tool grammar is invalid: {e}")))?,
        ),
        None => None,
    };
    let mut sampler = LlamaSampler::chain_simple([
        LlamaSampler::penalties(model.n_vocab(), 64, 1.1, 0.0, 0.0),
        LlamaSampler::greedy(),
    ]);

    let mut text = String::new();
    // An answer after a result is held whole and settled before anyone sees it
    // (`settle_answer`): it may turn into another call, invent a number or repeat itself.
    let whole = mode == CallMode::Answer && fallback.is_some();
    let mut pending_bytes: Vec<u8> = Vec::new();
    let mut echo_guard = EchoGuard::default();
    let mut position = i32::try_from(tokens.len()).unwrap_or(i32::MAX);
    let mut generated = 0u64;
    let mut stop = StopReason::MaxTokens;
    for _ in 0..max_tokens {
        let index = batch.n_tokens() - 1;
        let token = match grammar_sampler.as_mut() {
            Some(grammar) => {
                let chosen = grammar_token(&context, index, grammar);
                grammar.accept(chosen);
                chosen
            }
            None => sampler.sample(&context, index),
        };
        if vocab.is_eog(token) {
            stop = StopReason::EndTurn;
            break;
        }
        generated += 1;
        pending_bytes.extend(vocab.token_to_piece(token, false, None));
        // Emit only complete UTF-8; a character may span tokens.
        let valid = match std::str::from_utf8(&pending_bytes) {
            Ok(s) => s.len(),
            Err(e) => e.valid_up_to(),
        };
        if valid > 0 {
            let piece = String::from_utf8_lossy(&pending_bytes[..valid]).into_owned();
            pending_bytes.drain(..valid);
            text.push_str(&piece);
            if whole {
                if answer_ends(&text) {
                    stop = StopReason::EndTurn;
                    break;
                }
            } else if mode == CallMode::Answer {
                let (piece, echoed) = echo_guard.push(&piece);
                if !piece.is_empty()
                    && tx
                        .unbounded_send(Ok(StreamEvent::TextDelta(piece)))
                        .is_err()
                {
                    // The receiver is gone: the turn was cancelled.
                    return Ok(());
                }
                if echoed {
                    stop = StopReason::EndTurn;
                    break;
                }
            }
        }
        if tx.is_closed() {
            return Ok(());
        }
        let call_text = match mode {
            CallMode::RequiredCall => Some(text.as_str()),
            CallMode::LazyCall => text.find(grammar::CALL_OPENER).map(|at| &text[at..]),
            _ => None,
        };
        if call_text.is_some_and(|t| serde_json::from_str::<Value>(t).is_ok()) {
            stop = StopReason::ToolCalls;
            break;
        }
        continue_decoding(&mut batch, token, &mut position, &mut context, &fail)?;
    }
    if let (true, Some(fallback)) = (whole, fallback) {
        let answer = settle_answer(&text, fallback, &prepared.known, &prepared.result);
        let _ = tx.unbounded_send(Ok(StreamEvent::TextDelta(answer)));
    }
    // What the guard held back as a possible start of our prompt turned out not to be.
    let rest = echo_guard.finish();
    if mode == CallMode::Answer && !whole && !rest.is_empty() {
        let _ = tx.unbounded_send(Ok(StreamEvent::TextDelta(rest)));
    }
    let _ = tx.unbounded_send(Ok(StreamEvent::Usage(Usage {
        input_tokens: tokens.len() as u64,
        output_tokens: generated,
    })));
    tracing::debug!(?mode, tokens = generated, %text, "embedded model output");
    tracing::debug!(
        threads,
        prompt_tokens = tokens.len(),
        context_ms = made.as_millis() as u64,
        prompt_ms = (evaluated - made).as_millis() as u64,
        generation_ms = (started.elapsed() - evaluated).as_millis() as u64,
        "embedded model timing"
    );
    if mode != CallMode::Answer {
        // The first complete call in the text, as a native tool call.
        let calls = find_call(&text);
        match calls {
            Some((tool, arguments)) => {
                let _ = tx.unbounded_send(Ok(StreamEvent::ToolCallDelta {
                    index: 0,
                    id: Some(format!("call_{}", position)),
                    name: Some(tool),
                    arguments,
                }));
                stop = StopReason::ToolCalls;
            }
            None => {
                let _ = tx.unbounded_send(Ok(StreamEvent::TextDelta(unfinished_call(&text))));
            }
        }
    }
    let _ = tx.unbounded_send(Ok(StreamEvent::Stop(stop)));
    Ok(())
}

/// What to answer for `text`, a call the model did not finish within its token limit: a
/// sentence naming the tool, not half a JSON object. Text that is no call stays as it is.
fn unfinished_call(text: &str) -> String {
    let Some(rest) = text
        .find(grammar::CALL_OPENER)
        .map(|at| &text[at + grammar::CALL_OPENER.len()..])
    else {
        return text.to_string();
    };
    let tool = rest
        .trim_start_matches('"')
        .split('"')
        .next()
        .unwrap_or_default();
    format!(
        "I could not finish the arguments of a call to {tool} within {MAX_CALL_TOKENS} tokens; \
         try asking with the values it needs spelled out."
    )
}

/// The most likely token the grammar allows at output `index`.
fn grammar_token(
    context: &llama_cpp_2::context::LlamaContext<'_>,
    index: i32,
    grammar: &mut LlamaSampler,
) -> llama_cpp_2::token::LlamaToken {
    use llama_cpp_2::token::data::LlamaTokenData;
    use llama_cpp_2::token::data_array::LlamaTokenDataArray;
    let logits = context.get_logits_ith(index);
    let best = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, logit)| (i32::try_from(i).unwrap_or(0), *logit))
        .unwrap_or((0, 0.0));
    let best_token = llama_cpp_2::token::LlamaToken(best.0);
    let mut single =
        LlamaTokenDataArray::new(vec![LlamaTokenData::new(best_token, best.1, 0.0)], false);
    single.apply_sampler(grammar);
    if single.data.first().is_some_and(|d| d.logit().is_finite()) {
        return best_token;
    }
    let mut all = context.token_data_array_ith(index);
    all.apply_sampler(grammar);
    all.data
        .iter()
        .filter(|d| d.logit().is_finite())
        .max_by(|a, b| a.logit().total_cmp(&b.logit()))
        .map(|d| d.id())
        .unwrap_or(best_token)
}

/// The first `{"tool": …, "arguments": …}` object in `text`.
/// Feeds the chosen token back and evaluates it, for the next step.
fn continue_decoding(
    batch: &mut LlamaBatch,
    token: llama_cpp_2::token::LlamaToken,
    position: &mut i32,
    context: &mut llama_cpp_2::context::LlamaContext<'_>,
    fail: &dyn Fn(String) -> LlmError,
) -> Result<(), LlmError> {
    batch.clear();
    batch
        .add(token, *position, &[0], true)
        .map_err(|e| fail(format!("cannot queue a token: {e}")))?;
    *position += 1;
    context
        .decode(batch)
        .map_err(|e| fail(format!("cannot evaluate a token: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfinished_call_is_told_not_shown() {
        let told = unfinished_call(
            r#"{"tool": "memory__create_relations", "arguments": {"relations": [1, 2, 3"#,
        );
        assert!(
            told.starts_with(
                "I could not finish the arguments of a call to memory__create_relations"
            ),
            "{told}"
        );
        assert_eq!(unfinished_call("Just an answer."), "Just an answer.");
    }

    #[test]
    fn a_stat_line_gives_state_and_parent_whatever_the_command() {
        let stat = "4242 (tether (x) y) R 17 4242 4242 0 -1 4194560";
        assert_eq!(state_in_stat(stat), Some('R'));
        assert_eq!(parent_in_stat(stat), Some(17));
        assert_eq!(state_in_stat("garbage"), None);
        // This test's own thread is running while it counts.
        assert!(running_tasks(&own_processes()) >= 1);
    }

    #[test]
    fn threads_leave_the_cores_other_jobs_keep_busy() {
        assert!(default_threads() >= 1);
        assert!(threads_for_now() >= 1);
        // Two cores: quiet, both; one other job running, one; a crowd, still one.
        assert_eq!(threads_left(2, 2, 0), 2);
        assert_eq!(threads_left(2, 2, 1), 1);
        assert_eq!(threads_left(2, 2, 8), 1);
        // Physical cores bound it even when hyperthreads are idle.
        assert_eq!(threads_left(4, 8, 2), 4);
    }
}
