//! Markdown for the terminal, rendered as the answer streams: text is held until its line
//! is complete, then headings, lists, emphasis, inline code and links are styled, and fenced
//! code blocks are framed and highlighted line by line. Without colour (`NO_COLOR`) the same
//! layout is printed with no escape codes.

const BOLD: &str = "\x1b[1m";
const DIM: &str = "\x1b[2m";
const RESET: &str = "\x1b[0m";
const CYAN: &str = "\x1b[36m";
const GREEN: &str = "\x1b[32m";
const MAGENTA: &str = "\x1b[35m";
const YELLOW: &str = "\x1b[33m";

/// Words highlighted as keywords in code blocks, across the common languages.
const KEYWORDS: &[&str] = &[
    "fn",
    "let",
    "mut",
    "pub",
    "struct",
    "enum",
    "impl",
    "use",
    "mod",
    "match",
    "if",
    "else",
    "for",
    "while",
    "loop",
    "return",
    "async",
    "await",
    "const",
    "static",
    "trait",
    "where",
    "def",
    "class",
    "import",
    "from",
    "as",
    "in",
    "not",
    "and",
    "or",
    "with",
    "try",
    "except",
    "function",
    "var",
    "new",
    "this",
    "self",
    "true",
    "false",
    "None",
    "null",
    "True",
    "False",
    "break",
    "continue",
    "yield",
    "lambda",
    "type",
    "interface",
    "export",
    "package",
    "func",
];

/// Incremental renderer: feed it text deltas, print what it returns.
#[derive(Debug)]
pub struct MarkdownStream {
    pending: String,
    /// Inside a fenced code block.
    in_code: bool,
    color: bool,
}

impl MarkdownStream {
    /// A renderer that styles with ANSI codes when `color` is set.
    pub fn new(color: bool) -> MarkdownStream {
        MarkdownStream {
            pending: String::new(),
            in_code: false,
            color,
        }
    }

    /// Whether it styles with colour (errors next to it should too).
    pub fn colored(&self) -> bool {
        self.color
    }

    /// Adds streamed text; returns the rendering of every line it completed.
    pub fn push(&mut self, text: &str) -> String {
        self.pending.push_str(text);
        let mut out = String::new();
        while let Some(end) = self.pending.find('\n') {
            let line: String = self.pending.drain(..=end).collect();
            out.push_str(&self.line(line.trim_end_matches('\n')));
            out.push('\n');
        }
        out
    }

    /// Renders what is left (a last line without a newline) and closes an open code block.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        if !self.pending.is_empty() {
            let line = std::mem::take(&mut self.pending);
            out.push_str(&self.line(&line));
            out.push('\n');
        }
        if self.in_code {
            self.in_code = false;
            out.push_str(&self.paint(DIM, "  ╰─"));
            out.push('\n');
        }
        out
    }

    fn paint(&self, style: &str, text: &str) -> String {
        if self.color {
            format!("{style}{text}{RESET}")
        } else {
            text.to_string()
        }
    }

    fn line(&mut self, line: &str) -> String {
        let trimmed = line.trim_start();
        if let Some(language) = trimmed.strip_prefix("```") {
            self.in_code = !self.in_code;
            return if self.in_code {
                self.paint(DIM, &format!("  ╭─ {}", language.trim()))
            } else {
                self.paint(DIM, "  ╰─")
            };
        }
        if self.in_code {
            return format!("{} {}", self.paint(DIM, "  │"), self.code(line));
        }
        let level = trimmed.chars().take_while(|c| *c == '#').count();
        if (1..=6).contains(&level) && trimmed[level..].starts_with(' ') {
            let title = self.inline(trimmed[level..].trim());
            return self.paint(BOLD, &title);
        }
        let indent = &line[..line.len() - trimmed.len()];
        for bullet in ["- ", "* ", "+ "] {
            if let Some(item) = trimmed.strip_prefix(bullet) {
                return format!("{indent}• {}", self.inline(item));
            }
        }
        if let Some(quote) = trimmed.strip_prefix("> ") {
            return format!(
                "{indent}{}",
                self.paint(DIM, &format!("│ {}", self.inline(quote)))
            );
        }
        format!("{indent}{}", self.inline(trimmed))
    }

    /// `**bold**`, `` `code` `` and `[text](url)` within a line.
    fn inline(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("**")
                && let Some(end) = after.find("**")
            {
                out.push_str(&self.paint(BOLD, &after[..end]));
                rest = &after[end + 2..];
            } else if let Some(after) = rest.strip_prefix('`')
                && let Some(end) = after.find('`')
            {
                out.push_str(&self.paint(CYAN, &after[..end]));
                rest = &after[end + 1..];
            } else if let Some(after) = rest.strip_prefix('[')
                && let Some(close) = after.find("](")
                && let Some(end) = after[close + 2..].find(')')
            {
                let label = &after[..close];
                let url = &after[close + 2..close + 2 + end];
                out.push_str(&format!("{label} ({})", self.paint(DIM, url)));
                rest = &after[close + 3 + end..];
            } else {
                let mut chars = rest.chars();
                if let Some(c) = chars.next() {
                    out.push(c);
                }
                rest = chars.as_str();
            }
        }
        out
    }

    /// A code line with strings, numbers, comments and keywords highlighted.
    fn code(&self, line: &str) -> String {
        if !self.color {
            return line.to_string();
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") || trimmed.starts_with('#') || trimmed.starts_with("--") {
            return self.paint(DIM, line);
        }
        let mut out = String::new();
        let mut word = String::new();
        let mut chars = line.chars().peekable();
        let flush = |word: &mut String, out: &mut String| {
            if word.is_empty() {
                return;
            }
            if KEYWORDS.contains(&word.as_str()) {
                out.push_str(&format!("{MAGENTA}{word}{RESET}"));
            } else if word.chars().next().is_some_and(|c| c.is_ascii_digit()) {
                out.push_str(&format!("{YELLOW}{word}{RESET}"));
            } else {
                out.push_str(word);
            }
            word.clear();
        };
        while let Some(c) = chars.next() {
            if c == '"' || c == '\'' {
                flush(&mut word, &mut out);
                let mut literal = String::from(c);
                for next in chars.by_ref() {
                    literal.push(next);
                    if next == c {
                        break;
                    }
                }
                out.push_str(&format!("{GREEN}{literal}{RESET}"));
            } else if c.is_alphanumeric() || c == '_' || (c == '.' && !word.is_empty()) {
                word.push(c);
            } else {
                flush(&mut word, &mut out);
                out.push(c);
            }
        }
        flush(&mut word, &mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_render_once_their_line_is_complete() {
        let mut md = MarkdownStream::new(false);
        assert_eq!(md.push("# Ti"), "");
        assert_eq!(md.push("tle\nSome **bold** and `code`"), "Title\n");
        assert_eq!(
            md.push(".\n- one\n```rust\nlet x = 1;\n"),
            "Some bold and code.\n• one\n  ╭─ rust\n  │ let x = 1;\n"
        );
        assert_eq!(md.finish(), "  ╰─\n");
    }

    #[test]
    fn colour_styles_and_highlights() {
        let mut md = MarkdownStream::new(true);
        let out = md.push("**hi** [docs](https://x.dev)\n```\nlet s = \"a\"; // c\n```\n");
        assert!(out.contains("\x1b[1mhi\x1b[0m"));
        assert!(out.contains("docs (\x1b[2mhttps://x.dev\x1b[0m)"));
        assert!(out.contains("\x1b[35mlet\x1b[0m"));
        assert!(out.contains("\x1b[32m\"a\"\x1b[0m"));
    }
}
