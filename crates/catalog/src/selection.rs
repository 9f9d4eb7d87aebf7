//! Which tools a model is offered on each request, and what a call it makes stands for. The
//! agent talks to a [`ToolSelection`]; each mode is one implementation:
//!
//! - [`AllTools`]: every definition on every request (small catalogues).
//! - [`SearchTools`]: the always-loaded tools, a `search_tools` tool, and the tools loaded so
//!   far, appended in load order so the request prefix stays stable for prompt caching; the
//!   best matches for the user's message are loaded before each turn.
//! - [`MetaTool`]: one `mcp_query` tool (server, tool, params) whose description lists the
//!   servers and their tools; each call is checked against the real tool's schema.
//! - [`AutoTools`]: all while the definitions fit in a tenth of the model's context window,
//!   search beyond.

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tether_protocol::QualifiedTool;
use tether_protocol::chat::ToolDefinition;

use crate::catalog::{Snapshot, estimate_tokens, one_line};
use crate::search::Hit;

/// The name of the search tool offered in `search` mode.
pub const SEARCH_TOOL: &str = "search_tools";
/// The name of the meta-tool offered in `meta` mode.
pub const META_TOOL: &str = "mcp_query";
/// Context window assumed when neither the provider nor the config says (today's hosted
/// models have 128k or more).
pub const DEFAULT_CONTEXT_WINDOW: usize = 128_000;
/// Most tokens `mcp_query`'s description may take before it lists less.
const META_DESCRIPTION_BUDGET: usize = 1_500;

/// `--tools` and `"toolSelection"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SelectionMode {
    /// Every tool on every request.
    All,
    /// Tools found by search, loaded as the conversation goes.
    Search,
    /// One `mcp_query` meta-tool.
    Meta,
    /// `all` while the definitions fit in a tenth of the context window, `search` beyond.
    #[default]
    Auto,
}

impl SelectionMode {
    /// The mode's name as the flag and config write it.
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionMode::All => "all",
            SelectionMode::Search => "search",
            SelectionMode::Meta => "meta",
            SelectionMode::Auto => "auto",
        }
    }

    /// Parses `"all" | "search" | "meta" | "auto"`, with the fix in the error.
    pub fn parse(text: &str) -> Result<SelectionMode, String> {
        match text {
            "all" => Ok(SelectionMode::All),
            "search" => Ok(SelectionMode::Search),
            "meta" => Ok(SelectionMode::Meta),
            "auto" => Ok(SelectionMode::Auto),
            other => Err(format!(
                "\"{other}\" is not a tool-selection mode; use \"all\", \"search\", \"meta\" or \"auto\""
            )),
        }
    }
}

/// Settings shared by the modes.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectionOptions {
    /// The mode.
    pub mode: SelectionMode,
    /// The model's context window in tokens (for `auto`).
    pub context_window: usize,
    /// Let the model search: `search_tools` in search mode, `mcp_query`'s `query` in meta
    /// mode. Off for the embedded model, which is offered only the tools pre-selected for the
    /// user's message (in meta mode as `mcp_query`'s alternatives), so that its grammar is
    /// built over them alone.
    pub search_tool: bool,
    /// Tools loaded from the user's message before each turn in search mode.
    pub preload: usize,
    /// With `Some(margin)`, a pre-loaded tool must rank within `margin` of the best one when
    /// the ranking fuses words and meaning (standard deviations over the catalogue): a clear
    /// winner is offered alone, so a small model cannot pick a look-alike beside it.
    pub preload_margin: Option<f64>,
    /// Keep loaded tools for the rest of the conversation (off: each turn starts afresh).
    pub keep_loaded: bool,
    /// Tools returned by one search.
    pub search_limit: usize,
}

impl Default for SelectionOptions {
    fn default() -> Self {
        SelectionOptions {
            mode: SelectionMode::Auto,
            context_window: DEFAULT_CONTEXT_WINDOW,
            search_tool: true,
            preload: 5,
            preload_margin: None,
            keep_loaded: true,
            search_limit: 5,
        }
    }
}

/// The pre-load margin for a small model that chooses among the tools it is offered
/// ([`SelectionOptions::preload_margin`]); measured on the embedded model's benchmark
/// (docs/decisions.md, "The embedded model's pre-selection").
pub const SMALL_MODEL_PRELOAD_MARGIN: f64 = 1.0;

/// What one call the model made stands for.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    /// A server's tool, with the arguments to check, approve and send.
    Tool {
        /// The tool.
        tool: Box<QualifiedTool>,
        /// Its arguments (for `mcp_query`, the inner `params`).
        arguments: Value,
    },
    /// Answered by the selection itself (a search); no server is involved.
    Answered {
        /// What the model is told.
        text: String,
        /// Qualified names newly loaded by the call.
        loaded: Vec<String>,
    },
    /// Not runnable; the text tells the model how to fix the call.
    Refused(String),
    /// No tool by that name.
    Unknown,
}

/// The agent's view of the tools: what to offer, and what a call means.
pub trait ToolSelection: Send + Sync {
    /// The configured mode.
    fn mode(&self) -> SelectionMode;
    /// Called with the user's message before the first request of a turn; returns the tools
    /// it loaded.
    fn start_turn(&self, snapshot: &Snapshot, user_text: &str) -> Vec<String>;
    /// The definitions to send on the next request.
    fn offer(&self, snapshot: &Snapshot) -> Vec<ToolDefinition>;
    /// What the call `name(arguments)` stands for.
    fn resolve(&self, snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved;
    /// Qualified names loaded so far (search modes), in load order.
    fn loaded(&self) -> Vec<String> {
        Vec::new()
    }
    /// The servers whose tools the model can reach this turn, when that is fewer than all:
    /// a selection without a search offers only what it pre-selected. `None`: every server's
    /// (all offered, or a search over all of them).
    fn reachable_servers(&self, _snapshot: &Snapshot) -> Option<Vec<String>> {
        None
    }
    /// The mode in effect for `snapshot` (`auto` is `all` or `search`).
    fn effective_mode(&self, _snapshot: &Snapshot) -> SelectionMode {
        self.mode()
    }
    /// Called when a call to the tool `name` (qualified) failed. A selection that offers a
    /// small model only the tools it pre-selected within the margin offers the others it
    /// ranked for the message instead of the failed one, so a second call can take another
    /// way ("remember that Bob…" reached `add_observations`, and Bob was no entity yet);
    /// returns the tools it loaded, none when it had nothing else to offer.
    fn after_failed_call(&self, _snapshot: &Snapshot, _name: &str) -> Vec<String> {
        Vec::new()
    }
}

/// The selection for `options.mode`.
pub fn selection_for(options: &SelectionOptions) -> Arc<dyn ToolSelection> {
    match options.mode {
        SelectionMode::All => Arc::new(AllTools),
        SelectionMode::Search => Arc::new(SearchTools::new(options.clone())),
        SelectionMode::Meta => Arc::new(MetaTool::new(options.clone())),
        SelectionMode::Auto => Arc::new(AutoTools::new(options.clone())),
    }
}

fn resolve_direct(snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved {
    match snapshot.resolve(name) {
        Some(tool) => Resolved::Tool {
            tool: Box::new(tool.clone()),
            arguments,
        },
        None => Resolved::Unknown,
    }
}

/// The tools pre-selected for `user_text` (`options.preload` of them, within the pre-load
/// margin when there is one), and those of the first `preload` the margin left out.
fn pre_selection(
    options: &SelectionOptions,
    snapshot: &Snapshot,
    user_text: &str,
) -> (Vec<Hit>, Vec<Hit>) {
    match options.preload_margin {
        Some(margin) => snapshot.search_close_and_rest(user_text, options.preload, margin),
        None => (snapshot.search(user_text, options.preload), Vec::new()),
    }
}

/// Every tool on every request.
#[derive(Debug, Default)]
pub struct AllTools;

impl ToolSelection for AllTools {
    fn mode(&self) -> SelectionMode {
        SelectionMode::All
    }
    fn start_turn(&self, _snapshot: &Snapshot, _user_text: &str) -> Vec<String> {
        Vec::new()
    }
    fn offer(&self, snapshot: &Snapshot) -> Vec<ToolDefinition> {
        snapshot.definitions().to_vec()
    }
    fn resolve(&self, snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved {
        resolve_direct(snapshot, name, arguments)
    }
}

/// Tools found by search and loaded for the rest of the conversation.
#[derive(Debug)]
pub struct SearchTools {
    options: SelectionOptions,
    loaded: Mutex<Vec<String>>,
    /// This turn's tools ranked for the message past the pre-load margin: offered after a
    /// failed call ([`ToolSelection::after_failed_call`]).
    runners_up: Mutex<Vec<String>>,
}

impl SearchTools {
    /// A search selection with nothing loaded yet.
    pub fn new(options: SelectionOptions) -> SearchTools {
        SearchTools {
            options,
            loaded: Mutex::new(Vec::new()),
            runners_up: Mutex::new(Vec::new()),
        }
    }

    /// Adds tools to the loaded list (after those already there); returns the new ones.
    fn load(&self, snapshot: &Snapshot, names: impl IntoIterator<Item = String>) -> Vec<String> {
        let Ok(mut loaded) = self.loaded.lock() else {
            return Vec::new();
        };
        let mut added = Vec::new();
        for name in names {
            let Some(position) = snapshot.position(&name) else {
                continue;
            };
            if snapshot.always_loaded(position) || loaded.contains(&name) {
                continue;
            }
            loaded.push(name.clone());
            added.push(name);
        }
        added
    }

    fn search_definition(&self, snapshot: &Snapshot) -> ToolDefinition {
        let servers: Vec<String> = snapshot
            .servers()
            .iter()
            .filter(|s| !s.tools.is_empty())
            .map(|s| format!("{} ({})", s.server, s.tools.len()))
            .collect();
        ToolDefinition {
            name: SEARCH_TOOL.into(),
            description: format!(
                "Find tools by what they do and load them. {} tools are available from these servers: {}. \
                 Only loaded tools can be called; search before saying a task cannot be done. Returns the \
                 matching tools' names and descriptions; call them directly afterwards. Use \"select:NAME,NAME\" \
                 to load tools by exact name.",
                snapshot.tools().len(),
                servers.join(", ")
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, in a few words, or select:NAME[,NAME]"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Most tools to return (default 5)"}
                },
                "required": ["query"]
            }),
        }
    }

    fn search(&self, snapshot: &Snapshot, arguments: &Value) -> Resolved {
        let Some(query) = arguments
            .get("query")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|q| !q.is_empty())
        else {
            return Resolved::Refused(
                "search_tools needs a \"query\": a few words saying what the tool should do, or select:NAME".into(),
            );
        };
        let limit = arguments
            .get("limit")
            .and_then(Value::as_u64)
            .map_or(self.options.search_limit, |l| l.clamp(1, 20) as usize);
        let hits = snapshot.search(query, limit);
        let names: Vec<String> = hits
            .iter()
            .map(|h| snapshot.tools()[h.index].qualified_name.clone())
            .collect();
        let loaded = self.load(snapshot, names.clone());
        let mut text = String::new();
        if let Some(selected) = query.strip_prefix("select:") {
            let missing = snapshot.unknown_selections(selected);
            if !missing.is_empty() {
                text.push_str(&format!(
                    "No tool is named {}; search with words instead.\n",
                    missing.join(", ")
                ));
            }
        }
        if hits.is_empty() {
            text.push_str(&format!(
                "No tool matches \"{query}\". Try other words (what the tool does, not the task), or select:NAME."
            ));
            return Resolved::Answered { text, loaded };
        }
        text.push_str(&format!(
            "Loaded {} tool{}; call {} directly:\n",
            hits.len(),
            if hits.len() == 1 { "" } else { "s" },
            if hits.len() == 1 { "it" } else { "them" }
        ));
        for hit in &hits {
            let tool = &snapshot.tools()[hit.index];
            text.push_str(&format!(
                "- {}: {}\n",
                tool.qualified_name,
                one_line(tool.tool.description.as_deref().unwrap_or(""), 120)
            ));
        }
        Resolved::Answered {
            text: text.trim_end().to_string(),
            loaded,
        }
    }
}

impl ToolSelection for SearchTools {
    fn mode(&self) -> SelectionMode {
        SelectionMode::Search
    }

    fn start_turn(&self, snapshot: &Snapshot, user_text: &str) -> Vec<String> {
        if !self.options.keep_loaded
            && let Ok(mut loaded) = self.loaded.lock()
        {
            loaded.clear();
        }
        if self.options.preload == 0 {
            return Vec::new();
        }
        let (hits, rest) = pre_selection(&self.options, snapshot, user_text);
        let qualified = |hits: Vec<Hit>| -> Vec<String> {
            hits.into_iter()
                .map(|h| snapshot.tools()[h.index].qualified_name.clone())
                .collect()
        };
        if let Ok(mut runners_up) = self.runners_up.lock() {
            *runners_up = qualified(rest);
        }
        self.load(snapshot, qualified(hits))
    }

    fn after_failed_call(&self, snapshot: &Snapshot, name: &str) -> Vec<String> {
        // A tool this selection did not offer (a named file's reader) changes nothing.
        if !self.loaded().iter().any(|l| l == name) {
            return Vec::new();
        }
        let runners_up = match self.runners_up.lock() {
            Ok(mut runners_up) => std::mem::take(&mut *runners_up),
            Err(_) => return Vec::new(),
        };
        if runners_up.is_empty() {
            return Vec::new();
        }
        if let Ok(mut loaded) = self.loaded.lock() {
            loaded.retain(|l| l != name);
        }
        self.load(snapshot, runners_up)
    }

    fn offer(&self, snapshot: &Snapshot) -> Vec<ToolDefinition> {
        let mut offered = snapshot.always_loaded_definitions();
        if self.options.search_tool {
            offered.push(self.search_definition(snapshot));
        }
        for name in self.loaded() {
            if let Some(position) = snapshot.position(&name) {
                offered.push(snapshot.definitions()[position].clone());
            }
        }
        offered
    }

    fn resolve(&self, snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved {
        if name == SEARCH_TOOL {
            return self.search(snapshot, &arguments);
        }
        let resolved = resolve_direct(snapshot, name, arguments);
        if let Resolved::Tool { tool, .. } = &resolved {
            // A model that calls a tool it was not offered (named by the user, say) may; it
            // stays loaded so its definition is there for the next call.
            self.load(snapshot, [tool.qualified_name.clone()]);
        }
        resolved
    }

    fn loaded(&self) -> Vec<String> {
        self.loaded.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn reachable_servers(&self, snapshot: &Snapshot) -> Option<Vec<String>> {
        (!self.options.search_tool).then(|| servers_of(snapshot, &self.loaded()))
    }
}

/// The servers of the tools named `names` (qualified), each once, in the order met, with
/// the always-loaded servers.
fn servers_of(snapshot: &Snapshot, names: &[String]) -> Vec<String> {
    let mut servers: Vec<String> = Vec::new();
    let always = snapshot
        .tools()
        .iter()
        .enumerate()
        .filter(|(i, _)| snapshot.always_loaded(*i))
        .map(|(_, t)| &t.server);
    let named = names
        .iter()
        .filter_map(|n| snapshot.resolve(n))
        .map(|t| &t.server);
    for server in always.chain(named) {
        if !servers.contains(server) {
            servers.push(server.clone());
        }
    }
    servers
}

/// `all` while the definitions fit in a tenth of the context window, `search` beyond.
#[derive(Debug)]
pub struct AutoTools {
    budget: usize,
    search: SearchTools,
}

impl AutoTools {
    /// Auto over `options.context_window`.
    pub fn new(options: SelectionOptions) -> AutoTools {
        AutoTools {
            budget: options.context_window / 10,
            search: SearchTools::new(options),
        }
    }

    /// Whether every definition fits the budget, so `all` applies.
    pub fn fits(&self, snapshot: &Snapshot) -> bool {
        estimate_tokens(snapshot.definitions()) <= self.budget
    }
}

impl ToolSelection for AutoTools {
    fn mode(&self) -> SelectionMode {
        SelectionMode::Auto
    }
    fn start_turn(&self, snapshot: &Snapshot, user_text: &str) -> Vec<String> {
        if self.fits(snapshot) {
            return Vec::new();
        }
        self.search.start_turn(snapshot, user_text)
    }
    fn offer(&self, snapshot: &Snapshot) -> Vec<ToolDefinition> {
        if self.fits(snapshot) {
            snapshot.definitions().to_vec()
        } else {
            self.search.offer(snapshot)
        }
    }
    fn resolve(&self, snapshot: &Snapshot, name: &str, arguments: Value) -> Resolved {
        if self.fits(snapshot) && name != SEARCH_TOOL {
            return resolve_direct(snapshot, name, arguments);
        }
        self.search.resolve(snapshot, name, arguments)
    }
    fn loaded(&self) -> Vec<String> {
        self.search.loaded()
    }
    fn after_failed_call(&self, snapshot: &Snapshot, name: &str) -> Vec<String> {
        if self.fits(snapshot) {
            return Vec::new();
        }
        self.search.after_failed_call(snapshot, name)
    }
    fn reachable_servers(&self, snapshot: &Snapshot) -> Option<Vec<String>> {
        if self.fits(snapshot) {
            return None;
        }
        self.search.reachable_servers(snapshot)
    }
    fn effective_mode(&self, snapshot: &Snapshot) -> SelectionMode {
        if self.fits(snapshot) {
            SelectionMode::All
        } else {
            SelectionMode::Search
        }
    }
}

/// Tokens of the definitions each mode would send before anything is loaded (for `tether
/// tools --tokens`); `search` counts the always-loaded tools and `search_tools`.
pub fn tokens_per_mode(snapshot: &Snapshot, context_window: usize) -> Vec<(SelectionMode, usize)> {
    let options = SelectionOptions {
        context_window,
        preload: 0,
        ..SelectionOptions::default()
    };
    [
        SelectionMode::All,
        SelectionMode::Search,
        SelectionMode::Meta,
        SelectionMode::Auto,
    ]
    .into_iter()
    .map(|mode| {
        let selection = selection_for(&SelectionOptions {
            mode,
            ..options.clone()
        });
        (mode, estimate_tokens(&selection.offer(snapshot)))
    })
    .collect()
}

mod meta_tool;
pub use meta_tool::MetaTool;

#[cfg(test)]
mod tests;
