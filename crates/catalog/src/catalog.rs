//! The live snapshot of every server's tools. A [`ToolCatalog`] is a cheap handle (clones
//! share one snapshot), so the chat, each of its turns and the gateway all see the same tools:
//! when a server announces `tools/list_changed`, [`ToolCatalog::refresh`] re-lists that server
//! alone and swaps in a new [`Snapshot`], and every holder sees it on its next request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use futures::future::join_all;
use serde_json::Value;
use tether_mcp::{McpError, ServerRegistry, ToolRouter};
use tether_protocol::chat::ToolDefinition;
use tether_protocol::{QualifiedTool, Tool};

use crate::intent;
use crate::pins::{PinBook, PinReport};
use crate::routing::Routing;
use crate::search::{Hit, Ranking, SearchIndex};
use crate::semantic::{SemanticRanker, ToolVectors};
use crate::shortlist::{self, SHORTLIST_ABOVE, Sketches};

/// One server's tools as last listed.
#[derive(Debug, Clone)]
pub struct ServerTools {
    /// The server's name.
    pub server: String,
    /// Its tools, as the server listed them (after the config's filters).
    pub tools: Vec<Tool>,
    /// `"alwaysLoad"`: offered in every mode.
    pub always_load: bool,
}

/// What a snapshot's semantic ranking makes on its first search and keeps.
#[derive(Debug, Default)]
struct MadeOnSearch {
    /// Every tool's vector, with the routing facts worked out from them.
    vectors: OnceLock<(ToolVectors, Routing)>,
    /// Or, for a catalogue over [`SHORTLIST_ABOVE`] tools, every tool's sketch (`None`
    /// inside: the encoder makes none).
    sketches: OnceLock<Option<Sketches>>,
}

/// An immutable view of every tool: qualified names, definitions as a model sees them, and
/// the search index over them.
#[derive(Debug)]
pub struct Snapshot {
    servers: Vec<ServerTools>,
    router: ToolRouter,
    definitions: Vec<ToolDefinition>,
    always_load: Vec<bool>,
    /// Whether any tool is meant only for an app's own view ([`Tool::for_model`]).
    app_only: bool,
    index: SearchIndex,
    /// Semantic ranking, when the catalogue has an encoder, and the tool vectors it made on
    /// the first search that needed them, with the routing facts worked out from them.
    semantic: Option<(SemanticRanker, MadeOnSearch)>,
}

impl Snapshot {
    /// Builds the snapshot (names, definitions, index) from each server's tools.
    pub fn new(servers: Vec<ServerTools>) -> Snapshot {
        Snapshot::with_ranking(servers, Ranking::default())
    }

    /// As [`Snapshot::new`], ranking searches with `ranking` (benchmarks compare rankings).
    pub fn with_ranking(servers: Vec<ServerTools>, ranking: Ranking) -> Snapshot {
        let router = ToolRouter::new(servers.iter().map(|s| (s.server.as_str(), s.tools.clone())));
        let always: HashMap<&str, bool> = servers
            .iter()
            .map(|s| (s.server.as_str(), s.always_load))
            .collect();
        let always_load = router
            .tools()
            .iter()
            .map(|t| always.get(t.server.as_str()).copied().unwrap_or(false))
            .collect();
        let definitions = router.tools().iter().map(definition).collect();
        let index = SearchIndex::build(router.tools(), ranking);
        let app_only = router.tools().iter().any(|t| !t.tool.for_model());
        Snapshot {
            servers,
            router,
            definitions,
            always_load,
            app_only,
            index,
            semantic: None,
        }
    }

    /// This snapshot without the tools no model may be offered ([`Tool::for_model`]); the
    /// same snapshot when it has none.
    pub fn for_model(self) -> Snapshot {
        if !self.app_only {
            return self;
        }
        let servers = self
            .servers
            .iter()
            .map(|s| ServerTools {
                tools: s.tools.iter().filter(|t| t.for_model()).cloned().collect(),
                ..s.clone()
            })
            .collect();
        Snapshot::new(servers)
    }

    /// Whether any tool is meant only for an app's own view ([`Tool::for_model`]).
    pub fn has_app_only_tools(&self) -> bool {
        self.app_only
    }

    /// This snapshot with semantic ranking beside BM25 (tool vectors made on first search).
    pub fn with_semantic(mut self, ranker: Option<SemanticRanker>) -> Snapshot {
        self.semantic = ranker.map(|r| (r, MadeOnSearch::default()));
        self
    }

    /// Whether searches rank by meaning too.
    pub fn is_semantic(&self) -> bool {
        self.semantic.is_some()
    }

    /// Every tool, in server then tool order.
    pub fn tools(&self) -> &[QualifiedTool] {
        self.router.tools()
    }

    /// Each server's tools as listed.
    pub fn servers(&self) -> &[ServerTools] {
        &self.servers
    }

    /// The definition of every tool, in [`Snapshot::tools`] order.
    pub fn definitions(&self) -> &[ToolDefinition] {
        &self.definitions
    }

    /// Whether the tool at `index` belongs to an `"alwaysLoad"` server.
    pub fn always_loaded(&self, index: usize) -> bool {
        self.always_load.get(index).copied().unwrap_or(false)
    }

    /// The definitions of the `"alwaysLoad"` servers' tools, in snapshot order.
    pub fn always_loaded_definitions(&self) -> Vec<ToolDefinition> {
        self.definitions
            .iter()
            .zip(&self.always_load)
            .filter(|(_, always)| **always)
            .map(|(definition, _)| definition.clone())
            .collect()
    }

    /// Position of a tool by qualified name.
    pub fn position(&self, qualified_name: &str) -> Option<usize> {
        let tool = self.router.resolve(qualified_name)?;
        self.tools()
            .iter()
            .position(|t| t.qualified_name == tool.qualified_name)
    }

    /// The tool a qualified name stands for.
    pub fn resolve(&self, qualified_name: &str) -> Option<&QualifiedTool> {
        self.router.resolve(qualified_name)
    }

    /// Finds `tool` on `server` by its own name.
    pub fn find(&self, server: &str, tool: &str) -> Option<&QualifiedTool> {
        self.tools()
            .iter()
            .find(|t| t.server == server && t.tool.name == tool)
    }

    /// Every qualified name, for suggestions.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.router.names()
    }

    /// The best `limit` tools for `query` (a plain query, a tool's name, or `select:A,B`).
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        self.ranked(query, limit).0
    }

    /// The best `limit` tools for `query` whose score is within `margin` of the best one's,
    /// when the ranking fused words and meaning (its scores are then on one scale, standard
    /// deviations above the catalogue's mean); BM25's scores alone are not, and its best
    /// `limit` are returned. A query that names a tool exactly gets that tool alone. Before
    /// the margin, tools whose servers mark them as going against what the query asks (a
    /// question, a change) give way to those marked as fitting it (`intent`).
    pub fn search_close(&self, query: &str, limit: usize, margin: f64) -> Vec<Hit> {
        self.search_close_and_rest(query, limit, margin).0
    }

    /// [`Snapshot::search_close`], and the rest of the first `limit` the margin left out (the
    /// runners-up a small model is offered after a failed call), from one ranking.
    pub fn search_close_and_rest(
        &self,
        query: &str,
        limit: usize,
        margin: f64,
    ) -> (Vec<Hit>, Vec<Hit>) {
        // Three times the tools are ranked, so that those fitting the intent can come up
        // from below the first `limit`.
        let (mut hits, fused) = self.ranked(query, limit.saturating_mul(3));
        if !hits.first().is_some_and(|h| h.exact) {
            hits = intent::fitting(hits, self.tools(), intent::intent_of(query));
        }
        hits.truncate(limit);
        match hits.first().map(|h| (h.score, h.exact)) {
            // A tool named exactly is offered alone, with no runners-up.
            Some((_, true)) => (hits.into_iter().filter(|h| h.exact).collect(), Vec::new()),
            Some((best, false)) if fused => {
                hits.into_iter().partition(|h| h.score >= best - margin)
            }
            _ => (hits, Vec::new()),
        }
    }

    /// The ranking, and whether it fused words and meaning.
    fn ranked(&self, query: &str, limit: usize) -> (Vec<Hit>, bool) {
        match &self.semantic {
            Some((ranker, MadeOnSearch { vectors, sketches }))
                if !query.trim().starts_with("select:") =>
            {
                if self.tools().len() > SHORTLIST_ABOVE
                    && let Some(sketches) = sketches
                        .get_or_init(|| Sketches::new(ranker, self.tools()))
                        .as_ref()
                {
                    let lexical = self.index.lexical(query, usize::MAX);
                    return (
                        shortlist::rank(ranker, sketches, self.tools(), query, lexical, limit),
                        true,
                    );
                }
                // Until every tool has its vector (within the ranker's budget), by words alone.
                let (vectors, routing) = match vectors.get() {
                    Some(made) => made,
                    None => match ranker.tool_vectors_within(self.tools()) {
                        Some(made) => vectors.get_or_init(|| {
                            let routing = Routing::new(self.tools(), &made);
                            (made, routing)
                        }),
                        None => return (self.index.search(query, limit), false),
                    },
                };
                let lexical = self.index.lexical(query, usize::MAX);
                (
                    ranker.fuse(query, lexical, vectors, routing, limit),
                    !vectors.is_empty(),
                )
            }
            _ => (self.index.search(query, limit), false),
        }
    }

    /// `select:` names that match no tool (for a helpful error).
    pub fn unknown_selections(&self, names: &str) -> Vec<String> {
        self.index.select(names).1
    }
}

/// A tool as offered to a model: qualified name, title and description, schema.
pub fn definition(tool: &QualifiedTool) -> ToolDefinition {
    let mut description = tool.tool.description.clone().unwrap_or_default();
    if let Some(title) = tool
        .tool
        .title
        .as_ref()
        .filter(|title| !description.contains(title.as_str()))
    {
        description = if description.is_empty() {
            title.clone()
        } else {
            format!("{title}: {description}")
        };
    }
    ToolDefinition {
        name: tool.qualified_name.clone(),
        description,
        parameters: tool.tool.input_schema.clone(),
    }
}

/// The first sentence (or line) of a description, at most `max` characters.
pub fn one_line(description: &str, max: usize) -> String {
    let first = description
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let sentence = match first.find(". ") {
        Some(end) => &first[..=end],
        None => first,
    };
    if sentence.chars().count() <= max {
        sentence.trim().to_string()
    } else {
        let cut: String = sentence.chars().take(max.saturating_sub(1)).collect();
        format!("{}…", cut.trim_end())
    }
}

/// Estimated tokens of tool definitions as a provider receives them (four characters a
/// token, the rule the context manager uses too).
pub fn estimate_tokens(definitions: &[ToolDefinition]) -> usize {
    definitions
        .iter()
        .map(|d| {
            (d.name.chars().count()
                + d.description.chars().count()
                + d.parameters.to_string().len())
            .div_ceil(4)
                + 8
        })
        .sum()
}

/// The schema violations of `arguments`, joined, or `None` when they are valid (or the
/// schema itself cannot be compiled, in which case the server is left to judge).
pub fn schema_problems(schema: &Value, arguments: &Value) -> Option<String> {
    let validator = jsonschema::validator_for(schema).ok()?;
    let problems: Vec<String> = validator
        .iter_errors(arguments)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("{path}: {e}")
            }
        })
        .collect();
    (!problems.is_empty()).then(|| problems.join("; "))
}

/// A shared handle on the current [`Snapshot`].
#[derive(Debug, Clone)]
pub struct ToolCatalog {
    current: Arc<RwLock<Arc<Snapshot>>>,
    /// Semantic ranking for every snapshot from now on, once [`rank_semantically`](Self::rank_semantically) set it.
    semantic: Arc<RwLock<Option<SemanticRanker>>>,
    /// The pin book, once [`pin`](Self::pin) turned pinning on.
    pinning: Arc<Mutex<Option<Pinning>>>,
    /// Whether snapshots leave out the tools meant only for an app's own view (set by a
    /// model-facing front end, see [`hide_app_only_tools`](Self::hide_app_only_tools)).
    model_view: Arc<std::sync::atomic::AtomicBool>,
}

/// Pinning state shared by every handle.
#[derive(Debug)]
struct Pinning {
    book: PinBook,
    /// (server, tool) → what changed since the pin, for tools that still differ.
    changed: HashMap<(String, String), String>,
    /// (server, tool) → the tool as pinned, offered in place of its changed form.
    pinned_forms: HashMap<(String, String), Tool>,
    /// Servers whose instructions changed since they were pinned: withheld from the model.
    instructions_withheld: std::collections::HashSet<String>,
    /// Reports of refreshes not yet taken by a front end.
    pending: Vec<PinReport>,
}

impl Pinning {
    /// Checks one server's tools and instructions, remembers what changed and saves the book
    /// if the check altered it (a run that finds everything as pinned writes nothing).
    fn check(
        &mut self,
        server: &str,
        endpoint: &str,
        tools: &[Tool],
        instructions: Option<&str>,
    ) -> PinReport {
        let mut report = self.book.check(server, endpoint, tools, instructions);
        self.changed.retain(|(s, _), _| s != server);
        self.pinned_forms.retain(|(s, _), _| s != server);
        for (tool, diff) in &report.changed {
            let key = (server.to_string(), tool.clone());
            self.changed.insert(key.clone(), diff.join("; "));
            if let Some(pinned) = self.book.pinned_tool(server, tool) {
                self.pinned_forms.insert(key, pinned);
            }
        }
        if report.instructions_changed.is_some() {
            self.instructions_withheld.insert(server.to_string());
        } else {
            self.instructions_withheld.remove(server);
        }
        // A pin file that cannot be written does not stop the run: the changes are still
        // enforced now, and the next run reports them again.
        if report.altered
            && let Err(error) = self.book.save()
        {
            report.save_error = Some(error.to_string());
        }
        report
    }

    /// `servers` with each changed tool in its pinned form.
    fn pinned_view(&self, servers: &mut [ServerTools]) {
        for server in servers {
            for tool in &mut server.tools {
                if let Some(pinned) = self
                    .pinned_forms
                    .get(&(server.server.clone(), tool.name.clone()))
                {
                    *tool = pinned.clone();
                }
            }
        }
    }
}

/// What a refresh changed.
#[derive(Debug, Default)]
pub struct Refresh {
    /// Servers whose tools differ from what the snapshot had (removed servers included).
    pub servers: Vec<String>,
    /// Servers whose listing failed (their previous tools are kept).
    pub errors: Vec<McpError>,
}

impl ToolCatalog {
    /// A catalogue over fixed tool lists (tests, benchmarks, `tools --search` offline).
    pub fn from_servers(servers: Vec<ServerTools>) -> ToolCatalog {
        ToolCatalog {
            current: Arc::new(RwLock::new(Arc::new(Snapshot::new(servers)))),
            semantic: Arc::default(),
            pinning: Arc::default(),
            model_view: Arc::default(),
        }
    }

    /// From now on, leaves out the tools no model may be offered (MCP Apps tools whose
    /// `_meta.ui.visibility` does not name the model): a catalogue the agent offers a model
    /// from. The gateway keeps them, for clients that run the apps.
    pub fn hide_app_only_tools(&self) {
        self.model_view
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.replace(Snapshot::new(self.snapshot().servers().to_vec()));
    }

    /// Ranks searches by meaning too, with `ranker`, in this snapshot and every later one.
    pub fn rank_semantically(&self, ranker: SemanticRanker) {
        if let Ok(mut slot) = self.semantic.write() {
            *slot = Some(ranker);
        }
        self.replace(Snapshot::new(self.snapshot().servers().to_vec()));
    }

    /// Turns pinning on: checks every server's current tools against `book` (pinning servers
    /// seen for the first time), saves it, and from now on checks each refresh too. Returns
    /// what differs from the pins.
    pub fn pin(&self, registry: &ServerRegistry, book: PinBook) -> Vec<PinReport> {
        let mut pinning = Pinning {
            book,
            changed: HashMap::new(),
            pinned_forms: HashMap::new(),
            instructions_withheld: Default::default(),
            pending: Vec::new(),
        };
        let snapshot = self.snapshot();
        let reports = snapshot
            .servers()
            .iter()
            .filter_map(|server| {
                let connection = registry.connection(&server.server).ok()?;
                Some(pinning.check(
                    &server.server,
                    &connection.config().endpoint(),
                    &server.tools,
                    connection.summary().instructions.as_deref(),
                ))
            })
            .collect();
        // The snapshot (and its index) is rebuilt only when a changed tool must be offered in
        // its pinned form: most starts find every tool as pinned.
        let rebuilt = (!pinning.pinned_forms.is_empty()).then(|| {
            let mut servers = snapshot.servers().to_vec();
            pinning.pinned_view(&mut servers);
            Snapshot::new(servers)
        });
        if let Ok(mut slot) = self.pinning.lock() {
            *slot = Some(pinning);
        }
        if let Some(snapshot) = rebuilt {
            self.replace(snapshot);
        }
        reports
    }

    /// The server of the tool called `qualified_name` and what changed in the tool since it was
    /// pinned, while the change is not accepted: such a tool needs approval before every call.
    pub fn pin_change(&self, qualified_name: &str) -> Option<(String, String)> {
        let snapshot = self.snapshot();
        let tool = snapshot
            .tools()
            .iter()
            .find(|t| t.qualified_name == qualified_name)?;
        let pinning = self.pinning.lock().ok()?;
        pinning
            .as_ref()?
            .changed
            .get(&(tool.server.clone(), tool.tool.name.clone()))
            .map(|change| (tool.server.clone(), change.clone()))
    }

    /// Whether `server`'s instructions changed since they were pinned and are withheld from
    /// the model until accepted.
    pub fn instructions_withheld(&self, server: &str) -> bool {
        self.pinning
            .lock()
            .ok()
            .and_then(|p| p.as_ref().map(|p| p.instructions_withheld.contains(server)))
            .unwrap_or(false)
    }

    /// Pin reports from refreshes since the last call, for the front end to show.
    pub fn take_pin_reports(&self) -> Vec<PinReport> {
        self.pinning
            .lock()
            .ok()
            .and_then(|mut p| p.as_mut().map(|p| std::mem::take(&mut p.pending)))
            .unwrap_or_default()
    }

    /// Lists every connected server's tools concurrently. Servers whose listing fails are
    /// left out and reported.
    pub async fn load(registry: &ServerRegistry) -> (ToolCatalog, Vec<McpError>) {
        let listings = join_all(registry.connections().map(|c| async move {
            (
                c.name().to_string(),
                c.config().always_load,
                c.list_tools().await,
            )
        }))
        .await;
        let mut errors = Vec::new();
        let mut servers = Vec::new();
        for (server, always_load, listing) in listings {
            match listing {
                Ok(tools) => servers.push(ServerTools {
                    server,
                    tools,
                    always_load,
                }),
                Err(error) => errors.push(error),
            }
        }
        (ToolCatalog::from_servers(servers), errors)
    }

    /// The current snapshot; holders keep it for a whole model request.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            // A writer panicked mid-swap; the Arc inside is still a whole snapshot.
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-lists the servers that announced `tools/list_changed` since their last listing, and
    /// lists those that joined late (`ServerRegistry::take_joined`), and swaps in a new
    /// snapshot; returns `None` when nothing changed.
    pub async fn refresh(&self, registry: &ServerRegistry) -> Option<Refresh> {
        let joined = registry.take_joined();
        let changed: Vec<_> = registry
            .connections()
            .filter(|c| c.tools_changed() || joined.iter().any(|name| name == c.name()))
            .collect();
        // Servers taken out of the registry (`ServerRegistry::remove`) take their tools along.
        let removed: Vec<String> = self
            .snapshot()
            .servers()
            .iter()
            .map(|s| s.server.clone())
            .filter(|server| registry.entries().iter().all(|e| e.name() != server))
            .collect();
        if changed.is_empty() && removed.is_empty() {
            return None;
        }
        let listings = join_all(changed.iter().map(|c| async move {
            (
                c.name().to_string(),
                c.config().always_load,
                c.list_tools().await,
            )
        }))
        .await;
        let mut servers = self.snapshot().servers().to_vec();
        let mut refresh = Refresh::default();
        servers.retain(|s| !removed.contains(&s.server));
        refresh.servers.extend(removed);
        for (server, always_load, listing) in listings {
            match listing {
                Ok(tools) => {
                    let entry = ServerTools {
                        server: server.clone(),
                        tools,
                        always_load,
                    };
                    match servers.iter_mut().find(|s| s.server == server) {
                        // A restarted server re-lists the same tools: nothing to rebuild or tell.
                        Some(slot) if slot.tools == entry.tools => continue,
                        Some(slot) => *slot = entry,
                        None => servers.push(entry),
                    }
                    refresh.servers.push(server);
                }
                Err(error) => refresh.errors.push(error),
            }
        }
        if refresh.servers.is_empty() {
            return Some(refresh);
        }
        if let Ok(mut pinning) = self.pinning.lock()
            && let Some(pinning) = pinning.as_mut()
        {
            for name in &refresh.servers {
                // A removed server has no tools left to check (the `else` below).
                let (Some(tools), Ok(connection)) = (
                    servers.iter().find(|s| &s.server == name),
                    registry.connection(name),
                ) else {
                    continue;
                };
                let report = pinning.check(
                    name,
                    &connection.config().endpoint(),
                    &tools.tools,
                    connection.summary().instructions.as_deref(),
                );
                pinning.pending.push(report);
            }
            pinning.pinned_view(&mut servers);
        }
        // Keep config order whatever order the listings finished in.
        let order: Vec<&str> = registry.entries().iter().map(|e| e.name()).collect();
        servers.sort_by_key(|s| order.iter().position(|n| *n == s.server));
        self.replace(Snapshot::new(servers));
        Some(refresh)
    }

    /// Which of `starting` (servers still starting) would offer a tool among the best
    /// `within` for `query`, judged by the tools each listed when it was pinned: the servers
    /// worth waiting for before the tools are chosen for a request. Each is named with its
    /// best such tool. Nothing without pinning, or for a server never pinned.
    pub fn late_servers_fitting(
        &self,
        starting: &[String],
        query: &str,
        within: usize,
    ) -> Vec<(String, String)> {
        let expected: Vec<ServerTools> = {
            let Ok(pinning) = self.pinning.lock() else {
                return Vec::new();
            };
            let Some(pinning) = pinning.as_ref() else {
                return Vec::new();
            };
            starting
                .iter()
                .filter_map(|server| {
                    let pins = pinning.book.servers().get(server)?;
                    let tools: Vec<Tool> = pins
                        .tools
                        .keys()
                        .filter_map(|name| pinning.book.pinned_tool(server, name))
                        .collect();
                    (!tools.is_empty()).then(|| ServerTools {
                        server: server.clone(),
                        tools,
                        always_load: false,
                    })
                })
                .collect()
        };
        if expected.is_empty() {
            return Vec::new();
        }
        let mut servers = self.snapshot().servers().to_vec();
        servers.extend(expected);
        let ranker = self.semantic.read().ok().and_then(|r| r.clone());
        let trial = Snapshot::new(servers).with_semantic(ranker);
        let mut fitting: Vec<(String, String)> = Vec::new();
        for hit in trial.search(query, within) {
            let Some(tool) = trial.tools().get(hit.index) else {
                continue;
            };
            if starting.contains(&tool.server) && fitting.iter().all(|(s, _)| *s != tool.server) {
                fitting.push((tool.server.clone(), tool.tool.name.clone()));
            }
        }
        fitting
    }

    /// Swaps in `snapshot` for every holder.
    pub fn replace(&self, snapshot: Snapshot) {
        let snapshot = if self.model_view.load(std::sync::atomic::Ordering::Relaxed) {
            snapshot.for_model()
        } else {
            snapshot
        };
        let ranker = self.semantic.read().ok().and_then(|r| r.clone());
        let snapshot = if snapshot.is_semantic() {
            snapshot
        } else {
            snapshot.with_semantic(ranker)
        };
        let snapshot = Arc::new(snapshot);
        match self.current.write() {
            Ok(mut guard) => *guard = snapshot,
            Err(poisoned) => *poisoned.into_inner() = snapshot,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str) -> Tool {
        serde_json::from_value(json!({"name": name, "description": format!("Does {name}.")}))
            .unwrap()
    }

    #[test]
    fn clones_share_one_snapshot() {
        let catalog = ToolCatalog::from_servers(vec![ServerTools {
            server: "a".into(),
            tools: vec![tool("one")],
            always_load: false,
        }]);
        let held_by_a_turn = catalog.clone();
        catalog.replace(Snapshot::new(vec![ServerTools {
            server: "a".into(),
            tools: vec![tool("one"), tool("two")],
            always_load: true,
        }]));
        let seen = held_by_a_turn.snapshot();
        assert_eq!(seen.tools().len(), 2);
        assert!(seen.always_loaded(1));
        assert_eq!(seen.position("a__two"), Some(1));
    }

    #[test]
    fn a_starting_server_is_worth_waiting_for_when_its_pinned_tools_fit() {
        let described = |name: &str, description: &str| -> Tool {
            serde_json::from_value(json!({"name": name, "description": description})).unwrap()
        };
        let catalog = ToolCatalog::from_servers(vec![ServerTools {
            server: "time".into(),
            tools: vec![described(
                "get_current_time",
                "The current time in a time zone.",
            )],
            always_load: false,
        }]);
        let starting = vec!["sqlite".to_string()];
        let question = "which tables are in the database?";
        // Without pinning nothing is known of a server still starting.
        assert!(
            catalog
                .late_servers_fitting(&starting, question, 3)
                .is_empty()
        );
        let path = std::env::temp_dir().join(format!("tether-late-pins-{}", std::process::id()));
        let mut book = PinBook::load(&path).unwrap();
        book.check(
            "sqlite",
            "uvx mcp-server-sqlite",
            &[
                described("list_tables", "List all tables in the SQLite database."),
                described("read_query", "Run a SELECT query on the SQLite database."),
            ],
            None,
        );
        catalog.pin(&ServerRegistry::default(), book);
        assert_eq!(
            catalog.late_servers_fitting(&starting, question, 3),
            [("sqlite".to_string(), "list_tables".to_string())]
        );
        // A request its tools do not serve waits for nothing; nor does one for a server
        // that is not starting.
        assert!(
            catalog
                .late_servers_fitting(&starting, "what time is it in Tokyo?", 1)
                .is_empty()
        );
        assert!(catalog.late_servers_fitting(&[], question, 3).is_empty());
        // The catalogue itself is untouched: the server's tools come with its listing.
        assert_eq!(catalog.snapshot().tools().len(), 1);
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn one_line_descriptions() {
        assert_eq!(one_line("Adds. Then more.", 80), "Adds.");
        assert_eq!(one_line("\n  First line\nsecond", 80), "First line");
        assert_eq!(one_line("abcdefghij", 5), "abcd…");
    }
}
