//! What `tether acp` offers beside prompts: the slash commands an editor lists
//! (`available_commands_update`, from the [`SlashCommand`] enum the chat uses too) and runs
//! when a prompt is one of them, and the model as a session config option
//! (`session/set_config_option`). Commands that change the session (`/model`, `/clear`,
//! `/compact`, `/system`) are ops; their request is answered when the session's event says
//! how it went.

use serde_json::{Value, json};
use tether_agent::Op;
use tether_protocol::chat::{Message, Usage};

use super::{AcpSession, Agent, acp};
use crate::session::Record;
use crate::slash::{SlashCommand, help_text, servers_text, tools_text, usage_text};

/// The editor's request a session answers later.
pub(super) enum Pending {
    /// A prompt, answered when its turn ends.
    Turn(Value),
    /// A slash command, answered when the session has carried out its op.
    Command(Value),
    /// `session/set_config_option` for the model, answered when the model changed.
    Model(Value),
}

/// What the slash commands show of a session, kept from its events.
pub(super) struct Mirror {
    /// The model spec in use.
    pub(super) model: String,
    /// Tokens so far.
    pub(super) usage: Usage,
    /// Messages in the conversation.
    pub(super) messages: usize,
    /// The system prompt set with `/system`, or the configured one.
    pub(super) system_prompt: Option<String>,
}

impl Mirror {
    /// A mirror of a fresh session on `model`.
    pub(super) fn new(model: String) -> Mirror {
        Mirror {
            model,
            usage: Usage::default(),
            messages: 0,
            system_prompt: None,
        }
    }
}

impl AcpSession {
    /// Takes `pending` as the request the session answers next; `Err` (the answer to send)
    /// while another one waits.
    pub(super) fn wait_for(&self, pending: Pending) -> Result<(), Value> {
        let Ok(mut slot) = self.pending.lock() else {
            return Err(json!({"code": -32603, "message": "the session's state is unreadable"}));
        };
        if slot.is_some() {
            return Err(json!({"code": -32602,
                "message": "a prompt is already running in this session; wait for it or send session/cancel"}));
        }
        *slot = Some(pending);
        Ok(())
    }

    /// The request waiting for the session, taken.
    pub(super) fn take_pending(&self) -> Option<Pending> {
        self.pending.lock().ok().and_then(|mut p| p.take())
    }

    /// Updates the mirror.
    pub(super) fn note(&self, change: impl FnOnce(&mut Mirror)) {
        if let Ok(mut mirror) = self.mirror.lock() {
            change(&mut mirror);
        }
    }

    /// Appends `record` to the session file.
    pub(super) fn save(&self, record: Record) {
        if let Some(log) = &self.log
            && let Ok(mut log) = log.lock()
        {
            let _ = log.append(&record);
        }
    }
}

/// The `available_commands_update` that lists the commands an editor offers.
pub(super) fn available_commands() -> Value {
    let commands: Vec<Value> = SlashCommand::ALL
        .iter()
        .filter(|c| c.in_editor())
        .map(|c| {
            let mut command = json!({"name": c.name(), "description": c.description()});
            if let Some(hint) = c.input() {
                command["input"] = json!({ "hint": hint });
            }
            command
        })
        .collect();
    json!({"sessionUpdate": "available_commands_update", "availableCommands": commands})
}

/// The session's config options: the model, with `current` selected and the embedded model
/// always on offer.
pub(super) fn config_options(current: &str) -> Value {
    let mut choices = vec![current.to_string()];
    if current != "local" {
        choices.push("local".into());
    }
    let options: Vec<Value> = choices
        .iter()
        .map(|spec| json!({"value": spec, "name": spec}))
        .collect();
    json!([{
        "id": "model", "name": "Model", "category": "model",
        "description": "The model that answers (provider:model, or local for the embedded one)",
        "type": "select", "currentValue": current, "options": options,
    }])
}

impl Agent {
    /// Runs a slash command for `session`; `None` when the session's event answers it.
    pub(super) async fn command(
        &self,
        session: &AcpSession,
        command: SlashCommand,
        rest: &str,
        id: Value,
    ) -> Option<Result<Value, Value>> {
        let done = Some(Ok(json!({"stopReason": "end_turn"})));
        let busy = |pending| session.wait_for(pending).err().map(Err);
        let text = match command {
            SlashCommand::Help => help_text(SlashCommand::in_editor),
            SlashCommand::Tools => tools_text(&session.catalog, session.selection.as_ref(), rest),
            SlashCommand::Servers => servers_text(&*session.registry.read().await),
            SlashCommand::Usage => {
                let (usage, messages) = session
                    .mirror
                    .lock()
                    .map(|m| (m.usage, m.messages))
                    .unwrap_or_default();
                usage_text(usage, messages)
            }
            SlashCommand::Model if rest.is_empty() => {
                let model = session.mirror.lock().map(|m| m.model.clone());
                format!("model: {}", model.unwrap_or_default())
            }
            SlashCommand::System if rest.is_empty() => session
                .mirror
                .lock()
                .ok()
                .and_then(|m| m.system_prompt.clone())
                .unwrap_or_else(|| "(none)".into()),
            SlashCommand::System => {
                let text = Some(rest.to_string());
                session.note(|m| m.system_prompt = text.clone());
                let _ = session.ops.send(Op::SetSystemPrompt { text });
                "system prompt set".into()
            }
            SlashCommand::Model | SlashCommand::Clear | SlashCommand::Compact => {
                if let Some(refused) = busy(Pending::Command(id)) {
                    return Some(refused);
                }
                let _ = session.ops.send(match command {
                    SlashCommand::Model => Op::SetModel {
                        model: rest.to_string(),
                    },
                    SlashCommand::Clear => Op::Clear,
                    _ => Op::Compact,
                });
                return None;
            }
            other => format!("/{} is not offered in editors", other.name()),
        };
        self.say(&session.id, text.trim_end());
        done
    }

    /// `session/set_config_option`: the model is the one option.
    pub(super) fn set_config_option(
        &self,
        request: acp::SetSessionConfigOptionRequest,
        id: Value,
    ) -> Option<Result<Value, Value>> {
        let session = match self.session(&request.session_id.0) {
            Ok(session) => session,
            Err(error) => return Some(Err(error)),
        };
        if request.config_id.0.as_ref() != "model" {
            return Some(Err(json!({"code": -32602,
                "message": format!("config option \"{}\" is not one of tether's (model)", request.config_id.0)})));
        }
        let model = match serde_json::to_value(&request.value) {
            Ok(Value::Object(value)) => value
                .get("value")
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        };
        let Some(model) = model else {
            return Some(Err(json!({"code": -32602,
                "message": "the model option takes a value such as \"openai:gpt-4o\" or \"local\""})));
        };
        if let Err(busy) = session.wait_for(Pending::Model(id)) {
            return Some(Err(busy));
        }
        let _ = session.ops.send(Op::SetModel { model });
        None
    }

    /// The session switched models: the waiting request is answered and the editor's option
    /// shows the new one.
    pub(super) fn model_changed(&self, session: &AcpSession, model: String) {
        session.note(|m| m.model = model.clone());
        session.save(Record::Model {
            model: model.clone(),
        });
        match session.take_pending() {
            Some(Pending::Model(id)) => {
                self.reply(id, Ok(json!({"configOptions": config_options(&model)})));
            }
            Some(Pending::Command(id)) => {
                self.update(
                    &session.id,
                    json!({"sessionUpdate": "config_option_update", "configOptions": config_options(&model)}),
                );
                self.say(&session.id, &format!("model: {model}"));
                self.reply(id, Ok(json!({"stopReason": "end_turn"})));
            }
            Some(Pending::Turn(id)) => self.put_back(session, Pending::Turn(id)),
            None => {}
        }
    }

    /// `/clear` or `/compact` done: the file starts over with the new conversation.
    pub(super) fn conversation_replaced(
        &self,
        session: &AcpSession,
        messages: Vec<Message>,
        note: String,
    ) {
        session.note(|m| m.messages = messages.len());
        session.save(Record::Clear);
        for message in messages {
            session.save(Record::Message { message });
        }
        match session.take_pending() {
            Some(Pending::Command(id)) => {
                self.say(&session.id, &note);
                self.reply(id, Ok(json!({"stopReason": "end_turn"})));
            }
            Some(other) => self.put_back(session, other),
            None => {}
        }
    }

    /// An op the session refused: the command or option change waiting on it learns why.
    /// Anything else refused is an answer to a question already withdrawn (the editor
    /// answers "cancelled" after its own session/cancel, as the protocol asks): nothing for
    /// the person to read.
    pub(super) fn rejected(&self, session: &AcpSession, message: String) {
        match session.take_pending() {
            Some(Pending::Command(id)) => {
                self.say(&session.id, &format!("tether: {message}"));
                self.reply(id, Ok(json!({"stopReason": "end_turn"})));
            }
            Some(Pending::Model(id)) => {
                self.reply(id, Err(json!({"code": -32602, "message": message})));
            }
            Some(Pending::Turn(id)) => {
                tracing::debug!("acp: {message}");
                self.put_back(session, Pending::Turn(id));
            }
            None => tracing::debug!("acp: {message}"),
        }
    }

    fn put_back(&self, session: &AcpSession, pending: Pending) {
        if let Ok(mut slot) = session.pending.lock() {
            *slot = Some(pending);
        }
    }
}
