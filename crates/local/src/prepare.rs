//! What one request to the embedded model runs: the prompt rendered with the model's
//! template, whether the answer must be a call (the tool policy for small models), the
//! grammar and drafts of that call, and what the answer will be checked against.

use super::*;

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

    pub(super) fn prepare(&self, request: &ChatRequest) -> Result<Prepared, LlmError> {
        let small = self.engine.model.n_params() < 1_000_000_000;
        if small && failed_call_replaced(&request.messages, &request.tools) {
            // Asked afresh with the tools offered in the failed one's place: after the
            // failed call and its error, the 135M model filled the next call with the
            // error's words ("Green Tea" as the entity, no observation).
            let mut afresh = request.clone();
            let asked = afresh
                .messages
                .iter()
                .rposition(|m| matches!(m, Message::User { .. }))
                .unwrap_or(0);
            afresh.messages.truncate(asked + 1);
            return self.prepare_call(&afresh, true);
        }
        self.prepare_call(request, false)
    }

    /// [`LocalProvider::prepare`], with a call required of a small model when `retry`.
    fn prepare_call(&self, request: &ChatRequest, retry: bool) -> Result<Prepared, LlmError> {
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
        // file search offered because its description says "like"), or a computation none of
        // them does in one call ("2 to the power of 10" was called as a product): no call,
        // and no answer made up either.
        let uncomputed = last_user.is_some_and(|t| asks_to_compute_unserved(t, &request.tools));
        let unserved =
            uncomputed || last_user.is_some_and(|t| asks_to_look_up_unserved(t, &request.tools));
        let last_is_user = !unserved
            && (names_a_file
                || last_user.is_some_and(|text| mentions_a_tool(text, &request.tools)));
        let small = self.engine.model.n_params() < 1_000_000_000;
        let has_tools = !request.tools.is_empty() && request.tool_choice != ToolChoice::None;
        let mode = if !has_tools {
            CallMode::Answer
        } else if request.tool_choice == ToolChoice::Required || (small && (last_is_user || retry))
        {
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
        let rendered = self
            .engine
            .template
            .render_split(messages, tools, Some(&guide), !small)
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
        // The tools a call may be to, narrowed to the values the question allows.
        let call_tools =
            matches!(mode, CallMode::RequiredCall | CallMode::LazyCall).then(|| {
                match (&named_files, mode) {
                    (Some(read), CallMode::RequiredCall) => read.clone(),
                    _ => {
                        let text = last_user.unwrap_or_default();
                        let narrowed = paths::property_tools_only(tools, text);
                        let narrowed = paths::named_directory_tools_only(&narrowed, &known, text);
                        let narrowed = paths::existing_paths_only(&narrowed, &known, text);
                        let narrowed = numbers::written_numbers_only(&narrowed, text);
                        let narrowed = described::described_values_only(&narrowed, text);
                        let narrowed = named::named_things_only(&narrowed, text);
                        let narrowed = revisions::known_revisions_only(&narrowed, &revisions, text);
                        zones::named_zones_only(&narrowed, &zones)
                    }
                }
            });
        let grammar = call_tools.as_deref().map(tool_call_grammar);
        let max_tokens = match mode {
            CallMode::Answer | CallMode::LazyCall => {
                request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)
            }
            CallMode::RequiredCall | CallMode::UnconstrainedCall => MAX_CALL_TOKENS,
        };
        let fallback = (mode == CallMode::Answer)
            .then(|| last_result_sentence(&request.messages))
            .flatten();
        let known = this_turn_text(&request.messages);
        let result = last_result(&request.messages).to_string();
        let named = request
            .messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::User { content } => Some(paths::paths_written_in(content)),
                _ => None,
            })
            .unwrap_or_default();
        let fixed = if no_tool_fits && unserved {
            // Asked for something looked up live with no tool for it, a small model invents it.
            Some(
                if uncomputed {
                    NO_TOOL_COMPUTES
                } else {
                    NO_TOOL_ANSWER
                }
                .to_string(),
            )
        } else if small && is_short_result(&result) {
            // A short result is the answer. Held to the answer guards, the small model can only
            // say it again (it wrote "The add tool returned 30." for 30), and writing that
            // took a third of the README's first command (docs/decisions.md).
            fallback
                .as_deref()
                .map(|f| settle_answer("", f, &known, &result, &named))
        } else {
            None
        };
        let checks = call_tools
            .as_deref()
            .map(|tools| CallChecks::new(tools, last_user))
            .unwrap_or_default();
        Ok(Prepared {
            prompt: rendered.text,
            shared_end: rendered.system_end,
            grammar,
            // Drafts are checked token by token against a required call's grammar; a lazy
            // grammar is not in force until the model opens a call.
            call_tools: call_tools.filter(|_| mode == CallMode::RequiredCall),
            mode,
            max_tokens,
            fallback,
            fixed,
            known,
            result,
            named,
            checks,
        })
    }
}
