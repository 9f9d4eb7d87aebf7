//! The values a query names (a file's name or path, a web address, a time of day), told
//! apart from its words: they are arguments, not topics. "What's in my notes.txt?" asks about a file, not
//! about notes; "budget.xlsx" is no budget tool's business. The word ranking leaves them out
//! and counts their kind's words lightly; the meaning ranking reads them with their kind; the
//! routing favours tools that take their kind.

/// Kinds of value a query can name and a parameter can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueKind {
    /// A file or directory: `notes.txt`, `src/main.rs`, `~/Documents`.
    Path,
    /// A web address: `https://example.com`, `example.org/page`.
    Url,
    /// A time of day: `10am`, `3:30pm`, `14:30`.
    Clock,
    /// An email address: `bob@example.com`.
    Email,
}

/// Top-level domains that make `name.tld` an address rather than a file.
const DOMAINS: &[&str] = &[
    "com", "org", "net", "io", "dev", "ai", "edu", "gov", "co", "uk", "de", "fr", "app",
];

/// The kinds of value `query` names.
pub(crate) fn kinds_named(query: &str) -> Vec<ValueKind> {
    let mut kinds = Vec::new();
    for (kind, _) in query.split_whitespace().filter_map(value_of) {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

/// `query` with each value it names (a file's name, a web address) replaced by words for its
/// kind ("txt file", "png image file", "web page url"): "what's in my notes.txt?" asks about a file, not about notes, and "budget.xlsx" is
/// no budget tool's business. The query's own text when it names none.
pub(crate) fn values_as_kinds(query: &str) -> std::borrow::Cow<'_, str> {
    if !query.split_whitespace().any(|t| value_of(t).is_some()) {
        return std::borrow::Cow::Borrowed(query);
    }
    let words: Vec<String> = query
        .split_whitespace()
        .map(|token| {
            value_of(token).map_or_else(
                || token.to_string(),
                |(_, words)| format!("{token} {words}"),
            )
        })
        .collect();
    std::borrow::Cow::Owned(words.join(" "))
}

/// `query` without the values it names, for the word ranking: "file" written in would weigh
/// most for the tool with "file" in its name (`get_file_info` for "what's in notes.txt?"); the
/// kind reaches the ranking as [`Routing::nudges`]' bonus and in the meaning of
/// [`values_as_kinds`].
pub(crate) fn without_values(query: &str) -> std::borrow::Cow<'_, str> {
    if !query.split_whitespace().any(|t| value_of(t).is_some()) {
        return std::borrow::Cow::Borrowed(query);
    }
    let words: Vec<&str> = query
        .split_whitespace()
        .filter(|token| value_of(token).is_none())
        .collect();
    std::borrow::Cow::Owned(words.join(" "))
}

/// Each whitespace-separated token of `query` lower-cased without the punctuation around it,
/// one per token, so a word's index is its token's.
pub(crate) fn token_words(query: &str) -> Vec<String> {
    query
        .split_whitespace()
        .map(|t| {
            t.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .collect()
}

/// `query` with " (an edit of the file)" after it when it names a file and asks to change,
/// replace or fix something in it: "in settings.toml change port = 8080 to port = 9090",
/// "replace foo with bar in main.py". People say what the new text is; the tool that does
/// it says "edits" and "line sequences", which no such request writes. Not when it renames or
/// moves the file, or writes, saves or creates one; the query's own text otherwise.
pub(crate) fn file_edits_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    let words = token_words(query);
    let said = |verbs: &[&str]| words.iter().any(|w| verbs.contains(&w.as_str()));
    let editing = said(&[
        "change",
        "replace",
        "swap",
        "fix",
        "correct",
        "substitute",
        "modify",
        "tweak",
    ]);
    let elsewhere = said(&[
        "rename", "name", "move", "write", "save", "create", "new", "copy",
    ]);
    if editing && !elsewhere && kinds_named(query).contains(&ValueKind::Path) {
        std::borrow::Cow::Owned(format!("{query} (an edit of the file)"))
    } else {
        std::borrow::Cow::Borrowed(query)
    }
}

/// `query` with the kind of SQL statement it asks for said outright when it works on the rows
/// of a table it names ("from the sales table", "to the customers table"), on rows it calls
/// rows ("the rows with status cancelled", "a new row"), asks for data from a database it
/// names ("from the sales db"), or asks how many of something a database holds: " (an INSERT
/// query)" after adding, " (a DELETE query)" after deleting or removing, " (an UPDATE query)"
/// after changing, and " (a SELECT query)" otherwise. People name the table and the rows;
/// database tools name the statements, and without them the tools with "table" in their name
/// (create, list, describe) rank above the one that runs the statement. A table named only to
/// be described ("the columns of the orders table") or listed is left as it is, as is any
/// query that names no table.
pub(crate) fn table_rows_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    let words = token_words(query);
    let rows_of_a_table = words.iter().enumerate().any(|(t, word)| {
        word == "table"
            && t >= 3
            && matches!(
                words[t - 2].as_str(),
                "the" | "my" | "our" | "this" | "that"
            )
            && matches!(words[t - 3].as_str(), "from" | "to" | "in" | "into")
    });
    // Data asked "from the sales db": the rows of a table the person names by its database.
    let from_a_database = words.iter().enumerate().any(|(t, word)| {
        matches!(word.as_str(), "db" | "database")
            && t >= 3
            && matches!(words[t - 2].as_str(), "the" | "my" | "our")
            && words[t - 3] == "from"
    });
    let rows_of_a_table = rows_of_a_table || from_a_database;
    let said = |verbs: &[&str]| words.iter().any(|w| verbs.contains(&w.as_str()));
    let counting = words
        .windows(2)
        .any(|pair| pair[0] == "how" && pair[1] == "many");
    // Rows named as rows ("the rows with status cancelled", "a new row"), and a count asked
    // of a database, work on a table's rows as much as a table named by its name does.
    let rows_of_a_table =
        rows_of_a_table || said(&["row", "rows"]) || (counting && said(&["database", "db"]));
    if !rows_of_a_table {
        return std::borrow::Cow::Borrowed(query);
    }
    let statement = if said(&["add", "insert", "put", "append"]) {
        "an INSERT"
    } else if said(&["delete", "remove", "erase", "wipe"]) {
        "a DELETE"
    } else if said(&[
        "update", "change", "set", "bump", "raise", "increase", "lower", "decrease", "rename",
        "edit", "correct", "fix",
    ]) {
        "an UPDATE"
    } else {
        "a SELECT"
    };
    std::borrow::Cow::Owned(format!("{query} ({statement} query)"))
}

/// `query` with "look for" and "look up" (in any tense) as "search for": a person looks for what
/// tools search and find, while "look" alone, or "look at", asks to see something
/// (`EVERYDAY_WORDS` reads it as read); and "what's written in …" as "what's read in …"
/// ([`written_as_read`]). The query's own text when it has no such phrase.
pub(crate) fn phrasal_verbs_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    match written_as_read(query) {
        std::borrow::Cow::Borrowed(query) => looking_as_search(query),
        std::borrow::Cow::Owned(read) => {
            std::borrow::Cow::Owned(looking_as_search(&read).into_owned())
        }
    }
}

/// `query` with "written" read as "read" where it asks what a thing holds: "what's written
/// in CHANGELOG.md", "what is written on the label". The asker wants the contents read; the
/// word "written" ranked the tools that write. The query's own text otherwise.
fn written_as_read(query: &str) -> std::borrow::Cow<'_, str> {
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let words = token_words(query);
    let asked = |at: usize| {
        words[at.saturating_sub(3)..at]
            .iter()
            .any(|w| matches!(w.as_str(), "what" | "what's" | "whats"))
    };
    let Some(at) = words.iter().enumerate().position(|(i, w)| {
        w == "written"
            && asked(i)
            && words
                .get(i + 1)
                .is_some_and(|n| matches!(n.as_str(), "in" | "on" | "inside"))
    }) else {
        return std::borrow::Cow::Borrowed(query);
    };
    let out: Vec<&str> = tokens
        .iter()
        .enumerate()
        .map(|(i, token)| if i == at { "read" } else { token })
        .collect();
    std::borrow::Cow::Owned(out.join(" "))
}

/// `query` with "look for" and "look up" as "search for" ([`phrasal_verbs_as_words`]).
fn looking_as_search(query: &str) -> std::borrow::Cow<'_, str> {
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let looking = |token: &str| {
        matches!(
            token.to_lowercase().as_str(),
            "look" | "looks" | "looking" | "looked"
        )
    };
    let particle = |token: &str| {
        let word = token.trim_end_matches(|c: char| !c.is_alphanumeric());
        word.eq_ignore_ascii_case("for") || word.eq_ignore_ascii_case("up")
    };
    if !tokens
        .windows(2)
        .any(|pair| looking(pair[0]) && particle(pair[1]))
    {
        return std::borrow::Cow::Borrowed(query);
    }
    let out: Vec<&str> = tokens
        .iter()
        .enumerate()
        .map(|(i, token)| {
            if looking(token) && tokens.get(i + 1).is_some_and(|next| particle(next)) {
                "search"
            } else {
                token
            }
        })
        .collect();
    std::borrow::Cow::Owned(out.join(" "))
}

/// The words for the kinds of value `query` names ("txt file", "web page url"), each once.
pub(crate) fn kind_words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for (_, said) in query.split_whitespace().filter_map(value_of) {
        if !words.contains(&said) {
            words.push(said);
        }
    }
    words
}

/// The kind of value `token` is, and the words that stand for it in a search, if it is one.
fn value_of(token: &str) -> Option<(ValueKind, String)> {
    let token = token.trim_matches(|c: char| {
        matches!(
            c,
            '"' | '\'' | '`' | '(' | ')' | ',' | ';' | ':' | '?' | '!' | '<' | '>'
        )
    });
    let token = token.trim_end_matches('.');
    if is_clock_time(token) {
        return Some((ValueKind::Clock, "time".into()));
    }
    // `bob@example.com` ends like a web address and is none: read as one, it ranked a URL
    // tool first for "change Bob's email to bob@example.com in the users table".
    if let Some((user, domain)) = token.split_once('@')
        && !user.is_empty()
        && !user.contains("://")
        && domain.contains('.')
        && domain
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
    {
        return Some((ValueKind::Email, "email address".into()));
    }
    if token.contains("://") || token.starts_with("www.") {
        return Some((ValueKind::Url, "web page url".into()));
    }
    if let Some((stem, extension)) = token.rsplit_once('.') {
        let stem = stem.rsplit('/').next().unwrap_or(stem);
        let plausible = !stem.is_empty()
            && (1..=5).contains(&extension.len())
            && extension.chars().all(|c| c.is_ascii_alphanumeric())
            && extension.chars().any(|c| c.is_ascii_alphabetic())
            && !stem.chars().all(|c| c.is_ascii_digit() || c == '.');
        if !plausible {
            return None;
        }
        let extension = extension.to_ascii_lowercase();
        if DOMAINS.contains(&extension.as_str()) {
            return Some((ValueKind::Url, "web page url".into()));
        }
        return Some((
            ValueKind::Path,
            format!("{extension} {}", file_words(&extension)),
        ));
    }
    let path = token.len() > 1
        && (token.starts_with('/') || token.starts_with("~/") || token.starts_with("./"));
    match (path, token.ends_with('/')) {
        (true, true) => Some((ValueKind::Path, "directory".into())),
        (true, false) => Some((ValueKind::Path, "file".into())),
        _ => None,
    }
}

/// Whether `token` is a time of day: an hour with `am` or `pm` (`10am`, `3:30pm`) or hours and
/// minutes (`14:30`, `9:05`).
fn is_clock_time(token: &str) -> bool {
    let lower = token.to_ascii_lowercase();
    let (clock, meridiem) = match lower.strip_suffix("am").or(lower.strip_suffix("pm")) {
        Some(clock) => (clock, true),
        None => (lower.as_str(), false),
    };
    let (hours, minutes) = match clock.split_once(':') {
        Some((hours, minutes)) => (hours, Some(minutes)),
        None => (clock, None),
    };
    let digits = |s: &str, len: std::ops::RangeInclusive<usize>| {
        len.contains(&s.len()) && s.chars().all(|c| c.is_ascii_digit())
    };
    digits(hours, 1..=2)
        && match minutes {
            Some(minutes) => digits(minutes, 2..=2),
            None => meridiem,
        }
}

/// Words for a file by its extension: what it holds where the extension says (an image, a
/// sound), else a file.
fn file_words(extension: &str) -> &'static str {
    match extension {
        "png" | "jpg" | "jpeg" | "gif" | "webp" | "bmp" | "svg" | "tiff" | "heic" => "image file",
        "mp3" | "wav" | "ogg" | "flac" | "m4a" => "audio file",
        "mp4" | "mov" | "avi" | "mkv" | "webm" => "video file",
        _ => "file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_in_a_thing_asks_to_read_it() {
        assert_eq!(
            phrasal_verbs_as_words("can you check what's written in CHANGELOG.md?"),
            "can you check what's read in CHANGELOG.md?"
        );
        assert_eq!(
            phrasal_verbs_as_words("what is written on the label"),
            "what is read on the label"
        );
        for plain in [
            "a poem written in 1850",
            "who has written in the guest book",
        ] {
            assert_eq!(phrasal_verbs_as_words(plain), plain);
        }
    }

    #[test]
    fn file_names_and_addresses_are_values_and_numbers_are_not() {
        assert_eq!(
            values_as_kinds("what's in my notes.txt?"),
            "what's in my notes.txt? txt file"
        );
        assert_eq!(without_values("what's in my notes.txt?"), "what's in my");
        assert_eq!(
            values_as_kinds("look at \"photo.PNG\" and ~/docs/"),
            "look at \"photo.PNG\" png image file and ~/docs/ directory"
        );
        assert_eq!(
            without_values("fetch https://example.org/a.html or example.com."),
            "fetch or"
        );
        assert_eq!(
            values_as_kinds("open example.com"),
            "open example.com web page url"
        );
        for plain in ["what is 3.14 times 2.5?", "add 2 and 2. Then stop"] {
            assert_eq!(values_as_kinds(plain), plain);
            assert_eq!(without_values(plain), plain);
        }
        assert_eq!(kinds_named("read src/main.rs"), vec![ValueKind::Path]);
        assert!(kinds_named("version 1.2.3 of it").is_empty());
    }

    #[test]
    fn an_email_address_is_a_value_and_no_web_address() {
        assert_eq!(
            values_as_kinds("change Bob's email to bob@example.com in the users table"),
            "change Bob's email to bob@example.com email address in the users table"
        );
        assert_eq!(
            kinds_named("mail ann.lee@mail.example.org."),
            vec![ValueKind::Email]
        );
        assert_eq!(
            without_values("write to bob@example.com, please"),
            "write to please"
        );
        // An address's user part is no email.
        assert_eq!(
            kinds_named("fetch https://user@example.com/page"),
            vec![ValueKind::Url]
        );
        assert!(kinds_named("ping @alice about it").is_empty());
        // A git remote over SSH names a host and a repository, not a mailbox.
        assert!(!kinds_named("clone git@github.com:org/repo.git").contains(&ValueKind::Email));
        assert!(!kinds_named("a@b@example.com").contains(&ValueKind::Email));
    }

    #[test]
    fn a_time_of_day_is_a_value_and_a_bare_number_is_not() {
        assert_eq!(
            values_as_kinds("my meeting is at 10am in Berlin"),
            "my meeting is at 10am time in Berlin"
        );
        assert_eq!(without_values("convert 14:30, or 3:05PM."), "convert or");
        assert_eq!(kinds_named("at 9:00"), vec![ValueKind::Clock]);
        for plain in [
            "at 10 in Berlin",
            "ratio 3:2:1",
            "a 123am code",
            "exam",
            "1:5",
        ] {
            assert!(kinds_named(plain).is_empty(), "{plain}");
        }
    }

    #[test]
    fn a_change_in_a_named_file_is_an_edit() {
        assert_eq!(
            file_edits_as_words("in settings.toml change port = 8080 to port = 9090"),
            "in settings.toml change port = 8080 to port = 9090 (an edit of the file)"
        );
        assert!(file_edits_as_words("replace foo with bar in main.py").ends_with("file)"));
        for plain in [
            "change the name of a.txt to b.txt",
            "change the port to 9090",
            "fix the flaky test",
            "save the fixed list to notes.txt",
        ] {
            assert_eq!(file_edits_as_words(plain), plain);
        }
    }

    #[test]
    fn the_rows_of_a_named_table_ask_for_a_statement() {
        assert_eq!(
            table_rows_as_words("delete customer 17 from the customers table"),
            "delete customer 17 from the customers table (a DELETE query)"
        );
        assert_eq!(
            table_rows_as_words("add a customer named Ana to the customers table"),
            "add a customer named Ana to the customers table (an INSERT query)"
        );
        assert_eq!(
            table_rows_as_words("bump every price by 10% in the products table"),
            "bump every price by 10% in the products table (an UPDATE query)"
        );
        assert_eq!(
            table_rows_as_words("top 5 products by revenue from the sales table"),
            "top 5 products by revenue from the sales table (a SELECT query)"
        );
        assert_eq!(
            table_rows_as_words("wipe the rows with status cancelled out of orders"),
            "wipe the rows with status cancelled out of orders (a DELETE query)"
        );
        assert_eq!(
            table_rows_as_words("top 10 customers by revenue from the sales db"),
            "top 10 customers by revenue from the sales db (a SELECT query)"
        );
        assert_eq!(
            table_rows_as_words("How many customers signed up in 2023? (database)"),
            "How many customers signed up in 2023? (database) (a SELECT query)"
        );
        for plain in [
            "how many tables are there",
            "back up the database",
            "what's the structure of the orders table",
            "list every table in the database",
            "make a table called invoices",
            "put the lamp on the table",
        ] {
            assert_eq!(table_rows_as_words(plain), plain);
        }
    }

    #[test]
    fn looking_for_something_is_searching_and_looking_at_it_is_not() {
        assert_eq!(
            phrasal_verbs_as_words("look for any file named budget"),
            "search for any file named budget"
        );
        assert_eq!(
            phrasal_verbs_as_words("Looking up the word 'teh'"),
            "search up the word 'teh'"
        );
        assert_eq!(
            phrasal_verbs_as_words("I looked for it, up."),
            "I search for it, up."
        );
        for plain in [
            "look at notes.txt",
            "have a look",
            "look inside src",
            "up for it",
        ] {
            assert_eq!(phrasal_verbs_as_words(plain), plain);
        }
    }
}
