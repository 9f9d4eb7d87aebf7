//! Word problems and sums read as arithmetic: signs read out ("7 x 6" as "7 times 6"), and
//! the product, difference or quotient a question describes in everyday words said outright
//! after it. Arithmetic tools say what they do in words ("their product", "a divided by b");
//! people write signs, or describe boxes of eggs and bills to split, and without the
//! operation's word the sum ranks first: it is the tool the numbers alone bring to mind.

use crate::values::token_words;

/// `query` with arithmetic written in signs read out in words: "7 x 6" and "7*6" as "7 times
/// 6", "10 + 20" as "10 plus 20". Tools say what they do in words ("their product", "a plus b"),
/// and the word ranking drops signs. A minus or a slash counts only set off by spaces between
/// numbers ("50 - 8"), since "2026-11-27" and "11/27" are dates. The query's own text when it
/// writes no such sign.
pub(crate) fn operators_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let mut changed = false;
    let mut out: Vec<String> = Vec::with_capacity(tokens.len());
    for (i, token) in tokens.iter().enumerate() {
        let between_numbers = i > 0
            && tokens.get(i + 1).is_some_and(|next| is_number(next))
            && is_number(tokens[i - 1]);
        if let Some(word) = operator_word(token, true).filter(|_| between_numbers) {
            out.push(word.to_string());
            changed = true;
        } else if let Some(spoken) = compact_operation(token) {
            out.push(spoken);
            changed = true;
        } else {
            out.push((*token).to_string());
        }
    }
    if changed {
        std::borrow::Cow::Owned(out.join(" "))
    } else {
        std::borrow::Cow::Borrowed(query)
    }
}

/// `query` with its arithmetic in words: signs read out ([`operators_as_words`]), and a
/// product, difference or quotient a word problem describes without a sign
/// ([`products_as_words`], [`remainders_as_words`], [`quotients_as_words`]).
pub(crate) fn arithmetic_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    let spoken = match operators_as_words(query) {
        std::borrow::Cow::Borrowed(query) => products_as_words(query),
        std::borrow::Cow::Owned(spoken) => {
            std::borrow::Cow::Owned(products_as_words(&spoken).into_owned())
        }
    };
    match spoken {
        std::borrow::Cow::Borrowed(query) => match remainders_as_words(query) {
            std::borrow::Cow::Borrowed(query) => quotients_as_words(query),
            changed => changed,
        },
        changed => changed,
    }
}

/// `query` with the quotient it asks for said outright after it: "how many times does 7 go
/// into 343" (" (343 divided by 7)"), "12 fits into 150 how many times". How often one amount
/// goes into another is a division, asked in the words of a schoolroom, with no sign and no
/// "divided"; the numbers alone bring the sum to mind. Only an amount, then "go", "goes",
/// "fit" or "fits" at most two words after it, then "into" or "in" and the second amount;
/// the query's own text otherwise.
pub(crate) fn quotients_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let words = token_words(query);
    let quotient = words.iter().enumerate().find_map(|(at, word)| {
        if !matches!(word.as_str(), "go" | "goes" | "fit" | "fits") {
            return None;
        }
        let into = words.get(at + 1)?;
        if into != "into" && into != "in" {
            return None;
        }
        let whole = amount(tokens.get(at + 2)?)?;
        let part = tokens[at.saturating_sub(2)..at]
            .iter()
            .rev()
            .find_map(|t| amount(t))?;
        Some(format!("{query} ({whole} divided by {part})"))
    });
    quotient.map_or(std::borrow::Cow::Borrowed(query), std::borrow::Cow::Owned)
}

/// `query` with the difference a word problem asks for said outright after it: "I had 500
/// dollars and spent 137, how much is left?" (" (500 minus 137)"), "40 pages, read 12, how
/// many remain". What is left of an amount is a subtraction, which people ask for without a
/// sign or "minus", and the numbers alone bring the sum to mind. Only with two amounts and a
/// question of what is left or remains, not when it shares or splits (a quotient); the
/// query's own text otherwise.
pub(crate) fn remainders_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    let words = token_words(query);
    if words
        .iter()
        .any(|w| SHARING.iter().any(|s| w.starts_with(s)))
    {
        return std::borrow::Cow::Borrowed(query);
    }
    let how_much = words
        .windows(2)
        .any(|pair| pair[0] == "how" && matches!(pair[1].as_str(), "much" | "many"));
    let left = words.iter().enumerate().any(|(i, w)| {
        w.starts_with("remain")
            || w == "leftover"
            || (w == "left" && (how_much || words.get(i + 1).is_some_and(|n| n == "over")))
    });
    let amounts: Vec<&str> = query.split_whitespace().filter_map(amount).collect();
    match (left, amounts.as_slice()) {
        (true, [a, b, ..]) => std::borrow::Cow::Owned(format!("{query} ({a} minus {b})")),
        _ => std::borrow::Cow::Borrowed(query),
    }
}

/// `query` with the product a word problem describes said outright after it: "6 boxes of 12
/// eggs" and "$35 each, 7 of them" (" (6 times 12)"), "50 a week for 52 weeks", "17 squared",
/// "3 dozen".
/// People rarely write "times" for these, and without it the sum ranks first: it is the
/// arithmetic tool the numbers alone bring to mind. A sentence that shares or splits ("among
/// 8 kids, how many does each get") asks for a quotient and is left as it is, as is a rate
/// written with "per", which in a question's units ("km per hour") asks for the formula of
/// its domain, not a product. The query's own text when it describes no product.
pub(crate) fn products_as_words(query: &str) -> std::borrow::Cow<'_, str> {
    let tokens: Vec<&str> = query.split_whitespace().collect();
    let words = token_words(query);
    if words
        .iter()
        .any(|w| SHARING.iter().any(|s| w.starts_with(s)))
    {
        return std::borrow::Cow::Borrowed(query);
    }
    let amounts: Vec<(usize, &str)> = tokens
        .iter()
        .enumerate()
        .filter_map(|(i, t)| amount(t).map(|a| (i, a)))
        .collect();
    let product = |a: &str, b: &str| format!("{query} ({a} times {b})");
    // "17 squared", "3 cubed".
    if let Some(&(i, a)) = amounts.iter().find(|(i, _)| {
        words
            .get(i + 1)
            .is_some_and(|w| w == "squared" || w == "cubed")
    }) {
        let times = if words[i + 1] == "cubed" {
            format!("{a} times {a}")
        } else {
            a.to_string()
        };
        return std::borrow::Cow::Owned(product(a, &times));
    }
    // "3 dozen cookies": a dozen is twelve.
    if let Some(&(_, a)) = amounts.iter().find(|(i, _)| {
        words
            .get(i + 1)
            .is_some_and(|w| w == "dozen" || w == "dozens")
    }) {
        return std::borrow::Cow::Owned(product(a, "12"));
    }
    let [(first, a), (second, b), ..] = amounts[..] else {
        return std::borrow::Cow::Borrowed(query);
    };
    let so_many = words
        .iter()
        .any(|w| matches!(w.as_str(), "each" | "apiece"));
    // "6 boxes of 12 eggs": a count of things that each hold the second amount.
    let holding = second > first + 1
        && second - first <= 3
        && words[second - 1] == "of"
        && words[first + 1].ends_with('s');
    // "50 a week for 52 weeks", "$20 an hour".
    let rate = amounts.iter().any(|&(i, _)| {
        matches!(words.get(i + 1).map(String::as_str), Some("a" | "an"))
            && words
                .get(i + 2)
                .is_some_and(|w| UNITS_OF_TIME.contains(&w.as_str()))
    });
    if so_many || holding || rate {
        std::borrow::Cow::Owned(product(a, b))
    } else {
        std::borrow::Cow::Borrowed(query)
    }
}

/// Word beginnings that make a word problem's "each" a share rather than a product.
const SHARING: &[&str] = &[
    "split", "share", "divid", "between", "among", "evenly", "equally", "average",
];

/// Units a rate is counted in ("50 a week").
const UNITS_OF_TIME: &[&str] = &[
    "second", "minute", "hour", "day", "night", "week", "month", "year",
];

/// The number `token` writes, without a currency sign before it or the sentence's punctuation
/// after it ("$35" as "35"), if it is one.
fn amount(token: &str) -> Option<&str> {
    let token = token.trim_start_matches(['$', '€', '£', '¥']);
    let token = token.trim_end_matches(['?', '!', ',', ';', ':', '.', ')']);
    is_number(token).then_some(token)
}

/// The word for an arithmetic sign; minus and division only when `spaced` (see
/// [`operators_as_words`]).
fn operator_word(sign: &str, spaced: bool) -> Option<&'static str> {
    match sign {
        "x" | "X" | "×" | "*" => Some("times"),
        "+" => Some("plus"),
        "÷" => Some("divided by"),
        "-" | "−" | "–" if spaced => Some("minus"),
        "/" if spaced => Some("divided by"),
        _ => None,
    }
}

/// "7x6", "7*6?" or "10+20" read out ("7 times 6?"), if `token` is two numbers joined by a
/// sign.
fn compact_operation(token: &str) -> Option<String> {
    let (at, sign) = token
        .char_indices()
        .find(|(at, c)| *at > 0 && matches!(c, 'x' | 'X' | '×' | '*' | '+' | '÷'))?;
    let (left, right) = (&token[..at], &token[at + sign.len_utf8()..]);
    let word = operator_word(&token[at..at + sign.len_utf8()], false)?;
    (is_number(left) && is_number(right)).then(|| format!("{left} {word} {right}"))
}

/// Whether `token` is a number, allowing the sentence's punctuation after it ("6?").
fn is_number(token: &str) -> bool {
    let token = token.trim_end_matches(['?', '!', ',', ';', ':', '.']);
    !token.is_empty()
        && token.chars().any(|c| c.is_ascii_digit())
        && token
            .chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == ',')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn how_often_one_amount_goes_into_another_is_a_quotient() {
        assert_eq!(
            quotients_as_words("how many times does 7 go into 343"),
            "how many times does 7 go into 343 (343 divided by 7)"
        );
        assert_eq!(
            arithmetic_as_words("12 fits into 150 how many times?"),
            "12 fits into 150 how many times? (150 divided by 12)"
        );
        for plain in [
            "how many people fit into the room",
            "does the 7 train go into Manhattan",
            "go into the folder 2024 and list it",
        ] {
            assert_eq!(quotients_as_words(plain), plain);
        }
    }

    #[test]
    fn what_is_left_of_an_amount_is_a_difference() {
        assert_eq!(
            remainders_as_words("I had 500 dollars and spent 137, how much is left?"),
            "I had 500 dollars and spent 137, how much is left? (500 minus 137)"
        );
        assert_eq!(
            remainders_as_words("a 40 page book, I read 12, how many pages remain"),
            "a 40 page book, I read 12, how many pages remain (40 minus 12)"
        );
        // Turning left, one amount, or a share is no difference.
        for plain in [
            "turn left after 200 meters and then 50 more",
            "how much is left of 500?",
            "split the 90 left among 4 friends, how much is left each",
        ] {
            assert_eq!(remainders_as_words(plain), plain);
        }
        // A product already read is not read again as a difference.
        assert!(!arithmetic_as_words("6 boxes of 12 eggs, how many left").contains("minus"));
    }

    #[test]
    fn signs_between_numbers_are_read_out_and_dates_are_not() {
        assert_eq!(operators_as_words("what is 7 x 6"), "what is 7 times 6");
        assert_eq!(operators_as_words("what is 7x6?"), "what is 7 times 6?");
        assert_eq!(
            operators_as_words("10 + 20 and 3*4"),
            "10 plus 20 and 3 times 4"
        );
        assert_eq!(operators_as_words("50 - 8"), "50 minus 8");
        assert_eq!(operators_as_words("144 / 12"), "144 divided by 12");
        for plain in [
            "on 2026-11-27 or 11/27",
            "a 3-4 split",
            "the x axis",
            "box x 6",
            "read x.txt",
        ] {
            assert_eq!(operators_as_words(plain), plain);
        }
    }

    #[test]
    fn a_word_problem_says_its_product_and_a_share_does_not() {
        assert_eq!(
            products_as_words("what do 6 boxes of 12 eggs make"),
            "what do 6 boxes of 12 eggs make (6 times 12)"
        );
        assert_eq!(
            products_as_words("Each ticket is $35 and I need 7 of them. Total?"),
            "Each ticket is $35 and I need 7 of them. Total? (35 times 7)"
        );
        assert_eq!(
            products_as_words("if I save 50 a week for 52 weeks how much do I have"),
            "if I save 50 a week for 52 weeks how much do I have (50 times 52)"
        );
        assert_eq!(
            products_as_words("how much is 17 squared?"),
            "how much is 17 squared? (17 times 17)"
        );
        assert_eq!(
            arithmetic_as_words("I have 6 boxes with 24 apples each"),
            "I have 6 boxes with 24 apples each (6 times 24)"
        );
        assert_eq!(
            products_as_words("3 dozen cookies, how many cookies is that"),
            "3 dozen cookies, how many cookies is that (3 times 12)"
        );
        for plain in [
            "if I share 96 cookies among 8 kids, how many does each get?",
            "if a pizza costs 24 and 4 friends split it, how much each",
            "a car going 60 km per hour for 3 hours",
            "update the price of product 42 to 9.99",
            "run a slow task that reports progress in 5 steps",
            "sum of 1,250 and 3,780",
            "give each of the files a name",
        ] {
            assert_eq!(products_as_words(plain), plain);
        }
    }
}
