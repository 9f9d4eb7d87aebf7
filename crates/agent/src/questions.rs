//! Questions to a person, as data: a permission for a call, a server's elicitation form, a
//! server's sampling request. Each is an event out with a request id and a wait for the op
//! that answers it; nothing here reads a terminal. [`SessionHost`] is the session's
//! `HostHandler` (what servers may ask of the host) and [`SessionApprover`] its `Approver`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tether_catalog::StandingAnswers;
use tether_llm::Provider;
use tether_mcp::{
    ElicitationAnswer, ElicitationRequest, HostHandler, Root, SamplingPolicy, ServerNotice,
};
use tokio::sync::{mpsc::UnboundedSender, oneshot};

use crate::agent::{ApprovalRequest, Approver};
use crate::events::{AgentEvent, PermissionOption, ToolKind, tool_title};
use crate::sampling::{answer_sampling, describe_sampling};

pub use tether_catalog::PermissionDecision;

/// A person's answer to an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerAction {
    /// Submitted (with the form's values).
    Accept,
    /// Refused.
    Decline,
    /// Dismissed.
    Cancel,
}

/// What answers a pending question.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// For a permission or sampling question.
    Decision(PermissionDecision),
    /// For an elicitation.
    Elicitation(ElicitationAnswer),
}

/// The questions waiting for a person, by request id.
pub struct Questions {
    next: AtomicU64,
    pending: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    events: UnboundedSender<AgentEvent>,
    /// Whether anyone will answer; when not, questions are never asked.
    interactive: AtomicBool,
}

impl Questions {
    /// A table whose questions go out as `events`.
    pub fn new(events: UnboundedSender<AgentEvent>, interactive: bool) -> Arc<Questions> {
        Arc::new(Questions {
            next: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
            events,
            interactive: AtomicBool::new(interactive),
        })
    }

    /// Whether anyone answers questions.
    pub fn interactive(&self) -> bool {
        self.interactive.load(Ordering::Relaxed)
    }

    /// Sends the event `make` builds for a fresh request id and waits for its answer; a
    /// question dropped unanswered (the session ended) counts as cancelled.
    async fn ask(&self, make: impl FnOnce(String) -> AgentEvent) -> Answer {
        let id = format!("q{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        let _ = self.events.send(make(id));
        rx.await
            .unwrap_or(Answer::Decision(PermissionDecision::Cancelled))
    }

    /// Answers question `id`; `Err` names what was wrong.
    pub fn answer(&self, id: &str, answer: Answer) -> Result<(), String> {
        let sender = self.pending.lock().ok().and_then(|mut p| p.remove(id));
        match sender {
            Some(sender) => {
                let _ = sender.send(answer);
                Ok(())
            }
            None => Err(format!(
                "no question \"{id}\" is waiting for an answer (it was answered, withdrawn, or never asked)"
            )),
        }
    }

    /// Withdraws every pending question, each answered as cancelled.
    pub fn cancel_all(&self) {
        let drained: Vec<_> = self
            .pending
            .lock()
            .map(|mut p| p.drain().collect())
            .unwrap_or_default();
        for (_, sender) in drained {
            let _ = sender.send(Answer::Decision(PermissionDecision::Cancelled));
        }
    }

    /// How many questions wait.
    pub fn pending(&self) -> usize {
        self.pending.lock().map(|p| p.len()).unwrap_or(0)
    }
}

/// The model a session uses now; `set_model` replaces it between turns.
#[derive(Clone)]
pub struct ModelSlot {
    inner: Arc<RwLock<(String, Arc<dyn Provider>)>>,
}

impl ModelSlot {
    /// A slot holding `provider`, built from `spec`.
    pub fn new(spec: String, provider: Arc<dyn Provider>) -> ModelSlot {
        ModelSlot {
            inner: Arc::new(RwLock::new((spec, provider))),
        }
    }

    /// The provider in use.
    pub fn provider(&self) -> Arc<dyn Provider> {
        // A poisoned lock still holds a whole value: the write is one assignment.
        match self.inner.read() {
            Ok(guard) => guard.1.clone(),
            Err(poisoned) => poisoned.into_inner().1.clone(),
        }
    }

    /// The `provider:model` spec in use.
    pub fn spec(&self) -> String {
        match self.inner.read() {
            Ok(guard) => guard.0.clone(),
            Err(poisoned) => poisoned.into_inner().0.clone(),
        }
    }

    /// Replaces the model.
    pub fn set(&self, spec: String, provider: Arc<dyn Provider>) {
        match self.inner.write() {
            Ok(mut guard) => *guard = (spec, provider),
            Err(poisoned) => *poisoned.into_inner() = (spec, provider),
        }
    }
}

/// MCP's logging levels, least severe first.
pub const LOG_LEVELS: &[&str] = &[
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// The most sampling requests one server may have in flight at once: a server allowed to
/// sample (`"sampling": "allow"`) must not be able to turn the user's model (and bill) into
/// its own by asking a hundred times at once. More are refused until one is answered.
pub const MAX_SAMPLING_IN_FLIGHT: usize = 4;

/// What a session offers servers: its roots, sampling with its model after consent,
/// elicitation as questions, and their notices as events.
pub struct SessionHost {
    questions: Arc<Questions>,
    model: ModelSlot,
    sampling: HashMap<String, SamplingPolicy>,
    /// Sampling requests in flight, by server.
    sampling_in_flight: Arc<Mutex<HashMap<String, usize>>>,
    roots: Mutex<Vec<Root>>,
    log_level: usize,
}

impl SessionHost {
    /// A host asking through `questions`, sampling with `model` under each server's policy.
    pub fn new(
        questions: Arc<Questions>,
        model: ModelSlot,
        sampling: HashMap<String, SamplingPolicy>,
        roots: Vec<Root>,
        log_level: usize,
    ) -> SessionHost {
        SessionHost {
            questions,
            model,
            sampling,
            sampling_in_flight: Arc::default(),
            roots: Mutex::new(roots),
            log_level,
        }
    }

    /// Replaces the roots offered to servers.
    pub fn set_roots(&self, roots: Vec<Root>) {
        if let Ok(mut current) = self.roots.lock() {
            *current = roots;
        }
    }

    fn notice(&self, message: String) {
        let _ = self.questions.events.send(AgentEvent::Notice { message });
    }

    /// A place for one more sampling request of `server`, or why there is none.
    fn sampling_slot(&self, server: &str) -> Result<SamplingSlot, String> {
        let mut in_flight = self
            .sampling_in_flight
            .lock()
            .map_err(|_| "sampling is unavailable".to_string())?;
        let count = in_flight.entry(server.to_string()).or_default();
        if *count >= MAX_SAMPLING_IN_FLIGHT {
            return Err(format!(
                "sampling request from server \"{server}\" refused: it already has {MAX_SAMPLING_IN_FLIGHT} in flight, the most one server may have; ask again when one is answered"
            ));
        }
        *count += 1;
        Ok(SamplingSlot {
            server: server.to_string(),
            in_flight: self.sampling_in_flight.clone(),
        })
    }

    async fn sample_with_consent(&self, server: &str, params: Value) -> Result<Value, String> {
        let _slot = self.sampling_slot(server)?;
        let policy = self.sampling.get(server).copied().unwrap_or_default();
        let provider = self.model.provider();
        match policy {
            SamplingPolicy::Deny => {
                return Err(format!(
                    "sampling is denied for server \"{server}\" by its \"sampling\": \"deny\" setting"
                ));
            }
            SamplingPolicy::Ask if !self.questions.interactive() => {
                return Err(format!(
                    "sampling request from server \"{server}\" refused: nobody to ask in a non-interactive run; set \"sampling\": \"allow\" for this server to permit it"
                ));
            }
            SamplingPolicy::Ask => {
                let summary = format!(
                    "server \"{server}\" asks to use the model ({}):\n{}",
                    provider.name(),
                    describe_sampling(&params)
                );
                if !self.consents(server, summary).await {
                    return Err("the user declined the sampling request".into());
                }
            }
            SamplingPolicy::Allow => {}
        }
        self.notice(format!(
            "server \"{server}\" is sampling {}",
            provider.name()
        ));
        let answer = answer_sampling(provider.as_ref(), &params).await?;
        if policy == SamplingPolicy::Ask {
            // The person who allowed the request also sees what goes back to the server.
            let draft = describe_sampling(&serde_json::json!({"messages": [answer.clone()]}));
            let summary =
                format!("draft answer for \"{server}\":\n{draft}\nsend it to the server?");
            if !self.consents(server, summary).await {
                return Err("the user withheld the sampled answer".into());
            }
        }
        Ok(answer)
    }

    /// Asks a person a sampling question about `server`; `true` when they allow it.
    async fn consents(&self, server: &str, summary: String) -> bool {
        let answer = self
            .questions
            .ask(|request_id| AgentEvent::SamplingRequested {
                request_id,
                server: server.to_string(),
                call_id: None,
                summary,
                options: vec![PermissionOption::AllowOnce, PermissionOption::RejectOnce],
            })
            .await;
        matches!(answer, Answer::Decision(d) if d.allows())
    }
}

/// One sampling request counted against its server until dropped.
struct SamplingSlot {
    server: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
}

impl Drop for SamplingSlot {
    fn drop(&mut self) {
        if let Ok(mut in_flight) = self.in_flight.lock()
            && let Some(count) = in_flight.get_mut(&self.server)
        {
            *count = count.saturating_sub(1);
        }
    }
}

impl HostHandler for SessionHost {
    fn roots(&self) -> Vec<Root> {
        self.roots.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn sample<'a>(
        &'a self,
        server: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(async move {
            let outcome = self.sample_with_consent(server, params).await;
            if let Err(reason) = &outcome {
                self.notice(reason.clone());
            }
            outcome
        })
    }

    fn elicit<'a>(
        &'a self,
        server: &'a str,
        request: ElicitationRequest,
    ) -> BoxFuture<'a, ElicitationAnswer> {
        Box::pin(async move {
            if !self.questions.interactive() {
                self.notice(format!(
                    "server \"{server}\" asked for input; declined because nobody can answer in a non-interactive run"
                ));
                return ElicitationAnswer::Decline;
            }
            let (message, schema, url) = match request {
                ElicitationRequest::Form { message, schema } => (message, Some(schema), None),
                ElicitationRequest::Url { message, url, .. } => (message, None, Some(url)),
            };
            let answer = self
                .questions
                .ask(|request_id| AgentEvent::ElicitationRequested {
                    request_id,
                    server: server.to_string(),
                    call_id: None,
                    message,
                    schema,
                    url,
                })
                .await;
            match answer {
                Answer::Elicitation(answer) => answer,
                Answer::Decision(d) if d.allows() => ElicitationAnswer::Accept(Map::new()),
                Answer::Decision(PermissionDecision::Cancelled) => ElicitationAnswer::Cancel,
                Answer::Decision(_) => ElicitationAnswer::Decline,
            }
        })
    }

    fn log_level(&self) -> Option<String> {
        LOG_LEVELS.get(self.log_level).map(|l| l.to_string())
    }

    fn notify(&self, server: &str, notice: ServerNotice) {
        if let Some(event) = notice_event(server, notice, self.log_level) {
            let _ = self.questions.events.send(event);
        }
    }
}

/// The session's approver: asks through [`Questions`] and keeps "always" answers for the
/// session, per tool.
pub struct SessionApprover {
    questions: Arc<Questions>,
    standing: StandingAnswers,
}

impl SessionApprover {
    /// An approver asking through `questions`.
    pub fn new(questions: Arc<Questions>) -> SessionApprover {
        SessionApprover {
            questions,
            standing: StandingAnswers::default(),
        }
    }
}

impl Approver for SessionApprover {
    fn interactive(&self) -> bool {
        self.questions.interactive()
    }

    fn approve<'a>(&'a self, request: &'a ApprovalRequest) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            let name = &request.tool.qualified_name;
            if let Some(standing) = self.standing.lookup(name) {
                return standing;
            }
            let answer = self
                .questions
                .ask(|request_id| AgentEvent::PermissionRequested {
                    request_id,
                    call_id: request.id.clone(),
                    name: name.clone(),
                    title: tool_title(&request.tool),
                    kind: ToolKind::of(&request.tool),
                    arguments: request.arguments.clone(),
                    options: PermissionOption::ALL.to_vec(),
                })
                .await;
            let decision = match answer {
                Answer::Decision(decision) => decision,
                Answer::Elicitation(ElicitationAnswer::Accept(_)) => PermissionDecision::AllowOnce,
                Answer::Elicitation(_) => PermissionDecision::RejectOnce,
            };
            self.standing.remember(name, decision);
            decision.allows()
        })
    }
}

/// The wire form of an elicitation answer op's `content` for an action.
pub fn elicitation_answer(action: AnswerAction, content: Map<String, Value>) -> ElicitationAnswer {
    match action {
        AnswerAction::Accept => ElicitationAnswer::Accept(content),
        AnswerAction::Decline => ElicitationAnswer::Decline,
        AnswerAction::Cancel => ElicitationAnswer::Cancel,
    }
}

/// The event a server's notification becomes for a person: a notice (a log line at
/// `log_level` or above, a changed resource, a server that joined late or failed to) or a
/// restart; `None` for what is not shown (a list change, which the loop handles itself, or a
/// log line below the level).
pub fn notice_event(server: &str, notice: ServerNotice, log_level: usize) -> Option<AgentEvent> {
    let message = match notice {
        ServerNotice::Log {
            level,
            logger,
            data,
        } => {
            let rank = LOG_LEVELS.iter().position(|l| *l == level).unwrap_or(1);
            if rank < log_level {
                return None;
            }
            let text = match data {
                Value::String(text) => text,
                other => other.to_string(),
            };
            let logger = logger.map(|l| format!(" {l}")).unwrap_or_default();
            format!("[{server}{logger}] {level}: {text}")
        }
        ServerNotice::ListChanged { what } => {
            tracing::info!(server, "{what} changed");
            return None;
        }
        ServerNotice::ResourceUpdated { uri } => {
            format!("server \"{server}\": resource {uri} updated")
        }
        ServerNotice::JoinedLate {
            elapsed,
            error: None,
        } => format!(
            "server \"{server}\" is ready after {:.1} s; its tools are offered from the next model request",
            elapsed.as_secs_f64()
        ),
        ServerNotice::JoinedLate {
            error: Some(error), ..
        } => error,
        ServerNotice::Restarted { restarts, reason } => {
            return Some(AgentEvent::ServerRestarted {
                server: server.to_string(),
                restarts,
                reason,
            });
        }
    };
    Some(AgentEvent::Notice { message })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tether_llm::{ChatRequest, EventStream, LlmError};

    /// A model that holds every request until `release` has a permit for it, counting them.
    struct HeldModel {
        entered: Arc<AtomicUsize>,
        release: Arc<tokio::sync::Semaphore>,
    }

    impl Provider for HeldModel {
        fn name(&self) -> &str {
            "held"
        }

        fn stream<'a>(
            &'a self,
            _request: &'a ChatRequest,
        ) -> BoxFuture<'a, Result<EventStream, LlmError>> {
            Box::pin(async move {
                self.entered.fetch_add(1, Ordering::SeqCst);
                let _ = self.release.acquire().await;
                Err(LlmError::Config("released".into()))
            })
        }
    }

    /// A server allowed to sample gets at most MAX_SAMPLING_IN_FLIGHT requests to the model at
    /// once; the rest are refused at once, in words, and a finished one makes room.
    #[tokio::test]
    async fn a_server_may_have_only_so_many_sampling_requests_in_flight() {
        let entered = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(tokio::sync::Semaphore::new(0));
        let model = HeldModel {
            entered: entered.clone(),
            release: release.clone(),
        };
        let (events, _receiver) = tokio::sync::mpsc::unbounded_channel();
        let host = Arc::new(SessionHost::new(
            Questions::new(events, false),
            ModelSlot::new("held".into(), Arc::new(model)),
            HashMap::from([("greedy".to_string(), SamplingPolicy::Allow)]),
            Vec::new(),
            0,
        ));
        let params = serde_json::json!({"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5});
        let asks: Vec<_> = (0..MAX_SAMPLING_IN_FLIGHT + 2)
            .map(|_| {
                let host = host.clone();
                let params = params.clone();
                tokio::spawn(async move { host.sample("greedy", params).await })
            })
            .collect();
        while entered.load(Ordering::SeqCst) < MAX_SAMPLING_IN_FLIGHT {
            tokio::task::yield_now().await;
        }
        // Four are at the model; the two past the cap were answered without it.
        release.add_permits(MAX_SAMPLING_IN_FLIGHT + 2);
        let mut outcomes = Vec::new();
        for ask in asks {
            outcomes.push(ask.await.unwrap());
        }
        let over: Vec<&String> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().err())
            .filter(|e| e.contains("already has 4 in flight"))
            .collect();
        assert_eq!(over.len(), 2, "{outcomes:?}");
        assert_eq!(entered.load(Ordering::SeqCst), MAX_SAMPLING_IN_FLIGHT);
        // The slots are free again.
        assert!(host.sampling_slot("greedy").is_ok());
    }
}
