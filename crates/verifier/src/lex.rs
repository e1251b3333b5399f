//! The lexer: answer text (LaTeX or plain) to a flat list of tokens, dropping
//! everything that never changes an integer's value (math delimiters, spacing
//! commands, `\left`/`\right`, formatting wrappers, degrees, `\%`, `\$`). The
//! scanning it shares with the math lexer is [`crate::scan`].

pub(crate) use crate::scan::MAX_DEPTH;
use crate::scan::{self, Cmd, Dialect, Lexeme, Scan, Uni};

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

impl Lexeme for Tok {
    const OPEN: Tok = Tok::Open;
    const CLOSE: Tok = Tok::Close;
    const OTHER: Tok = Tok::Other;
}

/// How a thousands group is separated, so one number uses one kind throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupSep {
    Comma,
    BraceComma,
    Thin,
    Space,
}

/// Wrappers, dropped commands and degrees as the integer lexer reads them:
/// `\mathrm{…}` and `\operatorname{…}` hold units, `\overline` is transparent,
/// and degree commands are dropped.
static DIALECT: Dialect = Dialect {
    text: &["mathrm", "operatorname"],
    transparent: &["overline"],
    ignored: &["circ", "degree", "degrees", "deg"],
};

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

/// Result of lexing: the tokens, or `None` when the text is too deeply nested
/// to be an answer (more than [`MAX_DEPTH`] open braces).
pub(crate) fn lex(text: &str) -> Option<Vec<Tok>> {
    Lexer {
        sc: Scan::new(text, &DIALECT),
        spaced: false,
    }
    .run()
}

struct Lexer<'a> {
    sc: Scan<'a, Tok>,
    spaced: bool,
}

impl Lexer<'_> {
    fn run(mut self) -> Option<Vec<Tok>> {
        while !self.sc.done() {
            let b = self.sc.s[self.sc.i];
            let was_spaced = std::mem::replace(&mut self.spaced, false);
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | b'~' => {
                    self.sc.i += 1;
                    self.spaced = true;
                }
                b'$' | b'%' => self.sc.i += 1,
                b'0'..=b'9' => self.number(),
                b'.' if self.sc.peek(1).is_some_and(|d| d.is_ascii_digit()) => {
                    self.sc.i = scan::digits_end(self.sc.s, self.sc.i + 1);
                    self.sc.out.push(Tok::NonInt);
                }
                // A stray full stop ends a sentence; it separates nothing.
                b'.' => self.sc.i += 1,
                b'+' => self.sc.push(Tok::Plus),
                b'-' => self.sc.push(Tok::Minus),
                b'*' => self.sc.push(Tok::Times),
                b'/' => self.sc.push(Tok::Div),
                b'!' => self.sc.push(Tok::Bang),
                b'(' | b'[' => self.sc.push(Tok::Open),
                b')' | b']' => self.sc.push(Tok::Close),
                b',' | b';' => self.sc.push(Tok::Sep),
                b'=' | b':' => self.sc.push(Tok::Eq),
                // A degree sign (`^\circ`, `^{\circ}`) is dropped; anything else is a power.
                b'^' => {
                    if !self.sc.degree_sign() {
                        self.sc.push(Tok::Pow);
                    }
                }
                b'{' => self.sc.open_brace()?,
                b'}' => self.sc.close_brace(),
                b'\\' => {
                    if !self.command(was_spaced)? {
                        self.spaced = true;
                    }
                }
                b'a'..=b'z' | b'A'..=b'Z' => {
                    let w = self.sc.ascii_word();
                    self.word(w, was_spaced);
                }
                0x80.. => self.unicode(),
                _ => self.sc.push(Tok::Other),
            }
        }
        Some(self.sc.out)
    }

    fn word(&mut self, w: &str, spaced: bool) {
        if w == "and" || w == "or" {
            self.sc.out.push(Tok::Sep);
        } else {
            // Magnitude words change the value (`42 \text{ million}`): never units.
            let magnitude = MAGNITUDES.iter().any(|m| w.eq_ignore_ascii_case(m));
            let unit = !magnitude && (self.sc.in_text() || (spaced && w.len() >= 2));
            self.sc.out.push(Tok::Word { unit });
        }
    }

    fn unicode(&mut self) {
        let from = self.sc.i;
        let tok = match scan::classify(self.sc.next_char()) {
            Uni::Minus => Tok::Minus,
            Uni::Times => Tok::Times,
            Uni::Div => Tok::Div,
            Uni::Degree | Uni::Percent => return,
            Uni::Space => {
                self.spaced = true;
                return;
            }
            // Non-ASCII words after a number are units (`42个`, `5 €`-like).
            Uni::Letter => {
                self.sc.word_from(from);
                Tok::Word { unit: true }
            }
            Uni::Other => Tok::Other,
        };
        self.sc.out.push(tok);
    }

    /// A backslash command. Returns `Some(true)` when it produced or consumed
    /// something meaningful, `Some(false)` for a spacing command (the caller
    /// marks a space), `None` when nesting is too deep.
    fn command(&mut self, spaced: bool) -> Option<bool> {
        let name = match self.sc.command() {
            Cmd::Name(name) => name,
            Cmd::End => {
                self.sc.out.push(Tok::Other);
                return Some(true);
            }
            Cmd::Symbol(c) => {
                match c {
                    b',' | b';' | b':' | b'!' | b' ' | b'>' | b'\\' => return Some(false),
                    b'$' | b'%' | b'(' | b')' | b'[' | b']' => {}
                    b'{' => self.sc.out.push(Tok::Open),
                    b'}' => self.sc.out.push(Tok::Close),
                    _ => self.sc.out.push(Tok::Other),
                }
                return Some(true);
            }
        };
        if self.sc.wrapper(name)? {
            // A wrapper right after a space keeps the space: `42 \text{cm}`.
            self.spaced = spaced;
            return Some(true);
        }
        match name {
            "cdot" | "times" | "ast" => self.sc.out.push(Tok::Times),
            "div" => self.sc.out.push(Tok::Div),
            "frac" | "dfrac" | "tfrac" | "cfrac" => self.sc.out.push(Tok::Frac),
            "binom" | "dbinom" | "tbinom" => self.sc.out.push(Tok::Binom),
            "pm" | "mp" => self.sc.out.push(Tok::PlusMinus),
            "colon" => self.sc.out.push(Tok::Eq),
            "lbrace" | "lparen" => self.sc.out.push(Tok::Open),
            "rbrace" | "rparen" => self.sc.out.push(Tok::Close),
            // `\left.` and `\right.` are invisible delimiters.
            "left" | "right" => self.sc.skip_null_delimiter(),
            "quad" | "qquad" | "enspace" | "thinspace" | "medspace" => return Some(false),
            // Degrees and formatting switches keep the preceding space.
            n if self.sc.ignored(n) => self.spaced = spaced,
            _ => self.sc.out.push(Tok::Other),
        }
        Some(true)
    }

    /// A number: digits, well-formed thousands groups, and a fractional part
    /// that is all zeros (`27.0`) or not (`2.5` is [`Tok::NonInt`]).
    fn number(&mut self) {
        let (digits, grouped) = self.sc.integer_part(group_sep);
        let raw_len = digits.len();
        // Fractional part.
        if self.sc.peek(0) == Some(b'.') {
            let from = self.sc.i + 1;
            let end = scan::digits_end(self.sc.s, from);
            self.sc.i = end;
            if self.sc.s[from..end].iter().any(|&d| d != b'0') {
                self.sc.out.push(Tok::NonInt);
                return;
            }
        }
        let trimmed = digits.trim_start_matches('0');
        let canonical = if trimmed.is_empty() {
            "0".to_string()
        } else if trimmed.len() == digits.len() {
            digits
        } else {
            trimmed.to_string()
        };
        self.sc.out.push(Tok::Num {
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
