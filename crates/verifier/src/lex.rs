//! The lexer: answer text (LaTeX or plain) to a flat list of tokens, dropping
//! everything that never changes an integer's value (math delimiters, spacing
//! commands, `\left`/`\right`, formatting wrappers, degrees, `\%`, `\$`).

/// One token of an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// A non-negative integer literal: its canonical digits (no leading
    /// zeros; `"0"` for zero) and how many digits it was written with
    /// (`\frac12` and `2^10` need the written form).
    Num {
        digits: String,
        raw_len: usize,
        plain: bool,
    },
    /// A number with a non-zero fractional part (`2.5`, `.5`).
    NonInt,
    Plus,
    Minus,
    PlusMinus,
    Times,
    Div,
    Pow,
    Bang,
    Open,
    Close,
    Frac,
    Binom,
    /// `,`, `;`, `and`, `or`: separates items of a list.
    Sep,
    /// `=` or `:`: separates sides of an equation (`x = 5`).
    Eq,
    /// A run of letters; `unit` when it may be a trailing unit (inside
    /// `\text{}`-like wrappers, or written after a space, or non-ASCII).
    Word {
        unit: bool,
    },
    /// Anything else (`\sqrt`, `\pi`, `<`, …): the answer is not a plain integer.
    Other,
}

/// How a thousands group is separated, so one number uses one kind throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupSep {
    Comma,
    BraceComma,
    Thin,
    Space,
}

/// Formatting wrappers whose argument is kept: `\text{42}` is 42.
const TEXT_WRAPPERS: &[&str] = &[
    "text",
    "mathrm",
    "operatorname",
    "textbf",
    "textrm",
    "textit",
    "textnormal",
    "textsf",
    "texttt",
    "mbox",
    "hbox",
    "emph",
];
const MATH_WRAPPERS: &[&str] = &[
    "mathbf",
    "mathit",
    "mathsf",
    "mathtt",
    "mathnormal",
    "boldsymbol",
    "bm",
    "boxed",
    "fbox",
    "underline",
    "overline",
];
/// Words that scale a number; they are never dropped as units.
const MAGNITUDES: &[&str] = &[
    "hundred",
    "hundreds",
    "thousand",
    "thousands",
    "million",
    "millions",
    "billion",
    "billions",
    "trillion",
    "dozen",
    "dozens",
    "bn",
    "mn",
    "thousandths",
    "hundredths",
    "tenths",
    "half",
    "quarter",
    "quarters",
];

/// Commands that are dropped with no argument.
const IGNORED: &[&str] = &[
    "left",
    "right",
    "bigl",
    "bigr",
    "big",
    "Big",
    "bigg",
    "Bigg",
    "Bigl",
    "Bigr",
    "displaystyle",
    "textstyle",
    "quad",
    "qquad",
    "enspace",
    "thinspace",
    "medspace",
    "thickspace",
    "negthinspace",
    "circ",
    "degree",
    "degrees",
    "deg",
    "dollar",
    "bf",
    "rm",
    "it",
];

/// Result of lexing: the tokens, or `None` when the text is too deeply nested
/// to be an answer (more than [`MAX_DEPTH`] open braces).
pub(crate) fn lex(text: &str) -> Option<Vec<Tok>> {
    Lexer {
        s: text.as_bytes(),
        text,
        i: 0,
        out: Vec::new(),
        frames: Vec::new(),
        text_frames: 0,
        spaced: false,
    }
    .run()
}

/// Deepest brace nesting an answer may have; deeper text is refused.
pub(crate) const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Group,
    Math,
    Text,
}

struct Lexer<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    out: Vec<Tok>,
    frames: Vec<Frame>,
    text_frames: usize,
    spaced: bool,
}

impl Lexer<'_> {
    fn run(mut self) -> Option<Vec<Tok>> {
        while self.i < self.s.len() {
            let b = self.s[self.i];
            let was_spaced = std::mem::replace(&mut self.spaced, false);
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | b'~' => {
                    self.i += 1;
                    self.spaced = true;
                }
                b'$' | b'%' => self.i += 1,
                b'0'..=b'9' => self.number(),
                b'.' if self.s.get(self.i + 1).is_some_and(u8::is_ascii_digit) => {
                    self.i += 1;
                    while self.s.get(self.i).is_some_and(u8::is_ascii_digit) {
                        self.i += 1;
                    }
                    self.out.push(Tok::NonInt);
                }
                // A stray full stop ends a sentence; it separates nothing.
                b'.' => self.i += 1,
                b'+' => self.push(Tok::Plus),
                b'-' => self.push(Tok::Minus),
                b'*' => self.push(Tok::Times),
                b'/' => self.push(Tok::Div),
                b'!' => self.push(Tok::Bang),
                b'(' | b'[' => self.push(Tok::Open),
                b')' | b']' => self.push(Tok::Close),
                b',' | b';' => self.push(Tok::Sep),
                b'=' | b':' => self.push(Tok::Eq),
                b'^' => self.caret(),
                b'{' => {
                    if self.frames.len() >= MAX_DEPTH {
                        return None;
                    }
                    self.frames.push(Frame::Group);
                    self.push(Tok::Open);
                }
                b'}' => {
                    self.i += 1;
                    match self.frames.pop() {
                        Some(Frame::Group) => self.out.push(Tok::Close),
                        Some(Frame::Text) => self.text_frames -= 1,
                        Some(Frame::Math) => {}
                        None => self.out.push(Tok::Other),
                    }
                }
                b'\\' => {
                    if !self.command(was_spaced)? {
                        self.spaced = true;
                    }
                }
                b'a'..=b'z' | b'A'..=b'Z' => {
                    let start = self.i;
                    while self.s.get(self.i).is_some_and(u8::is_ascii_alphabetic) {
                        self.i += 1;
                    }
                    self.word(&self.text[start..self.i], was_spaced);
                }
                0x80.. => self.unicode(was_spaced),
                _ => self.push(Tok::Other),
            }
        }
        Some(self.out)
    }

    fn push(&mut self, t: Tok) {
        self.i += 1;
        self.out.push(t);
    }

    fn word(&mut self, w: &str, spaced: bool) {
        if w == "and" || w == "or" {
            self.out.push(Tok::Sep);
        } else {
            // Magnitude words change the value (`42 \text{ million}`): never units.
            let magnitude = MAGNITUDES.iter().any(|m| w.eq_ignore_ascii_case(m));
            let unit = !magnitude && (self.text_frames > 0 || (spaced && w.len() >= 2));
            self.out.push(Tok::Word { unit });
        }
    }

    fn unicode(&mut self, spaced: bool) {
        let c = self.text[self.i..].chars().next().unwrap_or('\u{fffd}');
        self.i += c.len_utf8();
        match c {
            // The Unicode minus and its small and full-width forms; not the en dash, which writes ranges.
            '\u{2212}' | '\u{fe63}' | '\u{ff0d}' => self.out.push(Tok::Minus),
            '\u{00d7}' | '\u{00b7}' | '\u{22c5}' => self.out.push(Tok::Times),
            '\u{00f7}' => self.out.push(Tok::Div),
            '\u{00b0}' | '\u{ff05}' => {}
            '\u{00a0}' | '\u{2009}' | '\u{202f}' | '\u{2007}' | '\u{3000}' => self.spaced = true,
            c if c.is_alphabetic() => {
                while let Some(c) = self.text[self.i..].chars().next() {
                    if !c.is_alphabetic() {
                        break;
                    }
                    self.i += c.len_utf8();
                }
                // Non-ASCII words after a number are units (`42个`, `5 €`-like).
                let _ = spaced;
                self.out.push(Tok::Word { unit: true });
            }
            _ => self.out.push(Tok::Other),
        }
    }

    /// `^`: a degree sign (`^\circ`, `^{\circ}`) is dropped; anything else is a power.
    fn caret(&mut self) {
        let rest = &self.text[self.i + 1..];
        let trimmed = rest.trim_start();
        let skip = if let Some(after) = trimmed.strip_prefix("\\circ") {
            Some(rest.len() - after.len())
        } else if let Some(inner) = trimmed.strip_prefix('{') {
            let inner = inner.trim_start();
            inner
                .strip_prefix("\\circ")
                .map(str::trim_start)
                .and_then(|a| a.strip_prefix('}'))
                .map(|after| rest.len() - after.len())
        } else {
            None
        };
        match skip {
            Some(n) => self.i += 1 + n,
            None => self.push(Tok::Pow),
        }
    }

    /// A backslash command. Returns `Some(true)` when it produced or consumed
    /// something meaningful, `Some(false)` for a spacing command (the caller
    /// marks a space), `None` when nesting is too deep.
    fn command(&mut self, spaced: bool) -> Option<bool> {
        let start = self.i + 1;
        let Some(&c) = self.s.get(start) else {
            self.i = start;
            self.out.push(Tok::Other);
            return Some(true);
        };
        if !c.is_ascii_alphabetic() {
            self.i = start + 1;
            match c {
                b',' | b';' | b':' | b'!' | b' ' | b'>' | b'\\' => return Some(false),
                b'$' | b'%' | b'(' | b')' | b'[' | b']' => {}
                b'{' => self.out.push(Tok::Open),
                b'}' => self.out.push(Tok::Close),
                _ => {
                    // `\` followed by a multi-byte character.
                    if c >= 0x80 {
                        self.i = start;
                    }
                    self.out.push(Tok::Other);
                }
            }
            return Some(true);
        }
        let mut end = start;
        while self.s.get(end).is_some_and(u8::is_ascii_alphabetic) {
            end += 1;
        }
        let name = &self.text[start..end];
        self.i = end;
        let wrapper = if TEXT_WRAPPERS.contains(&name) {
            Some(Frame::Text)
        } else if MATH_WRAPPERS.contains(&name) {
            Some(Frame::Math)
        } else {
            None
        };
        if let Some(frame) = wrapper {
            let mut j = end;
            while self.s.get(j).is_some_and(u8::is_ascii_whitespace) {
                j += 1;
            }
            if self.s.get(j) == Some(&b'{') {
                if self.frames.len() >= MAX_DEPTH {
                    return None;
                }
                self.i = j + 1;
                self.frames.push(frame);
                if frame == Frame::Text {
                    self.text_frames += 1;
                }
            }
            // A wrapper right after a space keeps the space: `42 \text{cm}`.
            self.spaced = spaced;
            return Some(true);
        }
        match name {
            "cdot" | "times" | "ast" => self.out.push(Tok::Times),
            "div" => self.out.push(Tok::Div),
            "frac" | "dfrac" | "tfrac" | "cfrac" => self.out.push(Tok::Frac),
            "binom" | "dbinom" | "tbinom" => self.out.push(Tok::Binom),
            "pm" | "mp" => self.out.push(Tok::PlusMinus),
            "colon" => self.out.push(Tok::Eq),
            "lbrace" | "lparen" => self.out.push(Tok::Open),
            "rbrace" | "rparen" => self.out.push(Tok::Close),
            "left" | "right" => {
                // `\left.` and `\right.` are invisible delimiters.
                if self.s.get(self.i) == Some(&b'.') {
                    self.i += 1;
                }
            }
            n if IGNORED.contains(&n) => {
                if matches!(n, "quad" | "qquad" | "enspace" | "thinspace" | "medspace") {
                    return Some(false);
                }
                // Degrees and formatting switches keep the preceding space.
                self.spaced = spaced;
            }
            _ => self.out.push(Tok::Other),
        }
        Some(true)
    }

    /// A number: digits, well-formed thousands groups, and a fractional part
    /// that is all zeros (`27.0`) or not (`2.5` is [`Tok::NonInt`]).
    fn number(&mut self) {
        let s = self.s;
        let start = self.i;
        let mut i = start;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        let mut digits = String::new();
        let mut raw_len = i - start;
        let first = &self.text[start..i];
        let mut grouped = false;
        // A first group with a leading zero (`0,001`) is a European decimal, not thousands.
        if raw_len <= 3 && s[start] != b'0' {
            let mut kind: Option<GroupSep> = None;
            let mut j = i;
            let mut groups: Vec<(usize, usize)> = Vec::new();
            while let Some((k, after)) = group_sep(s, j) {
                if kind.is_some_and(|have| have != k) {
                    break;
                }
                let g_end = after + 3;
                if g_end > s.len()
                    || !s[after..g_end].iter().all(u8::is_ascii_digit)
                    || s.get(g_end).is_some_and(u8::is_ascii_digit)
                {
                    break;
                }
                kind = Some(k);
                groups.push((after, g_end));
                j = g_end;
            }
            if !groups.is_empty() {
                grouped = true;
                digits.push_str(first);
                for (a, b) in &groups {
                    digits.push_str(&self.text[*a..*b]);
                }
                raw_len = digits.len();
                i = j;
            }
        }
        if !grouped {
            digits.push_str(first);
        }
        // Fractional part.
        let mut non_int = false;
        if s.get(i) == Some(&b'.') {
            let mut k = i + 1;
            while k < s.len() && s[k].is_ascii_digit() {
                if s[k] != b'0' {
                    non_int = true;
                }
                k += 1;
            }
            i = k;
        }
        self.i = i;
        if non_int {
            self.out.push(Tok::NonInt);
            return;
        }
        let trimmed = digits.trim_start_matches('0');
        let canonical = if trimmed.is_empty() {
            "0".to_string()
        } else if trimmed.len() == digits.len() {
            digits
        } else {
            trimmed.to_string()
        };
        self.out.push(Tok::Num {
            digits: canonical,
            raw_len,
            plain: !grouped,
        });
    }
}

/// A thousands separator at `j`, with the offset just after it.
fn group_sep(s: &[u8], j: usize) -> Option<(GroupSep, usize)> {
    let rest = &s[j.min(s.len())..];
    if rest.starts_with(b",\\!") {
        Some((GroupSep::Comma, j + 3))
    } else if rest.starts_with(b",") {
        Some((GroupSep::Comma, j + 1))
    } else if rest.starts_with(b"{,}") {
        Some((GroupSep::BraceComma, j + 3))
    } else if rest.starts_with(b"\\,") {
        Some((GroupSep::Thin, j + 2))
    } else if rest.starts_with("\u{2009}".as_bytes()) || rest.starts_with("\u{202f}".as_bytes()) {
        Some((GroupSep::Thin, j + 3))
    } else if rest.starts_with(b"\\ ") {
        Some((GroupSep::Space, j + 2))
    } else if rest.starts_with(b" ") || rest.starts_with(b"~") {
        Some((GroupSep::Space, j + 1))
    } else if rest.starts_with("\u{00a0}".as_bytes()) {
        Some((GroupSep::Space, j + 2))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(d: &str) -> Tok {
        Tok::Num {
            digits: d.into(),
            raw_len: d.len(),
            plain: true,
        }
    }

    #[test]
    fn numbers_and_groups() {
        assert_eq!(
            lex("025").unwrap(),
            vec![Tok::Num {
                digits: "25".into(),
                raw_len: 3,
                plain: true
            }]
        );
        assert_eq!(lex("27.00").unwrap(), vec![num("27")]);
        assert_eq!(lex("2.5").unwrap(), vec![Tok::NonInt]);
        let g = |d: &str| Tok::Num {
            digits: d.into(),
            raw_len: d.len(),
            plain: false,
        };
        assert_eq!(lex("1,000").unwrap(), vec![g("1000")]);
        assert_eq!(lex("1{,}000{,}000").unwrap(), vec![g("1000000")]);
        assert_eq!(lex("1\\,000").unwrap(), vec![g("1000")]);
        assert_eq!(lex("12 345").unwrap(), vec![g("12345")]);
        let zeros = Tok::Num {
            digits: "0".into(),
            raw_len: 3,
            plain: true,
        };
        assert_eq!(lex("1,000 000").unwrap(), vec![g("1000"), zeros]);
        assert_eq!(lex("1,23").unwrap(), vec![num("1"), Tok::Sep, num("23")]);
    }

    #[test]
    fn noise_is_dropped() {
        assert_eq!(
            lex("$\\left( 42 \\right)$").unwrap(),
            vec![Tok::Open, num("42"), Tok::Close]
        );
        assert_eq!(lex("\\text{42}").unwrap(), vec![num("42")]);
        assert_eq!(lex("42^\\circ").unwrap(), vec![num("42")]);
        assert_eq!(lex("42^{\\circ}").unwrap(), vec![num("42")]);
        assert_eq!(lex("\\$42\\%").unwrap(), vec![num("42")]);
        assert_eq!(
            lex("42 \\text{ cm}").unwrap(),
            vec![num("42"), Tok::Word { unit: true }]
        );
        assert_eq!(
            lex("42x").unwrap(),
            vec![num("42"), Tok::Word { unit: false }]
        );
    }

    #[test]
    fn deep_nesting_is_refused() {
        let deep = "{".repeat(1000);
        assert!(lex(&deep).is_none());
    }
}
