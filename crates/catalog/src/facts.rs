//! The facts a request carries, told apart from what it asks done with them. "Jot down that
//! Carol's birthday is May 3rd" asks to store a fact; the birthday and the date are the
//! fact's words, which would rank calendars and clocks, as a file's name would rank tools
//! about its topic (`values`). So a clause reported after a verb of keeping or forgetting
//! ("remember that …", "the fact that …", "…, record that") reaches the rankings as "a fact".

use std::borrow::Cow;

/// Verbs whose "that" opens the fact they keep or drop. Verbs of checking ("check that",
/// "make sure that") are left out: what they check is what the tool needs to know.
const KEEPING: &[&str] = &[
    "remember", "memorize", "memorise", "note", "jot", "record", "store", "save", "log", "learn",
    "forget", "keep", "fact",
];

/// Words that may stand between the verb and its "that" ("jot down that", "keep in mind that").
const PARTICLES: &[&str] = &["down", "up", "in", "mind"];

/// Words that open a clause after "that", where "that" is not a demonstrative ("forget that
/// file" names a file).
const CLAUSE_OPENERS: &[&str] = &[
    "the", "a", "an", "my", "our", "your", "his", "her", "their", "its", "i", "we", "you", "he",
    "she", "it", "they", "there", "this", "these", "those", "someone", "everyone", "nobody",
];

/// `query` with each fact it reports replaced by "a fact" ("jot down a fact"; "…, record that"
/// as "record a fact"); the query's own text when it reports none.
pub(crate) fn facts_as_kind(query: &str) -> Cow<'_, str> {
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(tokens.len());
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i];
        if token.ends_with(':')
            && keeping_in_sentence(&tokens, i)
            && tokens.get(i + 1).is_some_and(|next| {
                // Whatever word follows, unless the colon ends a preposition or what follows is
                // a file or a path ("save to: notes.txt" names where, not what).
                opens_clause(next)
                    || !(next.contains(['.', '/'])
                        || matches!(
                            bare(token).as_str(),
                            "to" | "into" | "in" | "as" | "at" | "from"
                        ))
            })
        {
            // "Note: Tom reports to Julia", "note this insight: weekend sales double": after a
            // verb of keeping, a colon opens the fact, to the sentence's end, whatever its
            // first word (a "that" must open a clause, since "that" also points at a thing).
            let mut end = i + 1;
            while end < tokens.len() && !ends_sentence(tokens[end - 1]) {
                end += 1;
            }
            out.push(token.to_string());
            out.push("a".into());
            out.push(
                if ends_sentence(tokens[end - 1]) {
                    "fact."
                } else {
                    "fact"
                }
                .into(),
            );
            changed = true;
            i = end;
            continue;
        }
        if bare(token) == "that" && keeping_before(&tokens, i) {
            // "keep that in mind.", "jot that down": particles may close the sentence.
            let mut end = i + 1;
            while end < tokens.len()
                && !ends_sentence(tokens[end - 1])
                && PARTICLES.contains(&bare(tokens[end]).as_str())
            {
                end += 1;
            }
            let closes = ends_sentence(tokens[end - 1]) || end == tokens.len();
            // "…, record that": the fact is the clause before the verb; "Tom is a dentist.
            // Please keep that in mind.": the sentence before, when nothing but asking comes
            // before the verb (only while nothing was changed yet, so `out` is the tokens so
            // far).
            // Particles close it only after a sentence of its own: "Alice works with Carol,
            // note that down" kept its words, which name a relation, and was found by them.
            let before = if end > i + 1 {
                None
            } else {
                fact_before(&tokens, i).map(|start| (start, verb_at(&tokens, i)))
            }
            .or_else(|| (!changed).then(|| sentence_before(&tokens, i)).flatten());
            if let (true, Some((start, keep_from))) = (closes, before) {
                // The tokens from `start` are the last `i - start` of `out`: a change ends at
                // a sentence's end.
                out.truncate(out.len().saturating_sub(i - start));
                out.extend(tokens[keep_from..i].iter().map(|t| t.to_string()));
                out.push("a".into());
                if end > i + 1 {
                    out.push("fact".into());
                    out.extend(tokens[i + 1..end].iter().map(|t| t.to_string()));
                } else {
                    out.push(
                        if ends_sentence(token) {
                            "fact."
                        } else {
                            "fact"
                        }
                        .into(),
                    );
                }
                changed = true;
                i = end;
                continue;
            }
            // A closing "that" with no fact before it keeps the words as they are.
            if !closes && tokens.get(i + 1).is_some_and(|next| opens_clause(next)) {
                // "remember that the key is under the mat": the fact runs to the sentence's end.
                let mut end = i + 1;
                while end < tokens.len() && !ends_sentence(tokens[end - 1]) {
                    end += 1;
                }
                let stop = if ends_sentence(tokens[end - 1]) {
                    "."
                } else {
                    ""
                };
                if bare(tokens[i - 1]) == "fact" {
                    if let Some(last) = out.last_mut() {
                        last.push_str(stop);
                    }
                } else {
                    out.push("a".into());
                    out.push(format!("fact{stop}"));
                }
                changed = true;
                i = end;
                continue;
            }
        }
        out.push(token.to_string());
        i += 1;
    }
    if changed {
        Cow::Owned(out.join(" "))
    } else {
        Cow::Borrowed(query)
    }
}

/// Words that, a few words after "you", ask about what the assistant keeps: "what have you got
/// stored about my allergies?", "who do you have on file …", "update what you know about her".
const KEPT_BY_YOU: &[&str] = &[
    "stored",
    "recorded",
    "noted",
    "kept",
    "remember",
    "remembered",
    "recall",
    "memorized",
    "memorised",
];

/// `query` with " (what you remember)" after it when it asks about what the assistant keeps
/// ("what you know about her", "who do you have on file", "what have you got stored about
/// …", "who do you know that works in finance"): the person speaks of the assistant's memory,
/// and the words they use for it (know, file, stored) would rank knowledge bases, files and
/// storage. The query's own text otherwise, and when it names a file or an address, which is
/// where such a question looks.
pub(crate) fn kept_by_you_as_words(query: &str) -> Cow<'_, str> {
    let words: Vec<String> = query.split_whitespace().map(bare).collect();
    let about_you = words.iter().enumerate().any(|(i, word)| {
        if !matches!(word.as_str(), "you" | "you've" | "you'd") {
            return false;
        }
        let after = &words[i + 1..words.len().min(i + 5)];
        let knows_about = after
            .iter()
            .position(|w| w == "know" || w == "knows")
            .is_some_and(|at| after[at + 1..].iter().take(2).any(|w| w == "about"));
        let on_file = after
            .windows(2)
            .any(|pair| pair[0] == "on" && pair[1] == "file");
        // "Who do you know …", "anyone you know who …": people the assistant knows of.
        let before = &words[i.saturating_sub(2)..i];
        let knows_whom = after.first().is_some_and(|w| w == "know")
            && (before == ["who", "do"]
                || before.last().is_some_and(|w| {
                    matches!(w.as_str(), "anyone" | "anybody" | "someone" | "somebody")
                }));
        knows_about
            || on_file
            || knows_whom
            || after.iter().any(|w| KEPT_BY_YOU.contains(&w.as_str()))
    });
    if !about_you || !crate::values::kinds_named(query).is_empty() {
        return Cow::Borrowed(query);
    }
    // "On file" is the idiom for a record kept, not a file to open.
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let mut out: Vec<String> = Vec::with_capacity(tokens.len() + 3);
    for (i, token) in tokens.iter().enumerate() {
        if bare(token) == "file" && i > 0 && bare(tokens[i - 1]) == "on" {
            let word = token.trim_end_matches(|c: char| !c.is_alphanumeric());
            out.push(format!("record{}", &token[word.len()..]));
        } else {
            out.push((*token).to_string());
        }
    }
    Cow::Owned(format!("{} (what you remember)", out.join(" ")))
}

/// `query` with " (forget a fact)" after it when it says something is true no longer ("Tom
/// doesn't like cycling any more", "Dave is no longer Emma's boss", "they are not siblings after
/// all"): a retraction asks to drop what was kept, whatever its words are about. The query's
/// own text otherwise, and when it names a file or an address.
pub(crate) fn retracted_as_words(query: &str) -> Cow<'_, str> {
    let words: Vec<String> = query.split_whitespace().map(bare).collect();
    let pair = |a: &str, b: &str| words.windows(2).any(|w| w[0] == a && w[1] == b);
    // "any more" and "after all" retract only after a "not" ("is there any more coffee").
    let negated = words.iter().any(|w| w == "not" || w.ends_with("n't"));
    let retracts = pair("no", "longer")
        || (negated
            && (pair("any", "more")
                || pair("after", "all")
                || words.iter().any(|w| w == "anymore")));
    if retracts && crate::values::kinds_named(query).is_empty() {
        Cow::Owned(format!("{query} (forget a fact)"))
    } else {
        Cow::Borrowed(query)
    }
}

/// `token` lower-cased, without the punctuation around it.
fn bare(token: &str) -> String {
    token
        .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'')
        .to_lowercase()
}

fn ends_sentence(token: &str) -> bool {
    token.ends_with(['.', '!', '?', ';'])
}

/// Where the keeping verb before the "that" at `at` stands, past particles.
fn verb_at(tokens: &[&str], at: usize) -> usize {
    let mut j = at;
    while j > 0 && PARTICLES.contains(&bare(tokens[j - 1]).as_str()) && !keeping(tokens[j - 1]) {
        j -= 1;
    }
    j.saturating_sub(1)
}

fn keeping(token: &str) -> bool {
    let word = bare(token);
    KEEPING.iter().any(|verb| {
        word == *verb
            || word
                .strip_prefix(verb)
                .is_some_and(|rest| matches!(rest, "s" | "ed" | "d" | "ing"))
    })
}

/// Whether a verb of keeping (or "the fact") stands right before the "that" at `at`.
fn keeping_before(tokens: &[&str], at: usize) -> bool {
    at > 0 && {
        let verb = verb_at(tokens, at);
        keeping(tokens[verb]) && !ends_sentence(tokens[verb])
    }
}

/// Whether a verb of keeping stands in the sentence up to `at` ("Please remember: …", "log
/// this insight: …").
fn keeping_in_sentence(tokens: &[&str], at: usize) -> bool {
    let mut j = at + 1;
    while j > 0 {
        j -= 1;
        if j < at && ends_sentence(tokens[j]) {
            return false;
        }
        if bare(tokens[j]) != "fact" && keeping(tokens[j]) {
            return true;
        }
    }
    false
}

/// Where the clause a closing "that" points back to starts: the sentence's start, when a
/// comma parts it from the verb ("Carol and Dave are married, record that").
fn fact_before(tokens: &[&str], at: usize) -> Option<usize> {
    let verb = verb_at(tokens, at);
    let mut start = verb;
    while start > 0 && !ends_sentence(tokens[start - 1]) {
        start -= 1;
    }
    // "Please record that": nothing before the verb but asking.
    let before_verb = verb.checked_sub(1).map(|j| tokens[j])?;
    (before_verb.ends_with(',') && verb - start >= 2).then_some(start)
}

/// Words that may stand before a keeping verb in a sentence that only asks ("Please keep
/// that in mind", "Can you note that?").
const ASKING: &[&str] = &[
    "please", "can", "could", "would", "will", "you", "and", "so", "also",
];

/// Where the sentence before the one whose keeping verb precedes the "that" at `at` starts,
/// and where the verb's own sentence does, when that sentence holds nothing but asking before
/// the verb and the one before is a clause of two words or more.
fn sentence_before(tokens: &[&str], at: usize) -> Option<(usize, usize)> {
    let verb = verb_at(tokens, at);
    let mut own = verb;
    while own > 0 && !ends_sentence(tokens[own - 1]) {
        own -= 1;
    }
    if own == 0
        || !tokens[own..verb]
            .iter()
            .all(|t| ASKING.contains(&bare(t).as_str()))
    {
        return None;
    }
    let mut start = own - 1;
    while start > 0 && !ends_sentence(tokens[start - 1]) {
        start -= 1;
    }
    (own - start >= 2).then_some((start, own))
}

fn opens_clause(token: &str) -> bool {
    let word = bare(token);
    CLAUSE_OPENERS.contains(&word.as_str())
        || token.chars().next().is_some_and(char::is_uppercase)
        || token.chars().next().is_some_and(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_fact_is_read_as_a_fact() {
        assert_eq!(
            facts_as_kind("jot down that Carol's birthday is May 3rd"),
            "jot down a fact"
        );
        assert_eq!(
            facts_as_kind("forget that Carol likes jazz"),
            "forget a fact"
        );
        assert_eq!(
            facts_as_kind("Please store the fact that the wifi password is on the fridge. Thanks"),
            "Please store the fact. Thanks"
        );
        assert_eq!(
            facts_as_kind("Carol and Dave are married, record that"),
            "record a fact"
        );
        assert_eq!(
            facts_as_kind("Carol and Dave are married, record that. Then list all"),
            "record a fact. Then list all"
        );
        assert_eq!(
            facts_as_kind("Remember that I prefer tea."),
            "Remember a fact."
        );
        assert_eq!(
            facts_as_kind("Note: Tom reports to Julia. Thanks"),
            "Note: a fact. Thanks"
        );
        assert_eq!(
            facts_as_kind("please remember: my sister is called Julia"),
            "please remember: a fact"
        );
        assert_eq!(
            facts_as_kind("note this business insight: weekend sales are twice weekday sales"),
            "note this business insight: a fact"
        );
        assert_eq!(
            facts_as_kind("My brother Tom is a dentist. Please keep that in mind."),
            "Please keep a fact in mind."
        );
        assert_eq!(
            facts_as_kind("Bob likes tea. Remember that."),
            "Remember a fact."
        );
    }

    #[test]
    fn a_question_about_what_you_keep_is_about_memory() {
        assert_eq!(
            kept_by_you_as_words("who do you have on file that works at Google?"),
            "who do you have on record that works at Google? (what you remember)"
        );
        assert_eq!(
            kept_by_you_as_words("anyone you have on file?"),
            "anyone you have on record? (what you remember)"
        );
        for query in [
            "what have you got stored about my allergies?",
            "Carol moved to Berlin, update what you know about her",
            "do you know anything about Project Apollo?",
            "what do you remember about Bob",
            "who do you know that works in finance?",
            "is there anyone you know who speaks Dutch",
        ] {
            assert_eq!(
                kept_by_you_as_words(query),
                format!("{query} (what you remember)")
            );
        }
        for query in [
            "do you know what time it is in Tokyo",
            "can you list the files you stored in ~/notes/",
            "store this in a file",
            "you should know the weather",
            "who do you think will win",
        ] {
            assert_eq!(kept_by_you_as_words(query), query);
        }
    }

    #[test]
    fn a_fact_true_no_longer_asks_to_forget_it() {
        for query in [
            "Tom doesn't like cycling any more, update his profile",
            "Dave is no longer Emma's boss",
            "Anna and Mark are not siblings after all",
            "I don't live in Paris anymore",
        ] {
            assert_eq!(
                retracted_as_words(query),
                format!("{query} (forget a fact)")
            );
        }
        for query in [
            "is there any more coffee",
            "after all that, list the files",
            "notes.txt is no longer needed",
        ] {
            assert_eq!(retracted_as_words(query), query);
        }
    }

    #[test]
    fn a_demonstrative_that_or_another_verb_keeps_the_words() {
        for query in [
            "forget that file",
            "check that the server is up",
            "find the files that mention Carol",
            "Please record that",
            "Please record that in mind",
            "Alice works with Carol, note that down",
            "The build failed. Check that in the logs.",
            "delete that",
            "what is that",
            "Summary: the build failed",
            "save to: notes.txt",
        ] {
            assert_eq!(facts_as_kind(query), query);
        }
    }
}
