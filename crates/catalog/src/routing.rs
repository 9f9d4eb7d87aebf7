//! Two nudges to the fused ranking from what a query says beside its words: the kind of
//! value it names (`values`: a file's name, a web address) favours the tools that take
//! such a value, and the server whose tools as a whole sit closest to the query in meaning
//! favours its own tools (the server-first routing of MCP-Zero, without its written server
//! summaries: a server's tools are its summary).
//!
//! Both are small additions in the fused ranking's units (standard deviations over the
//! catalogue), so a tool that matches the words and the meaning still wins; they decide between
//! tools that words and meaning put close together, which is where a catalogue of thousands of
//! tools from one big server hides the one a person's own servers offer for "what's in my
//! notes.txt?".
//!
//! Last, the first places of the ranking make room for the other servers
//! ([`Routing::make_room`]): a server holding most of the catalogue's tools holds at most three
//! of the first five while another server's tool comes within a few standard deviations of the
//! fifth, as a web search shows a few pages of one site and then another site's (host
//! crowding). Among thousands of tools one big server always has
//! a few that share a request's incidental words ("my dog" for "keep in mind that my dog is
//! called Rex"); the small server that does the job comes next, and is now seen.

use tether_protocol::QualifiedTool;

use crate::search::{Hit, split_identifiers, words_of};
use crate::values::{ValueKind, kinds_named};

/// Added to a tool taking the kind of value the query names (docs/decisions.md).
const KIND_BONUS: f64 = 1.0;

/// Weight of the server's closeness (a z-score over the servers): as much as the tool's own
/// closeness in meaning (docs/decisions.md).
const SERVER_WEIGHT: f64 = 1.5;

/// Added to the tools of a server the query names ("note in memory that…" beside a server
/// called `memory`): nearly what naming a tool does, which puts it first outright; a server
/// named for a common word ("time", "everything") lifts its tools without deciding.
const SERVER_NAMED_BONUS: f64 = 3.0;

/// Fewer servers than this and the servers' z-scores say nothing.
const MIN_SERVERS: usize = 3;

/// The first places of a ranking, where one server may hold no more than
/// [`ONE_SERVER_AT_MOST`]: the five a search shows and the model is offered first.
const FIRST_PLACES: usize = 5;

/// How many of the first places one server may hold while another's tool comes close.
/// Measured on the development sets (docs/decisions.md): 4 (one place made) lifts the
/// user-phrased questions among BFCL's tools less than 3 does; 2 lifts them no further.
const ONE_SERVER_AT_MOST: usize = 3;

/// How far below the fifth place (in the fused ranking's standard deviations) another server's
/// tool may score and still be given a place: far enough for a small server's tool that a big
/// server's incidental matches pushed down, near enough that a question meant for the big
/// server keeps its tools (BFCL's own questions with the reference servers beside them rank
/// as before up to 3.5; docs/decisions.md).
const ROOM_MARGIN: f64 = 3.0;

/// Words that are pronouns in a sentence ("forget everything you know") before they are a
/// server's name: such a name counts as said only as a name ([`names_server`]).
const PRONOUNS: &[&str] = &[
    "everything",
    "anything",
    "something",
    "nothing",
    "all",
    "this",
    "that",
    "it",
];

/// Whether the query's `words` name the server called `name` (its words): the name's words
/// in a row, and a name that is also a pronoun ("everything") only as a name: after "the" or
/// before "server", "mcp" or a possessive ("the everything server", "everything's echo").
fn names_server(words: &[String], name: &[String]) -> bool {
    if name.is_empty() {
        return false;
    }
    let pronoun = matches!(name, [one] if PRONOUNS.contains(&one.as_str()));
    words.windows(name.len()).enumerate().any(|(at, w)| {
        w == name
            && (!pronoun
                || (at > 0 && words[at - 1] == "the")
                || words
                    .get(at + name.len())
                    .is_some_and(|next| matches!(next.as_str(), "server" | "mcp" | "s")))
    })
}

/// The kinds of value `tool` takes, read from its parameters' names.
pub(crate) fn kinds_taken(tool: &QualifiedTool) -> Vec<ValueKind> {
    let mut kinds = Vec::new();
    let Some(properties) = tool
        .tool
        .input_schema
        .get("properties")
        .and_then(|p| p.as_object())
    else {
        return kinds;
    };
    for name in properties.keys() {
        for word in split_identifiers(name) {
            let kind = match word.as_str() {
                "path" | "paths" | "file" | "files" | "filename" | "filepath" | "dir"
                | "directory" | "folder" => Some(ValueKind::Path),
                "url" | "urls" | "uri" | "link" | "href" => Some(ValueKind::Url),
                "time" | "hour" | "clock" => Some(ValueKind::Clock),
                "email" | "emails" | "recipient" | "recipients" => Some(ValueKind::Email),
                _ => None,
            };
            if let Some(kind) = kind.filter(|k| !kinds.contains(k)) {
                kinds.push(kind);
            }
        }
    }
    kinds
}

/// What a snapshot's tools say about routing, worked out once per snapshot (with its tool
/// vectors) so that a query pays only for the query: each tool's server and the kinds of value
/// it takes, each server's centroid length.
#[derive(Debug, Default)]
pub struct Routing {
    /// Each tool's server, as an index into `centroid_lengths`.
    server_of: Vec<usize>,
    /// The length of the mean of each server's tool vectors.
    centroid_lengths: Vec<f64>,
    /// The kinds of value each tool takes.
    takes: Vec<Vec<ValueKind>>,
    /// Each server's name as lower-cased words (`brave-search` → `brave`, `search`).
    server_names: Vec<Vec<String>>,
    /// The server holding more than half of the tools, if one does.
    most: Option<usize>,
}

impl Routing {
    /// The routing facts of `tools` with their unit `vectors` (in the same order).
    pub fn new<V: AsRef<[f32]>>(tools: &[QualifiedTool], vectors: &[V]) -> Routing {
        let mut names: Vec<&str> = Vec::new();
        let server_of: Vec<usize> = tools
            .iter()
            .map(|tool| match names.iter().position(|n| *n == tool.server) {
                Some(i) => i,
                None => {
                    names.push(&tool.server);
                    names.len() - 1
                }
            })
            .collect();
        let mut sums: Vec<(Vec<f64>, usize)> = vec![(Vec::new(), 0); names.len()];
        for (server, vector) in server_of.iter().zip(vectors) {
            let vector = vector.as_ref();
            if let Some((sum, n)) = sums.get_mut(*server) {
                sum.resize(vector.len().max(sum.len()), 0.0);
                sum.iter_mut()
                    .zip(vector.iter())
                    .for_each(|(a, b)| *a += f64::from(*b));
                *n += 1;
            }
        }
        let centroid_lengths = sums
            .iter()
            .map(|(sum, n)| sum.iter().map(|x| x * x).sum::<f64>().sqrt() / (*n).max(1) as f64)
            .collect();
        let mut sizes = vec![0usize; names.len()];
        for server in &server_of {
            if let Some(n) = sizes.get_mut(*server) {
                *n += 1;
            }
        }
        let most = sizes.iter().position(|n| 2 * n > tools.len());
        Routing {
            most,
            server_names: names.iter().map(|n| words_of(n)).collect(),
            server_of,
            centroid_lengths,
            takes: tools.iter().map(kinds_taken).collect(),
        }
    }

    /// What to add to each tool's fused score for `query`, in snapshot order: `KIND_BONUS`
    /// for a tool taking a kind of value the query names, `SERVER_NAMED_BONUS` for the tools of
    /// a server the query names, and `SERVER_WEIGHT` times its
    /// server's closeness to the query as a z-score over the servers. A server's closeness is
    /// the query's similarity to the direction of its tools' mean vector (the mean of `dense`,
    /// the query's similarity to each tool, over the server's tools, divided by the mean
    /// vector's length): a big server of unrelated tools is not pushed down for being diverse.
    pub fn nudges(&self, query: &str, dense: &[f64]) -> Vec<f64> {
        let servers = self.centroid_lengths.len();
        let closeness: Option<Vec<f64>> =
            (servers >= MIN_SERVERS && dense.len() == self.server_of.len()).then(|| {
                let mut sums = vec![(0.0, 0usize); servers];
                for (server, similarity) in self.server_of.iter().zip(dense) {
                    if let Some((sum, n)) = sums.get_mut(*server) {
                        *sum += similarity;
                        *n += 1;
                    }
                }
                sums.iter()
                    .zip(&self.centroid_lengths)
                    .map(|((sum, n), length)| sum / (*n).max(1) as f64 / length.max(1e-6))
                    .collect()
            });
        self.nudges_by(query, closeness.as_deref())
    }

    /// [`Routing::nudges`] with each server's closeness to the query given: its tools' mean
    /// cosine over their centroid's length, which is the cosine of the query to the
    /// centroid (`shortlist` works it out from a sample of each server's tools). `None`: no
    /// server is lifted for its closeness.
    pub(crate) fn nudges_by(&self, query: &str, closeness: Option<&[f64]>) -> Vec<f64> {
        let mut nudge = vec![0.0; self.server_of.len()];
        let named = kinds_named(query);
        if !named.is_empty() {
            for (slot, takes) in nudge.iter_mut().zip(&self.takes) {
                if takes.iter().any(|k| named.contains(k)) {
                    *slot += KIND_BONUS;
                }
            }
        }
        let words = words_of(query);
        let server_named: Vec<bool> = self
            .server_names
            .iter()
            .map(|name| names_server(&words, name))
            .collect();
        for (slot, server) in nudge.iter_mut().zip(&self.server_of) {
            if server_named.get(*server).copied().unwrap_or(false) {
                *slot += SERVER_NAMED_BONUS;
            }
        }
        let Some(closeness) = closeness.filter(|c| c.len() >= MIN_SERVERS) else {
            return nudge;
        };
        let z = z_scores(closeness);
        for (slot, server) in nudge.iter_mut().zip(&self.server_of) {
            *slot += SERVER_WEIGHT * z.get(*server).copied().unwrap_or(0.0);
        }
        nudge
    }

    /// Each tool's server, as an index into the servers in order of first appearance.
    pub(crate) fn server_of(&self) -> &[usize] {
        &self.server_of
    }

    /// How many servers the tools come from.
    pub(crate) fn servers(&self) -> usize {
        self.centroid_lengths.len()
    }

    pub(crate) fn make_room(&self, hits: Vec<Hit>) -> Vec<Hit> {
        let (Some(most), Some(fifth)) = (self.most, hits.get(FIRST_PLACES - 1).map(|h| h.score))
        else {
            return hits;
        };
        let mut held = 0;
        let mut first = Vec::with_capacity(hits.len());
        let mut waiting = Vec::new();
        let mut rest = hits.into_iter().peekable();
        while first.len() < FIRST_PLACES {
            let Some(hit) = rest.peek() else { break };
            if hit.exact {
                first.extend(rest.next());
                continue;
            }
            // Scores fall from here on: once one is too far below the fifth, all are.
            if !waiting.is_empty() && fifth - hit.score > ROOM_MARGIN {
                break;
            }
            if self.server_of.get(hit.index) != Some(&most) {
                first.extend(rest.next());
            } else if held < ONE_SERVER_AT_MOST {
                held += 1;
                first.extend(rest.next());
            } else {
                waiting.extend(rest.next());
            }
        }
        first.extend(waiting);
        first.extend(rest);
        first
    }
}

/// Each value as standard deviations from the values' mean.
pub(crate) fn z_scores(values: &[f64]) -> Vec<f64> {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let deviation = (values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n).sqrt();
    values
        .iter()
        .map(|v| (v - mean) / (deviation + 1e-9))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    fn tool(server: &str, name: &str, parameters: &[&str]) -> QualifiedTool {
        let properties: serde_json::Map<String, serde_json::Value> = parameters
            .iter()
            .map(|p| (p.to_string(), json!({"type": "string"})))
            .collect();
        QualifiedTool {
            qualified_name: format!("{server}__{name}"),
            server: server.into(),
            tool: serde_json::from_value(json!({
                "name": name,
                "inputSchema": {"type": "object", "properties": properties}
            }))
            .unwrap(),
        }
    }

    #[test]
    fn parameters_say_what_a_tool_takes() {
        let read = tool("files", "read", &["path", "encoding"]);
        let fetch = tool("web", "fetch", &["url", "maxLength"]);
        let add = tool("math", "add", &["a", "b"]);
        let convert = tool("time", "convert_time", &["source_timezone", "time"]);
        assert_eq!(kinds_taken(&convert), vec![ValueKind::Clock]);
        assert_eq!(kinds_taken(&read), vec![ValueKind::Path]);
        assert_eq!(kinds_taken(&fetch), vec![ValueKind::Url]);
        assert!(kinds_taken(&add).is_empty());
    }

    #[test]
    fn the_closest_server_and_the_named_kind_lift_their_tools() {
        let tools = vec![
            tool("files", "read", &["path"]),
            tool("files", "write", &["path", "content"]),
            tool("web", "fetch", &["url"]),
            tool("math", "add", &["a", "b"]),
            tool("math", "subtract", &["a", "b"]),
        ];
        let unit = |v: [f32; 3]| -> Arc<[f32]> {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter().map(|x| x / n).collect::<Vec<_>>().into()
        };
        let vectors = vec![
            unit([1.0, 0.0, 0.0]),
            unit([1.0, 0.2, 0.0]),
            unit([0.0, 1.0, 0.0]),
            unit([0.0, 0.0, 1.0]),
            unit([0.0, 0.2, 1.0]),
        ];
        let routing = Routing::new(&tools, &vectors);
        // A query close to the files server's tools.
        let dense = [0.9, 0.8, 0.1, 0.0, 0.05];
        let nudges = routing.nudges("open it", &dense);
        assert!(nudges[0] > 0.0 && nudges[1] > 0.0, "{nudges:?}");
        assert!(nudges[3] < 0.0 && nudges[2] < nudges[0], "{nudges:?}");
        // Naming a file lifts the tools taking a path by the kind's bonus alone.
        let named = routing.nudges("open notes.txt", &dense);
        assert!((named[0] - nudges[0] - KIND_BONUS).abs() < 1e-9);
        assert!((named[3] - nudges[3]).abs() < 1e-9);
        // A server the query names lifts its tools by the bonus, whatever their closeness.
        let said = routing.nudges("open it with math", &dense);
        assert!((said[3] - nudges[3] - SERVER_NAMED_BONUS).abs() < 1e-9);
        assert!((said[0] - nudges[0]).abs() < 1e-9);
        // Two servers say nothing about which is closer.
        let two = Routing::new(&tools[..3], &vectors[..3]);
        assert_eq!(two.nudges("open it", &dense[..3]), vec![0.0; 3]);
    }

    #[test]
    fn a_server_named_for_a_pronoun_is_named_only_as_a_name() {
        let words = |q: &str| words_of(q);
        let everything = vec!["everything".to_string()];
        assert!(!names_server(
            &words("forget everything you know about X"),
            &everything
        ));
        assert!(!names_server(&words("is everything fine?"), &everything));
        assert!(names_server(
            &words("ask the everything server to echo hi"),
            &everything
        ));
        assert!(names_server(&words("use everything's echo"), &everything));
        assert!(names_server(
            &words("everything server env vars"),
            &everything
        ));
        // Other names count wherever they are said.
        let memory = vec!["memory".to_string()];
        assert!(names_server(
            &words("note in memory that Bob left"),
            &memory
        ));
    }

    fn hit(index: usize, score: f64) -> Hit {
        Hit {
            index,
            score,
            exact: false,
        }
    }

    fn order(hits: &[Hit]) -> Vec<usize> {
        hits.iter().map(|h| h.index).collect()
    }

    #[test]
    fn a_server_holding_most_tools_makes_room_for_another_close_behind() {
        // Tools 0–6 on a big server, 7 on `memory`, 8 on `time`.
        let mut tools: Vec<QualifiedTool> =
            (0..7).map(|i| tool("big", &format!("t{i}"), &[])).collect();
        tools.push(tool("memory", "create_entities", &[]));
        tools.push(tool("time", "get_current_time", &[]));
        let routing = Routing::new::<Vec<f32>>(&tools, &[]);
        // The big server's first five, best first, then what `tail` adds.
        let big: [(usize, f64); 5] = [(0, 10.0), (1, 9.0), (2, 8.0), (3, 7.5), (4, 7.0)];
        let ranked = |tail: &[(usize, f64)]| -> Vec<Hit> {
            big.iter().chain(tail).map(|(i, s)| hit(*i, *s)).collect()
        };
        // Memory's tool scores within the margin of the fifth: it takes the fourth place, the
        // big server's fourth and fifth follow it, and the rest keeps its order.
        let close = ranked(&[(7, 5.0), (5, 1.0)]);
        assert_eq!(order(&routing.make_room(close)), vec![0, 1, 2, 7, 3, 4, 5]);
        // Both other servers close: both places are theirs.
        let both = ranked(&[(7, 5.0), (8, 4.5)]);
        assert_eq!(order(&routing.make_room(both)), vec![0, 1, 2, 7, 8, 3, 4]);
        // Too far below the fifth: the big server keeps its places.
        let far = ranked(&[(7, 3.9)]);
        assert_eq!(order(&routing.make_room(far.clone())), order(&far));
        // An exact hit keeps its place and takes none of the big server's three.
        let mut exact = vec![hit(8, 11.0)];
        exact[0].exact = true;
        exact.extend(ranked(&[(7, 6.5)]));
        assert_eq!(order(&routing.make_room(exact)), vec![8, 0, 1, 2, 7, 3, 4]);
        // Fewer than five hits: nothing to make room in.
        let few: Vec<Hit> = [(0, 10.0), (1, 9.0), (7, 1.0)]
            .iter()
            .map(|(i, s)| hit(*i, *s))
            .collect();
        assert_eq!(order(&routing.make_room(few.clone())), order(&few));
    }

    #[test]
    fn small_servers_keep_the_places_they_earn() {
        // No server holds more than half of the tools: four of one server's stay first.
        let tools = vec![
            tool("files", "read", &[]),
            tool("files", "write", &[]),
            tool("files", "list", &[]),
            tool("files", "move", &[]),
            tool("web", "fetch", &[]),
            tool("math", "add", &[]),
            tool("math", "subtract", &[]),
            tool("time", "now", &[]),
        ];
        let routing = Routing::new::<Vec<f32>>(&tools, &[]);
        let hits: Vec<Hit> = [(0, 9.0), (1, 8.0), (2, 7.0), (3, 6.0), (4, 5.9), (5, 5.0)]
            .iter()
            .map(|(i, s)| hit(*i, *s))
            .collect();
        assert_eq!(order(&routing.make_room(hits.clone())), order(&hits));
    }
}
