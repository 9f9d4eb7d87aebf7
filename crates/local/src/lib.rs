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
mod call_checks;
mod call_policy;
mod decoding;
pub mod described;
mod draft;
pub mod grammar;
mod kept;
mod named;
mod narrowing;
pub mod numbers;
pub mod paths;
mod phrases;
mod prepare;
pub mod prompt_cache;
mod repeats;
pub mod revisions;
mod sql;
pub mod template;
mod threads;
pub mod zones;

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
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
    EchoGuard, answer_ends, find_call, is_short_result, last_result, last_result_sentence,
    settle_answer,
};
use crate::call_checks::CallChecks;
use crate::call_policy::{
    NO_TOOL_ANSWER, NO_TOOL_COMPUTES, NO_TOOL_FITS, asks_to_compute_unserved,
    asks_to_look_up_unserved, failed_call_replaced, mentions_a_tool, this_turn_text,
    with_system_note, without_server_instructions,
};
use crate::decoding::{
    call_draft, continue_decoding, evaluate_shared, grammar_token, prompt_level, queue,
    shared_levels,
};
use crate::grammar::tool_call_grammar;
use crate::kept::{KeptContext, MIN_CONTEXT};
use crate::prompt_cache::PromptCache;
use crate::template::ChatTemplate;
pub use crate::threads::{default_threads, threads_for_now};

/// The model name `--model local` stands for.
pub const DEFAULT_MODEL_NAME: &str = "local:SmolLM2-135M-Instruct";
const MAX_CONTEXT: u32 = 8192;
const DEFAULT_MAX_TOKENS: u32 = 512;
const MAX_CALL_TOKENS: u32 = 256;
/// The most tokens drafted at once: a tool's name, its first argument's key, and the values
/// guessed from a short list with the keys between them.
const MAX_DRAFT_TOKENS: usize = 40;

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

/// A loaded model, shared by every request.
struct Engine {
    model: LlamaModel,
    template: ChatTemplate,
    threads: i32,
    context_size: u32,
    /// Where the state after each prompt's system turn is kept, when anywhere.
    prompt_cache: Option<PromptCache>,
    /// Whether the model thread keeps its context between requests.
    keep_context: bool,
}

/// Settings of the embedded provider.
#[derive(Debug, Clone)]
pub struct LocalOptions {
    /// Use grammar-constrained decoding for tool calls (off only to measure its effect).
    pub grammar: bool,
    /// Threads for llama.cpp; 0: chosen per request ([`threads_for_now`]).
    pub threads: i32,
    /// A folder for the [prompt cache](prompt_cache); `None`: every prompt evaluated whole.
    pub prompt_cache: Option<PathBuf>,
    /// Keep the context from one request to the next and evaluate only what a prompt adds
    /// ([`kept`]); off only to time whole requests, as llama.cpp's tools run them.
    pub keep_context: bool,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            grammar: true,
            threads: 0,
            prompt_cache: None,
            keep_context: true,
        }
    }
}

/// A GGUF model running in this process.
pub struct LocalProvider {
    name: String,
    engine: Arc<Engine>,
    options: LocalOptions,
    /// The one thread that runs the model, fed one request at a time.
    jobs: tokio::sync::mpsc::UnboundedSender<Job>,
}

/// One request for the model's thread: what to decode and where its events go.
type Job = (Prepared, Sender);

/// Runs every request on one long-lived thread. llama.cpp's OpenMP threads form a pool per
/// thread that calls into it; requests on `spawn_blocking`'s changing threads made several
/// pools, more OpenMP threads than cores, and libgomp then stops spinning between operations:
/// generation fell from about 100 to 38 tokens a second in some rounds and not others (the
/// same rate as llama-bench under `OMP_WAIT_POLICY=passive`).
fn model_thread(engine: Arc<Engine>, name: String) -> tokio::sync::mpsc::UnboundedSender<Job> {
    let (jobs, mut queue) = tokio::sync::mpsc::unbounded_channel::<Job>();
    let spawned = std::thread::Builder::new()
        .name("tether-model".into())
        .spawn(move || {
            let engine = engine;
            // Declared after `engine`, whose model it borrows.
            let mut kept: Option<KeptContext<'_>> = None;
            while let Some((prepared, tx)) = queue.blocking_recv() {
                if let Err(error) = generate(&engine, &mut kept, &name, &prepared, &tx) {
                    let _ = tx.unbounded_send(Err(error));
                }
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(%error, "cannot start the embedded model's thread");
    }
    jobs
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
            prompt_cache: options
                .prompt_cache
                .clone()
                .map(|dir| PromptCache::new(dir, path)),
            keep_context: options.keep_context,
        };
        let engine = Arc::new(engine);
        let jobs = model_thread(engine.clone(), name.clone());
        Ok(LocalProvider {
            name,
            engine,
            options,
            jobs,
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

/// How the tool guide opens, the same in every request with tools: the form of a call and the
/// list's heading. The prompt cache keeps a state before it, where what differs between requests
/// to other servers begins, and after it, where what differs between requests to the same
/// servers (the tools offered) begins.
pub(crate) const TOOL_GUIDE_HEADING: &str = "You have tools. To use one, reply only with JSON: {\"tool\": \"<name>\", \"arguments\": {...}}\nTools:\n";

/// Tools described compactly (`name(a: number, b?: string): description`): small models
/// read JSON schemas poorly, and every prompt token costs time on a CPU.
fn tool_guide(tools: &[ToolDefinition]) -> String {
    let mut text = TOOL_GUIDE_HEADING.to_string();
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
            if self.jobs.send((prepared, tx)).is_err() {
                return Err(LlmError::InvalidResponse {
                    provider: self.name.clone(),
                    message: "the embedded model's thread has stopped".into(),
                });
            }
            Ok(Box::pin(rx) as EventStream)
        })
    }
}

/// What one request runs: the rendered prompt, the grammar of a call, how it is decoded.
struct Prepared {
    prompt: String,
    /// Where the prompt's system turn ends, the part the prompt cache keeps (0: none).
    shared_end: usize,
    /// The GBNF grammar of a call, when one is required or allowed.
    grammar: Option<String>,
    /// The tools of a required call, whose fixed text is drafted ([`draft`]).
    call_tools: Option<Vec<ToolDefinition>>,
    mode: CallMode,
    max_tokens: u32,
    /// What to answer instead when an answer turns out to be another call.
    fallback: Option<String>,
    /// The whole answer, given without running the model.
    fixed: Option<String>,
    /// The question and the results it got: the numbers an answer may give.
    known: String,
    /// The last tool result, which a short answer must report.
    result: String,
    /// The paths and file names the question writes out, which an answer must keep to when
    /// the result names them.
    named: Vec<String>,
    /// What a call's arguments are checked for once the model made it.
    checks: CallChecks,
}

type Sender = futures::channel::mpsc::UnboundedSender<Result<StreamEvent, LlmError>>;

/// Decodes `prepared` on `engine`, sending what it makes to `tx`, in the context `kept` from
/// the last request when it fits; the context is kept there for the next.
fn generate<'m>(
    engine: &'m Engine,
    kept: &mut Option<KeptContext<'m>>,
    name: &str,
    prepared: &Prepared,
    tx: &Sender,
) -> Result<(), LlmError> {
    let prompt = prepared.prompt.as_str();
    let grammar = prepared.grammar.as_deref();
    let fallback = prepared.fallback.as_deref();
    let (mode, max_tokens) = (prepared.mode, prepared.max_tokens);
    if let Some(answer) = &prepared.fixed {
        let _ = tx.unbounded_send(Ok(StreamEvent::TextDelta(answer.clone())));
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
    tracing::trace!(%prompt, "embedded model prompt");
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
    // Size the context to this request (at least MIN_CONTEXT), not the model's maximum:
    // allocating and clearing an 8k-token cache costs more than a short answer.
    let needed = (tokens.len() + max_tokens as usize + MAX_DRAFT_TOKENS).div_ceil(256) * 256;
    let needed_context = u32::try_from(needed.min(budget)).unwrap_or(engine.context_size);
    let batch_size = tokens.len().max(512);
    let threads = if engine.threads > 0 {
        engine.threads
    } else {
        threads_for_now()
    };
    tether_llama_kernels::share_one_thread_work(threads::prompt_helper(
        engine.threads > 0,
        threads,
    ));
    let started = std::time::Instant::now();
    let batch_rows = u32::try_from(batch_size).unwrap_or(u32::MAX);
    let reused = kept
        .take()
        .and_then(|kept| kept.reuse(&tokens, needed_context, batch_rows, threads));
    let (mut context, held) = match reused {
        Some(reused) => reused,
        None => {
            let params = LlamaContextParams::default()
                .with_n_ctx(NonZeroU32::new(
                    needed_context.max(MIN_CONTEXT).min(engine.context_size),
                ))
                .with_n_batch(batch_rows)
                .with_n_threads(threads)
                .with_n_threads_batch(threads);
            let context = model
                .new_context(backend, params)
                .map_err(|e| fail(format!("cannot create a context: {e}")))?;
            (context, 0)
        }
    };
    let context_size = context.n_ctx();
    let mut batch = LlamaBatch::new(batch_size, 1);
    let made = started.elapsed();
    let mut levels = shared_levels(engine, prepared, &tokens);
    let shared = levels.last().copied().unwrap_or(0);
    if let Some(level) = prompt_level(&levels, &tokens) {
        levels.push(level);
    }
    let (start, restored) = evaluate_shared(
        engine,
        &mut context,
        &mut batch,
        &tokens,
        &levels,
        held,
        &fail,
    )?;
    queue(&mut batch, &tokens[start..], start, true, &fail)?;
    // The index of the prompt's last row, whose logits choose the first token.
    let last_row = batch.n_tokens() - 1;
    // A call's opening is drafted with the prompt, and checked like any draft.
    let opening = call_draft(prepared, &vocab, "", context_size, tokens.len());
    for (offset, token) in opening.iter().enumerate() {
        batch
            .add(
                *token,
                i32::try_from(tokens.len() + offset).unwrap_or(i32::MAX),
                &[0],
                true,
            )
            .map_err(|e| fail(format!("cannot queue the prompt: {e}")))?;
    }
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
    // The next place in the model's cache, and the batch row whose logits give the next token.
    let mut position = i32::try_from(tokens.len()).unwrap_or(i32::MAX);
    let mut index = last_row;
    // Drafted tokens evaluated after that row and not yet confirmed by the model's choice.
    let (mut drafted_count, mut confirmed_count) = (opening.len(), 0usize);
    let mut drafted: std::collections::VecDeque<llama_cpp_2::token::LlamaToken> = opening.into();
    let mut generated = 0u64;
    let mut stop = StopReason::MaxTokens;
    for _ in 0..max_tokens {
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
                    break;
                }
                if echoed {
                    stop = StopReason::EndTurn;
                    break;
                }
            }
        }
        if tx.is_closed() {
            break;
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
        if drafted.front() == Some(&token) {
            // The model chose the drafted token: it is evaluated already.
            drafted.pop_front();
            confirmed_count += 1;
            position += 1;
            index += 1;
            continue;
        }
        if !drafted.is_empty() {
            // It chose otherwise: what was drafted after this point goes.
            drafted.clear();
            context
                .clear_kv_cache_seq(Some(0), u32::try_from(position).ok(), None)
                .map_err(|e| fail(format!("cannot drop a draft: {e}")))?;
        }
        // After the chosen token, which takes `position`.
        let draft = call_draft(
            prepared,
            &vocab,
            &text,
            context_size,
            usize::try_from(position)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        );
        drafted_count += draft.len();
        tracing::trace!(%text, draft = draft.len(), "embedded model draft");
        continue_decoding(
            &mut batch,
            token,
            &draft,
            &mut position,
            &mut context,
            &fail,
        )?;
        drafted = draft.into();
        index = 0;
    }
    if let (true, Some(fallback)) = (whole, fallback) {
        let answer = settle_answer(
            &text,
            fallback,
            &prepared.known,
            &prepared.result,
            &prepared.named,
        );
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
        shared_tokens = shared,
        held_tokens = held,
        restored,
        evaluated_from = start,
        drafted = drafted_count,
        confirmed = confirmed_count,
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
                let arguments = prepared.checks.checked(&tool, arguments, &prepared.known);
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
    if engine.keep_context {
        *kept = Some(KeptContext::new(context, tokens, threads));
    }
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
}
