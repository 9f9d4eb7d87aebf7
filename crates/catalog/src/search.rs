//! Tool search: BM25 over each tool's name, title, description and parameters, with field
//! weights (a word in the name counts more than one deep in the description) and identifier
//! splitting (`getWeather`, `get_weather`, `get-weather` and `server__tool` all yield `get`
//! and `weather`), words stemmed with Snowball's English stemmer.
//!
//! Exact names win over any score: a query that names a tool (its own name or its qualified
//! name, anywhere in the text) or `select:NAME[,NAME]` puts those tools first, because the
//! complaint users have about tool search is that it misses a tool they named exactly.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use rust_stemmers::{Algorithm, Stemmer};
use serde::Serialize;
use serde_json::Value;
use tether_protocol::QualifiedTool;

/// BM25's term-frequency saturation.
const K1: f64 = 1.2;
/// BM25's length normalisation.
const B: f64 = 0.75;

/// How the index ranks: the shipped ranking, or plain BM25 (the benchmark's baseline).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranking {
    /// Weight of the tool's own name (and the server's name, at a third of it).
    pub name_weight: f64,
    /// Weight of the title.
    pub title_weight: f64,
    /// Weight of the description.
    pub description_weight: f64,
    /// Weight of parameter names and their descriptions.
    pub parameter_weight: f64,
    /// Split identifiers (`getWeather` → `get weather`) and stem words.
    pub analyse: bool,
    /// Put tools named exactly in the query first.
    pub exact_names: bool,
}

impl Default for Ranking {
    fn default() -> Self {
        Ranking {
            name_weight: 3.0,
            title_weight: 2.0,
            description_weight: 1.0,
            parameter_weight: 0.5,
            analyse: true,
            exact_names: true,
        }
    }
}

impl Ranking {
    /// The shipped ranking with weights from `TETHER_RANKING="name,title,description,parameters"`
    /// when set (for tuning with the benchmark).
    pub fn from_env() -> Ranking {
        let mut ranking = Ranking::default();
        if let Ok(text) = std::env::var("TETHER_RANKING") {
            let w: Vec<f64> = text
                .split(',')
                .filter_map(|x| x.trim().parse().ok())
                .collect();
            if let [name, title, description, parameters] = w[..] {
                ranking.name_weight = name;
                ranking.title_weight = title;
                ranking.description_weight = description;
                ranking.parameter_weight = parameters;
            }
        }
        ranking
    }

    /// Plain BM25 over name, description and parameters as one bag of lower-cased words.
    pub fn plain() -> Ranking {
        Ranking {
            name_weight: 1.0,
            title_weight: 1.0,
            description_weight: 1.0,
            parameter_weight: 1.0,
            analyse: false,
            exact_names: false,
        }
    }
}

/// One ranked tool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hit {
    /// Position of the tool in the indexed list.
    pub index: usize,
    /// BM25 score; exact-name hits score above every other hit.
    pub score: f64,
    /// Whether the query named the tool exactly (or selected it).
    pub exact: bool,
}

/// How many of a query's terms, the most telling first, make its [`Lexical::ceiling`]: about
/// what one request names (a verb, an object, a qualifier), so that a question asking for
/// several things at once ("the area of a circle, and the GDP of France") does not count a
/// tool matching one of them as a partial match (docs/decisions.md).
const CEILING_TERMS: usize = 3;

/// The tools a query matches by its words, and what a tool could score at most on the query's
/// most telling words.
#[derive(Debug, Clone, PartialEq)]
pub struct Lexical {
    /// Every matching tool up to the limit asked for, best first.
    pub hits: Vec<Hit>,
    /// The BM25 score a tool would reach by containing each of the query's three most telling
    /// terms (largest weight × idf) without limit; 0 for a `select:` query or one with no
    /// indexed word. A tool's score over it is how much of the request it matches.
    pub ceiling: f64,
}

/// An inverted index over a list of tools.
#[derive(Debug, Clone)]
pub struct SearchIndex {
    ranking: Ranking,
    /// Index terms (stems) → term ids.
    vocabulary: HashMap<String, u32>,
    /// Per term id: (document, weighted term frequency).
    postings: Vec<Vec<(u32, f32)>>,
    /// Weighted length of each document.
    lengths: Vec<f32>,
    average_length: f64,
    /// Lower-cased plain and qualified names → documents, for exact matches.
    names: HashMap<String, Vec<u32>>,
    /// Per term id: whether the term occurs in some tool's name, where abbreviations live.
    name_terms: Vec<bool>,
}

impl SearchIndex {
    /// Indexes `tools` in order; hits refer to positions in this list.
    pub fn build(tools: &[QualifiedTool], ranking: Ranking) -> SearchIndex {
        let stemmer = ranking.analyse.then(|| Stemmer::create(Algorithm::English));
        let mut vocabulary: HashMap<String, u32> = HashMap::new();
        let mut postings: Vec<Vec<(u32, f32)>> = Vec::new();
        let mut lengths = Vec::with_capacity(tools.len());
        let mut names: HashMap<String, Vec<u32>> = HashMap::new();
        let mut name_terms: Vec<bool> = Vec::new();
        // Each distinct lower-cased word is analysed once: tool descriptions repeat the same
        // words thousands of times, and stemming and hashing them again was most of the build.
        let mut word_terms: FxHashMap<String, Option<u32>> = FxHashMap::default();
        let mut word = String::new();
        // Dense per-term scratch for one document, and which entries it touched.
        let mut frequencies: Vec<f32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        for (doc, tool) in tools.iter().enumerate() {
            let doc = doc as u32;
            let mut length = 0.0f32;
            let mut add = |text: &str, weight: f64, in_name: bool| {
                let mut visit = |piece: &str| {
                    word.clear();
                    word.extend(piece.chars().flat_map(char::to_lowercase));
                    let term = match word_terms.get(word.as_str()) {
                        Some(term) => *term,
                        None => {
                            let stem = match &stemmer {
                                Some(stemmer) => {
                                    (!is_stop_word(&word)).then(|| stemmer.stem(&word).into_owned())
                                }
                                None => Some(word.clone()),
                            };
                            let term = stem.map(|stem| {
                                *vocabulary.entry(stem).or_insert_with(|| {
                                    postings.push(Vec::new());
                                    frequencies.push(0.0);
                                    name_terms.push(false);
                                    (postings.len() - 1) as u32
                                })
                            });
                            word_terms.insert(word.clone(), term);
                            term
                        }
                    };
                    if let Some(id) = term {
                        let slot = &mut frequencies[id as usize];
                        if *slot == 0.0 {
                            touched.push(id);
                        }
                        *slot += weight as f32;
                        length += weight as f32;
                        if in_name {
                            name_terms[id as usize] = true;
                        }
                    }
                };
                if stemmer.is_some() {
                    each_word(text, &mut visit);
                } else {
                    text.split(|c: char| !c.is_alphanumeric())
                        .filter(|w| !w.is_empty())
                        .for_each(&mut visit);
                }
            };
            add(&tool.tool.name, ranking.name_weight, true);
            add(&tool.server, ranking.name_weight / 3.0, false);
            if let Some(title) = tool
                .tool
                .title
                .as_ref()
                .or(tool.tool.annotations.title.as_ref())
            {
                add(title, ranking.title_weight, false);
            }
            if let Some(description) = &tool.tool.description {
                add(description, ranking.description_weight, false);
            }
            for (name, description) in parameters(&tool.tool.input_schema) {
                add(name, ranking.parameter_weight, false);
                if let Some(description) = description {
                    add(description, ranking.parameter_weight, false);
                }
            }
            for id in touched.drain(..) {
                let tf = std::mem::take(&mut frequencies[id as usize]);
                postings[id as usize].push((doc, tf));
            }
            lengths.push(length);
            for name in [&tool.tool.name, &tool.qualified_name] {
                let docs = names.entry(name.to_lowercase()).or_default();
                if !docs.contains(&doc) {
                    docs.push(doc);
                }
            }
        }
        let average_length = if lengths.is_empty() {
            1.0
        } else {
            (lengths.iter().map(|l| f64::from(*l)).sum::<f64>() / lengths.len() as f64).max(1.0)
        };
        SearchIndex {
            ranking,
            vocabulary,
            postings,
            lengths,
            average_length,
            names,
            name_terms,
        }
    }

    /// Number of indexed tools.
    pub fn len(&self) -> usize {
        self.lengths.len()
    }

    /// Whether no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.lengths.is_empty()
    }

    /// The tools named by `select:A,B` (plain or qualified names), in the order given, and
    /// the names that matched nothing.
    pub fn select(&self, names: &str) -> (Vec<Hit>, Vec<String>) {
        let mut hits: Vec<Hit> = Vec::new();
        let mut missing = Vec::new();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match self.names.get(&name.to_lowercase()) {
                Some(docs) => {
                    for &doc in docs {
                        if !hits.iter().any(|h| h.index == doc as usize) {
                            hits.push(Hit {
                                index: doc as usize,
                                score: f64::from(u16::MAX),
                                exact: true,
                            });
                        }
                    }
                }
                None => missing.push(name.to_string()),
            }
        }
        (hits, missing)
    }

    /// The best `limit` tools for `query`, best first. `select:…` queries return exactly the
    /// selected tools.
    pub fn search(&self, query: &str, limit: usize) -> Vec<Hit> {
        self.lexical(query, limit).hits
    }

    /// The best `limit` tools for `query` with the ceiling of its most telling words, for a
    /// ranking that fuses words with other evidence.
    pub fn lexical(&self, query: &str, limit: usize) -> Lexical {
        if let Some(names) = query.trim().strip_prefix("select:") {
            let (mut hits, _) = self.select(names);
            hits.truncate(limit);
            return Lexical { hits, ceiling: 0.0 };
        }
        let mut analyser = Analyser::new(self.ranking.analyse);
        let mut scores: HashMap<u32, f64> = HashMap::new();
        let n = self.lengths.len() as f64;
        let mut terms: Vec<(u32, f64)> = Vec::new();
        // A repeated query word adds nothing: questions repeat themselves.
        let add = |terms: &mut Vec<(u32, f64)>, id: u32, weight: f64| {
            if !terms.iter().any(|(t, _)| *t == id) {
                terms.push((id, weight));
            }
        };
        let mut everyday: Vec<&str> = Vec::new();
        let mut stems: Vec<String> = Vec::new();
        // Exact names are looked for in the query as written (below).
        let read = request_readings(query);
        let spoken = crate::values::phrasal_verbs_as_words(&read).into_owned();
        let words = if self.ranking.analyse {
            crate::values::without_values(&spoken)
        } else {
            std::borrow::Cow::Borrowed(query)
        };
        analyser.each_term(&words, |term| {
            if let Some(&id) = self.vocabulary.get(term) {
                add(&mut terms, id, 1.0);
            }
            if self.ranking.analyse {
                if let Some((_, meant)) = EVERYDAY_WORDS.iter().find(|(word, _)| *word == term) {
                    everyday.extend(meant.iter().copied());
                }
                stems.push(term.to_string());
            }
        });
        if self.ranking.analyse {
            // Two words a tool writes as one ("board game" for `boardgame`), as the whole word.
            for pair in split_identifiers(&words).windows(2) {
                if pair
                    .iter()
                    .all(|w| w.len() > 1 && w.chars().all(char::is_alphabetic))
                {
                    analyser.each_term(&format!("{}{}", pair[0], pair[1]), |term| {
                        if let Some(&id) = self.vocabulary.get(term) {
                            add(&mut terms, id, 1.0);
                        }
                    });
                }
            }
            // Names abbreviate ("calc", "info", "contrib"): a name's word that begins a query
            // word counts at half weight.
            for stem in &stems {
                if let Some(id) = self.abbreviation(stem) {
                    add(&mut terms, id, ABBREVIATION_WEIGHT);
                }
            }
        }
        // Words people use for what tools name otherwise ("folder" for directory) count as
        // the tool's word: the person's own word still counts too, so a tool using both wins.
        for meant in everyday {
            analyser.each_term(meant, |term| {
                if let Some(&id) = self.vocabulary.get(term) {
                    add(&mut terms, id, EVERYDAY_WEIGHT);
                }
            });
        }
        // Values the query names are arguments, not topics (left out above: "notes.txt" is
        // no question about notes); their kind ("txt file") counts at the weight of an
        // abbreviation, after the query's own words so a word it writes keeps its weight.
        if self.ranking.analyse {
            for said in crate::values::kind_words(query) {
                analyser.each_term(&said, |term| {
                    if let Some(&id) = self.vocabulary.get(term) {
                        add(&mut terms, id, KIND_WEIGHT);
                    }
                });
            }
        }
        // What each term can add at most (its frequency saturating), for the ceiling.
        let mut most: Vec<f64> = Vec::with_capacity(terms.len());
        for (id, weight) in terms {
            let postings = &self.postings[id as usize];
            let df = postings.len() as f64;
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            most.push(weight * idf * (K1 + 1.0));
            for &(doc, tf) in postings {
                let tf = f64::from(tf);
                let length = f64::from(self.lengths[doc as usize]);
                let norm = K1 * (1.0 - B + B * length / self.average_length);
                *scores.entry(doc).or_insert(0.0) += weight * idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        most.sort_by(|a, b| b.total_cmp(a));
        let ceiling = most.iter().take(CEILING_TERMS).sum();
        let mut hits: Vec<Hit> = scores
            .into_iter()
            .map(|(doc, score)| Hit {
                index: doc as usize,
                score,
                exact: false,
            })
            .collect();
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
        if self.ranking.exact_names {
            let exact = self.exact_mentions(query);
            if !exact.is_empty() {
                let top = hits.first().map_or(0.0, |h| h.score);
                let mut first: Vec<Hit> = exact
                    .iter()
                    .map(|&index| Hit {
                        index,
                        score: top + 1.0,
                        exact: true,
                    })
                    .collect();
                hits.retain(|h| !exact.contains(&h.index));
                first.append(&mut hits);
                hits = first;
            }
        }
        hits.truncate(limit);
        Lexical { hits, ceiling }
    }

    /// The longest word of a tool name, four characters or more, that begins `stem` and is
    /// at least two characters shorter: `calc` for `calcul`, `info` for `inform`.
    fn abbreviation(&self, stem: &str) -> Option<u32> {
        let starts: Vec<usize> = stem.char_indices().map(|(at, _)| at).collect();
        (4..starts.len().saturating_sub(1)).rev().find_map(|k| {
            let id = *self.vocabulary.get(&stem[..starts[k]])?;
            self.name_terms[id as usize].then_some(id)
        })
    }

    /// Tools named in `text`, in order of mention: the whole text is a tool's name, or a word
    /// of it is a name that cannot be an ordinary word (`get_weather`, `getWeather`,
    /// `math.factorial`, `files__read`), or any name set off as one (`` `add` ``, `"add"`, or
    /// "the add tool"). A plain English word that happens to name a tool (`sum`, `translate`)
    /// is left to the ranking, or every question saying "sum" would put that tool first.
    fn exact_mentions(&self, text: &str) -> Vec<usize> {
        let mut found = Vec::new();
        let mut add = |docs: &Vec<u32>| {
            for &doc in docs {
                if !found.contains(&(doc as usize)) {
                    found.push(doc as usize);
                }
            }
        };
        if let Some(docs) = self.names.get(&text.trim().to_lowercase()) {
            add(docs);
        }
        let words: Vec<&str> = text
            .split(|c: char| c.is_whitespace() || c == ',' || c == ';')
            .filter(|w| !w.is_empty())
            .collect();
        for (i, raw) in words.iter().enumerate() {
            let word = raw
                .trim_matches(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-' || c == '.'));
            let word = word.trim_end_matches('.');
            if word.is_empty() {
                continue;
            }
            let quoted = raw.starts_with(['`', '"', '\'']);
            let called_a_tool = words.get(i + 1).is_some_and(|next| {
                let next = next
                    .trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase();
                next == "tool" || next == "function"
            });
            let identifier = word.contains(['_', '.', '-'])
                || word.chars().skip(1).any(char::is_uppercase)
                || (word.chars().any(|c| c.is_ascii_digit())
                    && word.chars().any(char::is_alphabetic));
            if !(quoted || called_a_tool || identifier) {
                continue;
            }
            if let Some(docs) = self.names.get(&word.to_lowercase()) {
                add(docs);
            }
        }
        found
    }
}

/// Parameter names and descriptions of an object schema (top level and one level down).
fn parameters(schema: &Value) -> Vec<(&str, Option<&str>)> {
    let mut out = Vec::new();
    collect_parameters(schema, &mut out, 0);
    out
}

fn collect_parameters<'a>(
    schema: &'a Value,
    out: &mut Vec<(&'a str, Option<&'a str>)>,
    depth: usize,
) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, property) in properties {
        let description = property.get("description").and_then(Value::as_str);
        out.push((name.as_str(), description));
        if depth == 0 {
            collect_parameters(property, out, depth + 1);
            if let Some(items) = property.get("items") {
                collect_parameters(items, out, depth + 1);
            }
        }
    }
}

/// Weight of the words for the kind of a value the query names ("txt file" for notes.txt).
const KIND_WEIGHT: f64 = 0.5;

/// Weight of a tool name's abbreviation of a query word.
const ABBREVIATION_WEIGHT: f64 = 0.5;

/// Weight of a word added because an everyday word in the query means it. Half weight was
/// shipped first; full weight found more on both benchmarks (docs/decisions.md).
const EVERYDAY_WEIGHT: f64 = 1.0;

/// Everyday words (as stems) and the words tools use for the same thing: people say "folder"
/// and "forget", tool descriptions say "directory" and "delete". General vocabulary of files,
/// memory, time, money and size, not tuned to any one server.
const EVERYDAY_WORDS: &[(&str, &[&str])] = &[
    ("folder", &["directory"]),
    ("dir", &["directory"]),
    ("big", &["size"]),
    ("larg", &["size"]),
    ("open", &["read"]),
    ("pull", &["read", "open"]),
    ("view", &["read"]),
    ("look", &["read"]),
    ("photo", &["image"]),
    ("pictur", &["image"]),
    ("screenshot", &["image"]),
    ("rememb", &["memory", "knowledge"]),
    ("recal", &["memory", "knowledge"]),
    ("forget", &["delete", "memory"]),
    ("eras", &["delete"]),
    ("renam", &["move"]),
    ("save", &["write"]),
    ("typo", &["edit"]),
    ("mind", &["memory", "remember"]),
    ("repeat", &["echo"]),
    ("bump", &["increase", "update"]),
    ("make", &["create"]),
    ("today", &["current", "date"]),
    ("now", &["current"]),
    ("dollar", &["currency"]),
    ("euro", &["currency"]),
    ("yen", &["currency"]),
    ("yuan", &["currency"]),
    ("rupe", &["currency"]),
    ("peso", &["currency"]),
    ("usd", &["currency"]),
    ("eur", &["currency"]),
    ("gbp", &["currency"]),
    ("jpi", &["currency"]),
    ("money", &["currency"]),
    ("histori", &["log"]),
    ("column", &["schema"]),
    ("row", &["insert", "select"]),
    ("db", &["database"]),
    ("where", &["search", "find"]),
    ("anywher", &["search", "find"]),
    ("somewher", &["search", "find"]),
    ("locat", &["search", "find"]),
    ("height", &["dimension"]),
    ("width", &["dimension"]),
];

/// Whether `word` (lower-cased) says nothing about which tool is meant: a stop word, or a
/// single character (the `s` of "what's" and "machine's", the `t` of "don't", a lone digit).
fn is_stop_word(word: &str) -> bool {
    word.chars().nth(1).is_none() || STOP_WORDS.contains(&word)
}

/// Words that say nothing about which tool is meant.
const STOP_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "could", "do", "does", "for", "from",
    "given", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me", "my", "of",
    "on", "or", "please", "should", "so", "some", "that", "the", "their", "them", "then", "there",
    "these", "this", "those", "to", "use", "using", "want", "was", "we", "what", "when", "which",
    "who", "will", "with", "would", "you", "your", "tool", "tools", "function",
];

/// Turns text into index terms. Each distinct word is analysed once (split, lower-cased,
/// stop-listed, stemmed) and cached: tool descriptions repeat the same words thousands of times.
struct Analyser {
    stemmer: Option<Stemmer>,
    /// Lower-cased word → its stem, or `None` for a stop word.
    cache: HashMap<String, Option<String>>,
    word: String,
}

impl Analyser {
    fn new(analyse: bool) -> Analyser {
        Analyser {
            stemmer: analyse.then(|| Stemmer::create(Algorithm::English)),
            cache: HashMap::new(),
            word: String::new(),
        }
    }

    /// Calls `f` with each term of `text`, in order.
    fn each_term(&mut self, text: &str, mut f: impl FnMut(&str)) {
        let Some(stemmer) = &self.stemmer else {
            for word in text.split(|c: char| !c.is_alphanumeric()) {
                if !word.is_empty() {
                    f(&word.to_lowercase());
                }
            }
            return;
        };
        let (cache, buffer) = (&mut self.cache, &mut self.word);
        each_word(text, |piece| {
            buffer.clear();
            buffer.extend(piece.chars().flat_map(char::to_lowercase));
            if !cache.contains_key(buffer.as_str()) {
                let stem = (!is_stop_word(buffer)).then(|| stemmer.stem(buffer).into_owned());
                cache.insert(buffer.clone(), stem);
            }
            if let Some(Some(stem)) = cache.get(buffer.as_str()) {
                f(stem);
            }
        });
    }
}

/// Calls `f` with each word of `text` as a slice of it, identifiers split at `_`, `-`, `.`,
/// camelCase humps and letter/digit boundaries.
fn each_word(text: &str, mut f: impl FnMut(&str)) {
    for chunk in text.split(|c: char| !c.is_alphanumeric()) {
        if chunk.is_empty() {
            continue;
        }
        let mut start = 0;
        let mut chars = chunk.char_indices().peekable();
        let mut prev: Option<char> = None;
        while let Some((at, cur)) = chars.next() {
            if let Some(prev) = prev {
                let next_lower = chars.peek().is_some_and(|(_, c)| c.is_lowercase());
                let boundary = (prev.is_lowercase() && cur.is_uppercase())
                    || (prev.is_uppercase() && cur.is_uppercase() && next_lower)
                    || (prev.is_alphabetic() && cur.is_numeric())
                    || (prev.is_numeric() && cur.is_alphabetic());
                if boundary {
                    f(&chunk[start..at]);
                    start = at;
                }
            }
            prev = Some(cur);
        }
        f(&chunk[start..]);
    }
}

/// Lower-cased words of `text`, with identifiers split at `_`, `-`, `.`, camelCase humps and
/// letter/digit boundaries: `getHTTPResponse2` → `get http response 2`.
pub fn split_identifiers(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    each_word(text, |word| words.push(word.to_lowercase()));
    words
}

/// `query` as both rankings read it: a fact it reports as "a fact", what it asks the assistant
/// about what it keeps, a fact true no longer, a word problem's arithmetic, a named table's
/// rows and a change to a named file said outright (`facts`, `arithmetic`, `values`). Each
/// ranking then reads values its own way.
pub(crate) fn request_readings(query: &str) -> String {
    let facts = crate::facts::facts_as_kind(query);
    let facts = crate::facts::kept_by_you_as_words(&facts);
    let facts = crate::facts::retracted_as_words(&facts);
    let spoken = crate::arithmetic::arithmetic_as_words(&facts);
    let rows = crate::values::table_rows_as_words(&spoken);
    crate::values::file_edits_as_words(&rows).into_owned()
}

/// The lower-cased words of `text` as written, split at every character that is not a letter
/// or a digit (identifiers are not split: see [`split_identifiers`]).
pub(crate) fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests;
