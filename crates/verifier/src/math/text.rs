//! Normalised LaTeX text: the comparison of answers the exact parser does not read.
//!
//! One forward pass: whitespace, `$`, spacing commands, `\left`/`\right`,
//! `\displaystyle`, degrees and `\%` go; `\dfrac`/`\tfrac`/`\cfrac` become
//! `\frac`; text and font wrappers are unwrapped; braces around a single
//! character go (`_{8}` is `_8`, `\sqrt{2}` is `\sqrt2`); a trailing full stop
//! goes. Case is kept. Two answers with the same normalised text are the
//! same answer; the converse is not claimed.

const DROPPED: &[&str] = &[
    "left",
    "right",
    "displaystyle",
    "textstyle",
    "quad",
    "qquad",
    "bigl",
    "bigr",
    "big",
    "Big",
    "bigg",
    "Bigg",
    "circ",
    "degree",
    "limits",
];
const UNWRAPPED: &[&str] = &[
    "text",
    "textrm",
    "textbf",
    "textit",
    "textnormal",
    "mbox",
    "mathrm",
    "mathbf",
    "mathit",
    "operatorname",
    "boldsymbol",
    "boxed",
    "fbox",
];
const MAX_FRAMES: usize = 64;

/// The normalised text of an answer.
pub(crate) fn normalize(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    // For every open brace: whether its closing brace is dropped (a wrapper's).
    let mut frames: Vec<bool> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' | b'\n' | b'\r' | b'~' | b'$' => i += 1,
            b'%' => i += 1,
            b'{' => {
                // `{x}` around one character is that character.
                if i + 2 < b.len()
                    && b[i + 2] == b'}'
                    && b[i + 1].is_ascii()
                    && !matches!(b[i + 1], b'\\' | b'{' | b'}')
                {
                    out.push(b[i + 1] as char);
                    i += 3;
                } else {
                    if frames.len() < MAX_FRAMES {
                        frames.push(false);
                    }
                    out.push('{');
                    i += 1;
                }
            }
            b'}' => {
                if !frames.pop().unwrap_or(false) {
                    out.push('}');
                }
                i += 1;
            }
            b'^' if s[i + 1..].starts_with("\\circ") => i += 6,
            b'^' if s[i + 1..].starts_with("{\\circ}") => i += 8,
            b'\\' => {
                let start = i + 1;
                let mut end = start;
                while end < b.len() && b[end].is_ascii_alphabetic() {
                    end += 1;
                }
                if end == start {
                    // `\,`, `\!`, `\%` … go; `\{`, `\}`, `\\` stay.
                    match b.get(start) {
                        Some(b',' | b';' | b':' | b'!' | b' ' | b'%' | b'$') => i = start + 1,
                        Some(&n) if n.is_ascii() => {
                            out.push('\\');
                            out.push(n as char);
                            i = start + 1;
                        }
                        _ => {
                            out.push('\\');
                            i = start;
                        }
                    }
                    continue;
                }
                let name = &s[start..end];
                i = end;
                if DROPPED.contains(&name) {
                    if matches!(name, "left" | "right") && b.get(i) == Some(&b'.') {
                        i += 1;
                    }
                    continue;
                }
                if UNWRAPPED.contains(&name) {
                    let mut j = i;
                    while j < b.len() && b[j].is_ascii_whitespace() {
                        j += 1;
                    }
                    if b.get(j) == Some(&b'{') && frames.len() < MAX_FRAMES {
                        frames.push(true);
                        i = j + 1;
                    }
                    continue;
                }
                let name = match name {
                    "dfrac" | "tfrac" | "cfrac" => "frac",
                    other => other,
                };
                out.push('\\');
                out.push_str(name);
                // A command followed by a letter needs a separator to stay one token.
                let mut j = i;
                while j < b.len() && b[j].is_ascii_whitespace() {
                    j += 1;
                }
                if b.get(j).is_some_and(u8::is_ascii_alphabetic) {
                    out.push(' ');
                }
            }
            _ => {
                let ch = s[i..].chars().next().unwrap_or('\u{fffd}');
                if ch != '\u{00b0}' {
                    out.push(ch);
                }
                i += ch.len_utf8();
            }
        }
    }
    while out.ends_with('.') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn normal_forms() {
        assert_eq!(normalize("4210_{5}"), normalize("4210_5"));
        assert_eq!(normalize("\\cot x"), normalize("\\cot  x"));
        assert_ne!(normalize("\\cot x"), normalize("\\cotx"));
        assert_eq!(normalize("\\dfrac{12}{5}"), "\\frac{12}5");
        assert_ne!(normalize("\\frac{12}{5}"), normalize("\\frac{1}{25}"));
        assert_eq!(normalize("\\text{ east }."), "east");
        assert_eq!(normalize("\\left( x \\right)"), "(x)");
    }
}
