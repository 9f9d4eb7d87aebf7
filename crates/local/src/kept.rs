//! The model's state kept on its thread from one request to the next: the context (its cache
//! of evaluated tokens, its buffers) and the prompt that cache holds. A request whose prompt
//! opens with the same tokens evaluates only what follows them, as llama.cpp's server does
//! with `cache_prompt`: the answer after a call shares the call's opening (the usage guide and
//! the servers' instructions, the answer's whole system turn but its last two tokens), a chat's
//! next turn its earlier ones, the next question its system turn. Creating a context per
//! request also cost 10–15 ms (its cache cleared, its compute buffers reserved).

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::token::LlamaToken;

/// The smallest context made: large enough that the answer after a call fits the call's
/// context (about 200 prompt tokens and 512 to answer), so the two share it.
pub(crate) const MIN_CONTEXT: u32 = 1024;

/// A context left by the last request.
pub(crate) struct KeptContext<'m> {
    context: LlamaContext<'m>,
    /// The prompt whose state the context's sequence 0 holds from position 0 (what was
    /// generated after it is not counted, and is dropped before reuse).
    prompt: Vec<LlamaToken>,
    threads: i32,
}

impl<'m> KeptContext<'m> {
    /// Keeps `context`, which holds `prompt` from position 0, evaluated on `threads`.
    pub(crate) fn new(context: LlamaContext<'m>, prompt: Vec<LlamaToken>, threads: i32) -> Self {
        KeptContext {
            context,
            prompt,
            threads,
        }
    }

    /// The context for a request of `prompt` that needs `context_size` tokens, batches of
    /// `batch_size` and `threads` threads, with how many of the prompt's first tokens it holds
    /// already (the rest of its cache dropped); `None` when it does not fit (llama.cpp fixes a
    /// context's size, batch and threads when it is made).
    pub(crate) fn reuse(
        self,
        prompt: &[LlamaToken],
        context_size: u32,
        batch_size: u32,
        threads: i32,
    ) -> Option<(LlamaContext<'m>, usize)> {
        let KeptContext {
            mut context,
            prompt: held,
            threads: held_threads,
        } = self;
        if context.n_ctx() < context_size
            || context.n_batch() < batch_size
            || held_threads != threads
        {
            return None;
        }
        // At least the prompt's last token is evaluated again: its logits start the answer.
        let shared = common_prefix(&held, prompt).min(prompt.len().saturating_sub(1));
        let from = u32::try_from(shared).ok()?;
        context.clear_kv_cache_seq(Some(0), Some(from), None).ok()?;
        Some((context, shared))
    }
}

/// How many tokens `a` and `b` open with alike.
pub(crate) fn common_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(ids: &[i32]) -> Vec<LlamaToken> {
        ids.iter().copied().map(LlamaToken).collect()
    }

    #[test]
    fn the_common_prefix_stops_at_the_first_difference() {
        assert_eq!(common_prefix(&tokens(&[1, 2, 3]), &tokens(&[1, 2, 4])), 2);
        assert_eq!(common_prefix(&tokens(&[1, 2]), &tokens(&[1, 2, 3])), 2);
        assert_eq!(common_prefix(&tokens(&[5]), &tokens(&[1])), 0);
        assert_eq!(common_prefix(&[], &tokens(&[1])), 0);
    }
}
