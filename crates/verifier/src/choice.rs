//! Multiple-choice mode: the chosen letter (`A`–`J`) of a response, and of a ground truth.
//!
//! Where the letter is looked for, in order (all in the scored region of
//! [`crate::extract::answer_region`]):
//! 1. the last `\boxed{…}`/`\fbox{…}`: `B`, `(B)`, `\text{(B)}`, `B) 42`, `\textbf{B}`;
//! 2. the last "answer is", "answer:", "answer would be", "option", "choice"
//!    (any case), then `B`, `(B)`, `**B**`, `$\boxed{B}$`-like wrappers;
//! 3. a last line that is only the letter: `B`, `(B)`, `B.`, `**B**`.
//!
//! Every scan is linear in the length of the text.

use crate::extract;

/// What the response chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    One(u8),
    /// A box naming two different letters (`\boxed{A, C}`).
    Several,
    /// No letter found.
    None,
}

/// The letter of a ground truth: one letter `A`–`J` (any case), optionally wrapped in
/// `$…$`, `\boxed{…}`/`\fbox{…}`, `\text{…}`/`\textbf{…}`/`\mathrm{…}`/`\mathbf{…}`,
/// bold `**…**`, `(…)` or `[…]`, or followed by `)`, `.` or `:` (`B)`, `B.`). Nothing else is a
/// letter: `1e5` and `12b34` are not `E` and `B` (issue 42).
pub(crate) fn truth_letter(text: &str) -> Option<u8> {
    lone_letter(text)
        .map(|c| c.to_ascii_uppercase())
        .filter(|&c| is_choice(c))
}

/// The one ASCII letter that `text` is, once the wrappers [`truth_letter`] names are peeled off,
/// as written (any case).
fn lone_letter(text: &str) -> Option<u8> {
    const WRAPS: &[(&str, &str)] = &[
        ("$", "$"),
        ("**", "**"),
        ("(", ")"),
        ("[", "]"),
        ("\\boxed{", "}"),
        ("\\fbox{", "}"),
        ("\\text{", "}"),
        ("\\textbf{", "}"),
        ("\\mathrm{", "}"),
        ("\\mathbf{", "}"),
    ];
    let mut t = text.trim();
    // Each pass peels one wrapper; a letter needs at most a handful, so the loop is short.
    'peel: loop {
        for (open, close) in WRAPS {
            if let Some(inner) = t.strip_prefix(open).and_then(|r| r.strip_suffix(close)) {
                t = inner.trim();
                continue 'peel;
            }
        }
        break;
    }
    match t.as_bytes() {
        [c] | [c, b')' | b'.' | b':'] if c.is_ascii_alphabetic() => Some(*c),
        _ => None,
    }
}

/// The choice a response makes, and the text it was read from.
pub(crate) fn extract_choice(response: &str) -> (Choice, Option<String>) {
    let region = extract::answer_region(response);
    if let extract::LastBox::Found(b) = extract::last_box(region) {
        let content = b.content.trim();
        let letters = standalone_letters(content);
        let choice = match letters.as_slice() {
            [] => Choice::None,
            [c] => Choice::One(*c),
            [first, rest @ ..] => {
                if rest.iter().all(|c| c == first) || option_with_text(content).is_some() {
                    Choice::One(option_with_text(content).unwrap_or(*first))
                } else {
                    Choice::Several
                }
            }
        };
        if choice != Choice::None {
            return (choice, Some(content.to_string()));
        }
    }
    if let Some((c, at)) = after_phrase(region) {
        return (Choice::One(c), Some(at));
    }
    if let Some(line) = region.lines().rev().find(|l| !l.trim().is_empty()) {
        // A capital letter only: a lone `a` on the last line is more often a word than a choice.
        if let Some(c) = lone_letter(line).filter(|&c| is_choice(c)) {
            return (Choice::One(c), Some(line.trim().to_string()));
        }
    }
    (Choice::None, None)
}

fn is_choice(c: u8) -> bool {
    (b'A'..=b'J').contains(&c)
}

/// `B) 42`, `B. 42`, `B: 42`: the letter of an option written with its text.
fn option_with_text(content: &str) -> Option<u8> {
    let t = content
        .trim_start_matches(|c: char| c == '(' || c == '$' || c.is_whitespace())
        .strip_prefix("\\text{")
        .map_or(content.trim_start_matches(['(', '$', ' ']), |r| {
            r.trim_start_matches('(')
        });
    let b = t.as_bytes();
    (b.len() >= 2 && is_choice(b[0]) && matches!(b[1], b')' | b'.' | b':')).then(|| b[0])
}

/// Every capital `A`–`J` standing alone: not part of a longer word, not a command name.
fn standalone_letters(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' {
            i += 1;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            continue;
        }
        if b[i].is_ascii_alphabetic() {
            let start = i;
            while i < b.len() && b[i].is_ascii_alphabetic() {
                i += 1;
            }
            if i - start == 1 {
                let c = b[start];
                if is_choice(c) && out.len() < 16 && !out.contains(&c) {
                    out.push(c);
                }
            }
            continue;
        }
        i += 1;
    }
    out
}

/// The letter after the last answer phrase.
fn after_phrase(region: &str) -> Option<(u8, String)> {
    const PHRASES: &[&str] = &[
        "answer is",
        "answer:",
        "answer would be",
        "answer should be",
        "correct option is",
        "option",
        "choice",
    ];
    let lower = region.to_ascii_lowercase();
    let mut best: Option<(usize, usize)> = None;
    for p in PHRASES {
        if let Some(at) = lower.rfind(p) {
            let end = at + p.len();
            if best.is_none_or(|(_, e)| end > e) {
                best = Some((at, end));
            }
        }
    }
    let (_, end) = best?;
    let rest = &region[end..];
    let b = rest.as_bytes();
    let mut i = 0;
    // Skip what wraps a letter: spaces, `:`, `*`, `$`, brackets, `\text{`-like commands.
    while i < b.len() && i < 64 {
        match b[i] {
            b' ' | b':' | b'*' | b'$' | b'(' | b'[' | b'{' | b'"' | b'\'' => i += 1,
            b'\\' => {
                i += 1;
                while i < b.len() && b[i].is_ascii_alphabetic() {
                    i += 1;
                }
            }
            _ => break,
        }
    }
    let c = *b.get(i)?;
    let next = b.get(i + 1).copied();
    let alone = !next.is_some_and(|n| n.is_ascii_alphanumeric());
    let (letter, end) = if is_choice(c) && alone {
        (c, i + 1)
    } else if is_choice(c.to_ascii_uppercase()) && next == Some(b')') && i > 0 && b[i - 1] == b'(' {
        // `(b)`: a lower-case letter only in brackets.
        (c.to_ascii_uppercase(), i + 1)
    } else {
        return None;
    };
    let (start, closed) = wrappers(&b[..i], &b[end..]);
    Some((letter, rest[start.unwrap_or(i)..end + closed].to_string()))
}

/// The wrappers around a letter: of the openers in `before` (`(`, `[`, `{`, `*`, `$`, quotes),
/// those that `after` closes, innermost first. Returns where the outermost closed one starts
/// and how many bytes of `after` close them: the letter of `answer: **D**` is read as `**D**`,
/// of `**Answer:** (A)` as `(A)` (the first `**` closes nothing), and a `)` that nothing opened
/// is not part of it.
fn wrappers(before: &[u8], after: &[u8]) -> (Option<usize>, usize) {
    let mut open: Vec<(u8, usize)> = before
        .iter()
        .enumerate()
        .filter_map(|(at, &c)| {
            let close = match c {
                b'(' => b')',
                b'[' => b']',
                b'{' => b'}',
                b'*' | b'$' | b'"' | b'\'' => c,
                _ => return None,
            };
            Some((close, at))
        })
        .collect();
    let (mut start, mut n) = (None, 0);
    while let (Some(&(want, at)), Some(&got)) = (open.last(), after.get(n)) {
        if want != got {
            break;
        }
        open.pop();
        start = Some(at);
        n += 1;
    }
    (start, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(r: &str) -> Choice {
        extract_choice(r).0
    }

    #[test]
    fn forms() {
        assert_eq!(one("so \\boxed{B}"), Choice::One(b'B'));
        assert_eq!(one("\\boxed{\\text{(C)}}"), Choice::One(b'C'));
        assert_eq!(one("\\boxed{D) 42}"), Choice::One(b'D'));
        assert_eq!(one("\\boxed{A, C}"), Choice::Several);
        assert_eq!(one("Thus the answer is (B)."), Choice::One(b'B'));
        assert_eq!(one("Answer: C"), Choice::One(b'C'));
        assert_eq!(one("The correct answer is **D**"), Choice::One(b'D'));
        assert_eq!(one("I pick option (b)"), Choice::One(b'B'));
        assert_eq!(one("Reasoning...\n(A)"), Choice::One(b'A'));
        assert_eq!(one("The answer is Because"), Choice::None);
        assert_eq!(one("nothing here"), Choice::None);
        assert_eq!(truth_letter("(B)"), Some(b'B'));
        assert_eq!(truth_letter("\\text{(E)}"), Some(b'E'));
        assert_eq!(truth_letter("c"), Some(b'C'));
        assert_eq!(truth_letter("42"), None);
        assert_eq!(truth_letter("1e5"), None);
    }
}
