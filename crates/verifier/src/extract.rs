//! Finding the scored text: the final `<answer>` block, its last box, and the boxes joined to it.
//!
//! Every scan here is a single forward or backward pass over bytes, so a
//! response of any shape (a million `\boxed{`, braces nested a million deep)
//! costs time linear in its length.

/// The part of a response that is scored: the final `<answer>…</answer>` block
/// when there is one (up to the end of the text when it is not closed),
/// otherwise the whole text.
pub(crate) fn answer_region(response: &str) -> &str {
    match response.rfind("<answer>") {
        Some(open) => {
            let body = &response[open + "<answer>".len()..];
            match body.find("</answer>") {
                Some(close) => &body[..close],
                None => body,
            }
        }
        None => response,
    }
}

/// A box found in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Boxed<'a> {
    /// Byte offset of the backslash of `\boxed` / `\fbox`.
    pub start: usize,
    /// Byte offset one past the end of the box (past its closing brace).
    pub end: usize,
    /// The content, without the braces.
    pub content: &'a str,
}

/// What the search for the last box found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LastBox<'a> {
    /// No `\boxed`/`\fbox` command at all.
    None,
    /// The last box opens a brace that is never closed (a truncated response).
    Unclosed,
    /// A complete box.
    Found(Boxed<'a>),
}

/// Byte offset of the last `\boxed` or `\fbox` command in `hay[..end]` that is
/// a whole command name (not a prefix such as `\boxedanswer`), with the length
/// of its name. One backward pass over backslashes: the cost is the distance
/// from `end` back to the command found.
fn last_command(hay: &str, mut end: usize) -> Option<(usize, usize)> {
    let bytes = hay.as_bytes();
    loop {
        let pos = hay[..end].rfind('\\')?;
        let rest = &bytes[pos..];
        let len = if rest.starts_with(b"\\boxed") {
            "\\boxed".len()
        } else if rest.starts_with(b"\\fbox") {
            "\\fbox".len()
        } else {
            end = pos;
            continue;
        };
        match bytes.get(pos + len) {
            Some(c) if c.is_ascii_alphabetic() => end = pos,
            _ => return Some((pos, len)),
        }
    }
}

/// Index of the brace closing the one at `open` (`bytes[open] == b'{'`), with
/// `\{` and `\}` skipped as escaped. One forward pass, no recursion.
fn matching_brace(bytes: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The box whose command starts at `pos` (name length `len`): `\boxed{…}` with
/// nested braces, or `\boxed 5` without braces (a signed run of digits,
/// thousands commas and a decimal point; else the text up to the next `$` or
/// line break).
fn box_at(hay: &str, pos: usize, len: usize) -> Option<Boxed<'_>> {
    let bytes = hay.as_bytes();
    let mut i = pos + len;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    if bytes.get(i) == Some(&b'{') {
        let close = matching_brace(bytes, i)?;
        return Some(Boxed {
            start: pos,
            end: close + 1,
            content: &hay[i + 1..close],
        });
    }
    // Unbraced argument.
    let rest = &hay[i..];
    let mut n = 0;
    let rb = rest.as_bytes();
    if matches!(rb.first(), Some(b'-' | b'+')) {
        n = 1;
    } else if rest.starts_with('\u{2212}') {
        n = '\u{2212}'.len_utf8();
    }
    let digits_from = n;
    while n < rb.len() && (rb[n].is_ascii_digit() || rb[n] == b',' || rb[n] == b'.') {
        n += 1;
    }
    while n > digits_from && matches!(rb[n - 1], b',' | b'.') {
        n -= 1;
    }
    let take = if n > digits_from {
        n
    } else {
        rest.find(['$', '\n']).unwrap_or(rest.len())
    };
    Some(Boxed {
        start: pos,
        end: i + take,
        content: &rest[..take],
    })
}

/// The last complete box of `region`.
pub(crate) fn last_box(region: &str) -> LastBox<'_> {
    match last_command(region, region.len()) {
        None => LastBox::None,
        Some((pos, len)) => match box_at(region, pos, len) {
            Some(b) => LastBox::Found(b),
            None => LastBox::Unclosed,
        },
    }
}

/// The box that ends right before `next` with only separators between them
/// (see [`is_separator_gap`]), if any. Used to walk back over `\boxed{1}, \boxed{2}`.
pub(crate) fn joined_before<'a>(region: &'a str, next: &Boxed<'a>) -> Option<Boxed<'a>> {
    let (pos, len) = last_command(region, next.start)?;
    let prev = box_at(region, pos, len)?;
    // A box that encloses `next` (`\boxed{\boxed{1}}`) or overlaps it is not a sibling.
    if prev.end > next.start {
        return None;
    }
    is_separator_gap(&region[prev.end..next.start]).then_some(prev)
}

/// Whether `gap` holds nothing but what separates items of one list of
/// answers: whitespace, `$`, `,`, `;`, `.`, `&`, `\quad`, `\qquad`, spacing
/// commands, math delimiters, `\text{…}` braces and the words `and` / `or`.
/// Longer gaps (over 64 bytes) never join boxes.
pub(crate) fn is_separator_gap(gap: &str) -> bool {
    const PIECES: &[&str] = &[
        "\\qquad",
        "\\quad",
        "\\text{",
        "\\mathrm{",
        "\\textrm{",
        "\\mbox{",
        "\\,",
        "\\;",
        "\\:",
        "\\!",
        "\\ ",
        "\\(",
        "\\)",
        "\\[",
        "\\]",
        "\\\\",
        "and",
        "or",
        "$",
        ",",
        ";",
        ".",
        "&",
        "}",
        "~",
    ];
    if gap.len() > 64 {
        return false;
    }
    let mut rest = gap.trim_start();
    while !rest.is_empty() {
        match PIECES.iter().find(|p| rest.starts_with(**p)) {
            Some(p) => rest = rest[p.len()..].trim_start(),
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content(region: &str) -> Option<&str> {
        match last_box(region) {
            LastBox::Found(b) => Some(b.content),
            _ => None,
        }
    }

    #[test]
    fn answer_region_takes_the_final_block() {
        assert_eq!(
            answer_region("a <answer>1</answer> b <answer>2</answer> c"),
            "2"
        );
        assert_eq!(answer_region("a <answer> 3"), " 3");
        assert_eq!(answer_region("no block"), "no block");
    }

    #[test]
    fn last_box_cases() {
        assert_eq!(content("\\boxed{1} \\boxed{2}"), Some("2"));
        assert_eq!(content("\\boxed{1} \\fbox{2}"), Some("2"));
        assert_eq!(content("\\fbox{1} \\boxed{2}"), Some("2"));
        assert_eq!(content("\\boxed{\\frac{1}{2}}"), Some("\\frac{1}{2}"));
        assert_eq!(content("\\boxed{a\\}b}"), Some("a\\}b"));
        assert_eq!(content("\\boxed 5$"), Some("5"));
        assert_eq!(content("\\boxed -1,000."), Some("-1,000"));
        assert_eq!(content("\\boxed x$"), Some("x"));
        assert_eq!(content("\\boxed{2} \\boxedanswer"), Some("2"));
        assert_eq!(last_box("\\boxed{2"), LastBox::Unclosed);
        assert_eq!(last_box("none"), LastBox::None);
    }

    #[test]
    fn joined_boxes() {
        let r = "\\boxed{1} or \\boxed{2}";
        let LastBox::Found(b) = last_box(r) else {
            panic!()
        };
        let prev = joined_before(r, &b).unwrap();
        assert_eq!(prev.content, "1");
        let r = "\\boxed{1}. Then we check, so the answer is \\boxed{2}";
        let LastBox::Found(b) = last_box(r) else {
            panic!()
        };
        assert!(joined_before(r, &b).is_none());
        let r = "\\boxed{\\boxed{2}}";
        let LastBox::Found(b) = last_box(r) else {
            panic!()
        };
        assert_eq!(b.content, "2");
        assert!(joined_before(r, &b).is_none());
    }
}
