//! The steps of decoding: the prompt queued in batches, the system turn's share of it, the
//! drafts of a call, the grammar's choice of a token, and each step fed back.

use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::sampling::LlamaSampler;
use tether_llm::LlmError;

use crate::prompt_cache::Restore;
use crate::{Engine, MAX_DRAFT_TOKENS, Prepared, TOOL_GUIDE_HEADING, draft, prompt_cache};

/// The places in `system_turn` (byte offsets) where the prompt cache keeps a state besides its
/// end, ascending: after its first paragraph, the usage guide every request opens with; before
/// the tool guide, after the servers' instructions, which every request to the same servers
/// shares; and after the tool guide's heading, so that a question's first run evaluates only
/// the tools it is offered (the heading was about half of the 135M model's tool guide for one
/// tool).
pub(crate) fn shared_marks(system_turn: &str) -> Vec<usize> {
    let mut marks = Vec::new();
    if let Some(at) = system_turn.find("\n\n") {
        marks.push(at + 2);
    }
    if let Some(at) = system_turn.rfind(&format!("\n\n{TOOL_GUIDE_HEADING}")) {
        marks.push(at + 2);
        marks.push(at + 2 + TOOL_GUIDE_HEADING.len());
    }
    marks.dedup();
    marks
}

/// How many of `tokens` (the whole prompt) lead up to each place the prompt cache keeps, in
/// ascending order, its system turn's end last: empty when it has none or it is too short to
/// be worth it. Counted by tokenising the text up to the place alone and keeping what both
/// tokenisations agree on, so a token that spans the place is evaluated with what follows.
pub(crate) fn shared_levels(
    engine: &Engine,
    prepared: &Prepared,
    tokens: &[llama_cpp_2::token::LlamaToken],
) -> Vec<usize> {
    if prepared.shared_end == 0 {
        return Vec::new();
    }
    let Some(turn) = prepared.prompt.get(..prepared.shared_end) else {
        return Vec::new();
    };
    let vocab = engine.model.vocab();
    let mut levels: Vec<usize> = Vec::new();
    for end in shared_marks(turn)
        .into_iter()
        .chain(std::iter::once(prepared.shared_end))
    {
        let Some(opening) = prepared.prompt.get(..end) else {
            continue;
        };
        let alone = vocab.tokenize(opening.as_bytes(), vocab.should_add_bos(), true);
        let agreed = alone.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        // At least one token is left to evaluate: its logits start the answer.
        if agreed >= prompt_cache::MIN_TOKENS
            && agreed < tokens.len()
            && levels.last().is_none_or(|last| agreed > *last)
        {
            levels.push(agreed);
        }
    }
    levels
}

/// The level past the system turn's: the whole prompt but its last token (whose logits start
/// the answer, so it is evaluated with the call's draft), when the prompt has a system turn
/// and what follows it is at least [`PROMPT_LEVEL_TOKENS`] long. A person's second
/// run of a question then restores its whole prompt and evaluates only the draft: on two
/// cores beside a busy job the user turn's tokens took about a third of the run. It is a level
/// whether or not the cache is on, so every run splits its batches alike and an answer
/// never depends on the cache.
pub(crate) fn prompt_level(
    levels: &[usize],
    tokens: &[llama_cpp_2::token::LlamaToken],
) -> Option<usize> {
    let shared = *levels.last()?;
    let level = tokens.len().checked_sub(1)?;
    (level >= shared + PROMPT_LEVEL_TOKENS).then_some(level)
}

/// The fewest tokens after the system turn worth a level of their own: a shorter turn costs
/// less to evaluate than its entry to store and load.
pub(crate) const PROMPT_LEVEL_TOKENS: usize = 8;

/// Evaluates the system turn and, where [`prompt_level`] gives one, the rest of the prompt
/// but its last token: `tokens` up to the last of `levels`, past the `held` tokens the context
/// holds already: restored from the prompt cache up to the furthest level it holds,
/// the rest evaluated a level at a time, each level's state stored. The turn is split at its
/// levels cache or not, so that an answer never depends on the cache. Returns where the
/// prompt's evaluation goes on, and whether a state was restored.
pub(crate) fn evaluate_shared(
    engine: &Engine,
    context: &mut llama_cpp_2::context::LlamaContext<'_>,
    batch: &mut LlamaBatch,
    tokens: &[llama_cpp_2::token::LlamaToken],
    levels: &[usize],
    held: usize,
    fail: &dyn Fn(String) -> LlmError,
) -> Result<(usize, bool), LlmError> {
    let mut start = held;
    let mut restored = false;
    if let Some(cache) = &engine.prompt_cache {
        for &level in levels.iter().rev() {
            if level <= start {
                break;
            }
            match cache.restore(context, &tokens[..level]) {
                Restore::Restored => {
                    restored = true;
                    start = level;
                    break;
                }
                // The context is emptied: a shorter level may still be restored.
                Restore::Failed => start = 0,
                Restore::Absent => {}
            }
        }
    }
    let from = start;
    for &level in levels.iter().filter(|level| **level > from) {
        let began = std::time::Instant::now();
        queue(batch, &tokens[start..level], start, false, fail)?;
        context
            .decode(batch)
            .map_err(|e| fail(format!("cannot evaluate the prompt: {e}")))?;
        let evaluated = began.elapsed();
        if let Some(cache) = &engine.prompt_cache {
            cache.store(context, &tokens[..level]);
        }
        tracing::debug!(
            from = start,
            to = level,
            evaluate_ms = evaluated.as_millis(),
            store_ms = (began.elapsed() - evaluated).as_millis(),
            q4_1_kernel_products = tether_llama_kernels::q4_1_products(),
            helped_pieces = tether_llama_kernels::helped_pieces(),
            "embedded model prompt level"
        );
        start = level;
    }
    Ok((start, restored))
}

/// The tokens drafted to follow `text` in a required call (none in any other mode), to be
/// placed from `from` on within a context of `context_size`.
pub(crate) fn call_draft(
    prepared: &Prepared,
    vocab: &llama_cpp_2::vocab::LlamaVocab<'_>,
    text: &str,
    context_size: u32,
    from: usize,
) -> Vec<llama_cpp_2::token::LlamaToken> {
    let Some(tools) = &prepared.call_tools else {
        return Vec::new();
    };
    let next = draft::next_text(tools, text);
    if next.is_empty() {
        return Vec::new();
    }
    // Tokenised in pieces that end at each brace or opening bracket: the model writes `{`
    // alone and then `"tool`, where the whole text tokenises as `{"` and `tool`, and closes a
    // call with `}` twice, not with the one token `}}`.
    let mut draft = Vec::new();
    for piece in next.split_inclusive(['{', '[', '}']) {
        draft.extend(vocab.tokenize(piece.as_bytes(), false, false));
    }
    let room = usize::try_from(context_size)
        .unwrap_or(usize::MAX)
        .saturating_sub(from);
    draft.truncate(MAX_DRAFT_TOKENS.min(room));
    draft
}

/// Clears `batch` and fills it with `tokens` from `start` on, asking for the last one's
/// logits when `logits`.
pub(crate) fn queue(
    batch: &mut LlamaBatch,
    tokens: &[llama_cpp_2::token::LlamaToken],
    start: usize,
    logits: bool,
    fail: &dyn Fn(String) -> LlmError,
) -> Result<(), LlmError> {
    batch.clear();
    let last = tokens.len().saturating_sub(1);
    for (offset, token) in tokens.iter().enumerate() {
        batch
            .add(
                *token,
                i32::try_from(start + offset).unwrap_or(i32::MAX),
                &[0],
                logits && offset == last,
            )
            .map_err(|e| fail(format!("cannot queue the prompt: {e}")))?;
    }
    Ok(())
}

/// The most likely token the grammar allows at output `index`.
pub(crate) fn grammar_token(
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

/// Feeds the chosen token back and evaluates it, with the tokens drafted to follow it, each
/// with its logits, for the next steps.
pub(crate) fn continue_decoding(
    batch: &mut LlamaBatch,
    token: llama_cpp_2::token::LlamaToken,
    draft: &[llama_cpp_2::token::LlamaToken],
    position: &mut i32,
    context: &mut llama_cpp_2::context::LlamaContext<'_>,
    fail: &dyn Fn(String) -> LlmError,
) -> Result<(), LlmError> {
    batch.clear();
    for (offset, next) in std::iter::once(&token).chain(draft).enumerate() {
        let at = position.saturating_add(i32::try_from(offset).unwrap_or(i32::MAX));
        batch
            .add(*next, at, &[0], true)
            .map_err(|e| fail(format!("cannot queue a token: {e}")))?;
    }
    *position += 1;
    context
        .decode(batch)
        .map_err(|e| fail(format!("cannot evaluate a token: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_the_usage_guide_and_all_but_the_tools() {
        let turn = format!(
            "<|im_start|>system\nYou are a helpful assistant.\n\nInstructions from the \"a\" server:\nBe brief.\n\nMore of them.\n\n{TOOL_GUIDE_HEADING}- a__b(): c\n<|im_end|>\n"
        );
        let marks = shared_marks(&turn);
        let texts: Vec<&str> = marks.iter().map(|m| &turn[..*m]).collect();
        assert_eq!(texts.len(), 3, "{texts:?}");
        assert!(texts[0].ends_with("You are a helpful assistant.\n\n"));
        assert!(texts[1].ends_with("More of them.\n\n"));
        assert!(texts[2].ends_with("\nTools:\n"));
        assert!(turn[marks[2]..].starts_with("- a__b(): c"));
        // Without servers' instructions the places before the guide are one.
        let plain = format!("You are a helpful assistant.\n\n{TOOL_GUIDE_HEADING}- a__b(): c\n");
        assert_eq!(shared_marks(&plain).len(), 2);
        assert!(shared_marks("no paragraphs").is_empty());
    }

    #[test]
    fn the_prompt_level_is_all_but_the_last_token_past_a_system_turn() {
        let tokens: Vec<_> = (0..60).map(llama_cpp_2::token::LlamaToken::new).collect();
        assert_eq!(prompt_level(&[32, 40], &tokens), Some(59));
        // Too little after the system turn, or no system turn at all.
        assert_eq!(prompt_level(&[55], &tokens), None);
        assert_eq!(prompt_level(&[], &tokens), None);
    }
}
