//! The math-mode lexer: answer text (LaTeX or plain) to tokens, one forward pass.
//!
//! It drops what never changes a value (math delimiters, spacing, `\left`/`\right`,
//! font wrappers, `\$`), turns degrees and `\%` into marker tokens, keeps the
//! words of `\text{…}`, and reads numbers with their decimals, well-formed
//! thousands groups and `e` exponents. The scanning it shares with the
//! integer lexer is [`crate::scan`].

pub(crate) use crate::scan::MAX_DEPTH;
use crate::scan::{self, Cmd, Dialect, Lexeme, Scan, Uni};

/// One token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum T {
    /// A decimal literal: integer digits (no separators), fractional digits,
    /// and a power of ten (`1.5e-3`).
    Num {
        int: String,
        frac: String,
        exp10: i64,
    },
    /// A single-letter variable (`x`; `i` is the imaginary unit for the parser).
    Var(u8),
    /// A word (lower case): `\text{east}`, or three or more letters in a row.
    Word(String),
    Pi,
    Inf,
    Plus,
    Minus,
    Times,
    Div,
    Pow,
    Sub,
    Bang,
    /// `\pm`, `\mp`, `±`.
    PlusMinus,
    LParen,
    RParen,
    LBrack,
    RBrack,
    /// `{` of a LaTeX group.
    LGroup,
    RGroup,
    /// `\{`, `\lbrace`.
    LSet,
    RSet,
    /// `,`, `;`, `and`, `or`.
    Comma,
    Eq,
    Cup,
    /// `\in`.
    In,
    Amp,
    RowSep,
    MatBegin,
    MatEnd,
    Frac,
    Sqrt,
    Percent,
    Degree,
    /// Anything the exact parser does not read (`\sin`, `<`, `_`, `\sqrt[3]`…).
    Other,
}

impl Lexeme for T {
    const OPEN: T = T::LGroup;
    const CLOSE: T = T::RGroup;
    const OTHER: T = T::Other;
}

/// Longest integer or fractional digit run read exactly.
pub(crate) const MAX_DIGITS: usize = 1000;

/// Wrappers and dropped commands as the math lexer reads them: `\textup{…}`
/// is text, `\mathrm`, `\operatorname` and `\displaystyle{…}` are transparent.
static DIALECT: Dialect = Dialect {
    text: &["textup"],
    transparent: &["mathrm", "operatorname", "displaystyle"],
    ignored: &["biggl", "biggr", "limits", "nolimits"],
};

/// Lexes `text`; `None` when it nests deeper than [`MAX_DEPTH`].
pub(crate) fn lex(text: &str) -> Option<Vec<T>> {
    let mut l = Lexer {
        sc: Scan::new(text, &DIALECT),
        brackets: 0,
    };
    l.run()?;
    Some(l.sc.out)
}

struct Lexer<'a> {
    sc: Scan<'a, T>,
    brackets: i64,
}

impl Lexer<'_> {
    fn run(&mut self) -> Option<()> {
        while !self.sc.done() {
            let b = self.sc.s[self.sc.i];
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | b'~' | b'$' => self.sc.i += 1,
                b'%' => self.push(T::Percent),
                b'0'..=b'9' => self.number(),
                b'.' if self.sc.peek(1).is_some_and(|d| d.is_ascii_digit()) => self.number(),
                b'.' => self.sc.i += 1,
                b'+' => self.push(T::Plus),
                b'-' => self.push(T::Minus),
                b'*' => self.push(T::Times),
                b'/' => self.push(T::Div),
                b'!' => self.push(T::Bang),
                b'(' => self.push(T::LParen),
                b')' => self.push(T::RParen),
                b'[' => self.push(T::LBrack),
                b']' => self.push(T::RBrack),
                b',' | b';' => self.push(T::Comma),
                b'=' => self.push(T::Eq),
                b'&' => self.push(T::Amp),
                b'_' => self.push(T::Sub),
                // `^\circ`, `^{\circ}` are degrees; anything else is a power.
                b'^' => {
                    if self.sc.degree_sign() {
                        self.sc.out.push(T::Degree);
                    } else {
                        self.push(T::Pow);
                    }
                }
                b'{' => self.sc.open_brace()?,
                b'}' => self.sc.close_brace(),
                b'\\' => self.command()?,
                b'a'..=b'z' | b'A'..=b'Z' => self.letters(),
                0x80.. => self.unicode(),
                _ => self.push(T::Other),
            }
        }
        Some(())
    }

    fn push(&mut self, t: T) {
        self.sc.i += 1;
        self.emit(t);
    }

    /// Appends a token, keeping count of open brackets (for thousands commas).
    fn emit(&mut self, t: T) {
        match t {
            T::LParen | T::LBrack | T::LSet => self.brackets += 1,
            T::RParen | T::RBrack | T::RSet => self.brackets -= 1,
            _ => {}
        }
        self.sc.out.push(t);
    }

    fn letters(&mut self) {
        let w = self.sc.ascii_word();
        if w == "and" || w == "or" {
            self.sc.out.push(T::Comma);
        } else if self.sc.in_text() || w.len() >= 3 {
            self.sc.out.push(T::Word(w.to_ascii_lowercase()));
        } else {
            // `xy`, `2k`: single-letter variables side by side.
            for b in w.bytes() {
                self.sc.out.push(T::Var(b));
            }
        }
    }

    fn unicode(&mut self) {
        let from = self.sc.i;
        let t = match self.sc.next_char() {
            '\u{03c0}' => T::Pi,
            '\u{221e}' => T::Inf,
            '\u{221a}' => T::Sqrt,
            '\u{222a}' => T::Cup,
            '\u{00b1}' => T::PlusMinus,
            c => match scan::classify(c) {
                Uni::Minus => T::Minus,
                Uni::Times => T::Times,
                Uni::Div => T::Div,
                Uni::Degree => T::Degree,
                Uni::Percent => T::Percent,
                Uni::Space => return,
                Uni::Letter => T::Word(self.sc.word_from(from).to_lowercase()),
                Uni::Other => T::Other,
            },
        };
        self.sc.out.push(t);
    }

    fn command(&mut self) -> Option<()> {
        let name = match self.sc.command() {
            Cmd::Name(name) => name,
            Cmd::End => {
                self.sc.out.push(T::Other);
                return Some(());
            }
            Cmd::Symbol(c) => {
                match c {
                    b',' | b';' | b':' | b'!' | b' ' | b'>' | b'$' | b'(' | b')' | b'[' | b']' => {}
                    b'%' => self.sc.out.push(T::Percent),
                    b'{' => self.emit(T::LSet),
                    b'}' => self.emit(T::RSet),
                    b'\\' => self.sc.out.push(T::RowSep),
                    _ => self.sc.out.push(T::Other),
                }
                return Some(());
            }
        };
        if self.sc.wrapper(name)? {
            return Some(());
        }
        match name {
            "cdot" | "times" | "ast" => self.sc.out.push(T::Times),
            "div" => self.sc.out.push(T::Div),
            "frac" | "dfrac" | "tfrac" | "cfrac" => self.sc.out.push(T::Frac),
            "sqrt" => {
                // `\sqrt[n]{…}` is not read exactly.
                let rest = self.sc.text[self.sc.i..].trim_start();
                self.sc.out.push(if rest.starts_with('[') {
                    T::Other
                } else {
                    T::Sqrt
                });
            }
            "pi" => self.sc.out.push(T::Pi),
            "infty" | "infinity" => self.sc.out.push(T::Inf),
            "pm" | "mp" => self.sc.out.push(T::PlusMinus),
            "cup" => self.sc.out.push(T::Cup),
            "in" => self.sc.out.push(T::In),
            "lbrace" => self.emit(T::LSet),
            "rbrace" => self.emit(T::RSet),
            "emptyset" | "varnothing" => {
                self.emit(T::LSet);
                self.emit(T::RSet);
            }
            // Vectors: `\langle 1, 2 \rangle` is the tuple.
            "langle" => self.emit(T::LParen),
            "rangle" => self.emit(T::RParen),
            "lparen" => self.emit(T::LParen),
            "rparen" => self.emit(T::RParen),
            "lbrack" => self.emit(T::LBrack),
            "rbrack" => self.emit(T::RBrack),
            "circ" | "degree" | "degrees" => self.sc.out.push(T::Degree),
            "colon" => self.sc.out.push(T::Eq),
            "cr" | "newline" => self.sc.out.push(T::RowSep),
            "begin" | "end" => {
                let env = self.env_name();
                match env {
                    Some("pmatrix" | "bmatrix" | "matrix" | "Bmatrix" | "smallmatrix") => {
                        self.sc.out.push(if name == "begin" {
                            T::MatBegin
                        } else {
                            T::MatEnd
                        });
                    }
                    // `\begin{array}{cc}`: the column spec is skipped.
                    Some("array") => {
                        if name == "begin" {
                            self.skip_group();
                            self.sc.out.push(T::MatBegin);
                        } else {
                            self.sc.out.push(T::MatEnd);
                        }
                    }
                    _ => self.sc.out.push(T::Other),
                }
            }
            "left" | "right" => self.sc.skip_null_delimiter(),
            n if self.sc.ignored(n) => {}
            _ => self.sc.out.push(T::Other),
        }
        Some(())
    }

    /// The `{name}` after `\begin`/`\end`.
    fn env_name(&mut self) -> Option<&str> {
        let rest = &self.sc.text[self.sc.i..];
        let t = rest.trim_start();
        let inner = t.strip_prefix('{')?;
        let close = inner.find('}')?;
        let name = &inner[..close];
        self.sc.i += rest.len() - t.len() + 1 + close + 1;
        Some(name.trim())
    }

    fn skip_group(&mut self) {
        let rest = &self.sc.text[self.sc.i..];
        let t = rest.trim_start();
        if let Some(inner) = t.strip_prefix('{')
            && let Some(close) = inner.find('}')
        {
            self.sc.i += rest.len() - t.len() + 1 + close + 1;
        }
    }

    /// A number: digits with well-formed thousands groups (`{,}` and `,\!`
    /// anywhere; a bare `,` only outside brackets and before exactly three
    /// digits), a decimal part, an `e` exponent.
    fn number(&mut self) {
        let bracketed = self.brackets > 0;
        let (int, _) = self.sc.integer_part(|s, j| group_sep(s, j, bracketed));
        let (s, text) = (self.sc.s, self.sc.text);
        let mut i = self.sc.i;
        let mut frac = String::new();
        if s.get(i) == Some(&b'.') && s.get(i + 1).is_some_and(u8::is_ascii_digit) {
            let k = scan::digits_end(s, i + 1);
            frac.push_str(&text[i + 1..k]);
            i = k;
        }
        // `1.5e-3`, `2E5`: an exponent right after the digits, not a word.
        let mut exp10 = 0i64;
        if matches!(s.get(i), Some(b'e' | b'E')) {
            let mut k = i + 1;
            let neg = s.get(k) == Some(&b'-');
            if matches!(s.get(k), Some(b'-' | b'+')) {
                k += 1;
            }
            let d0 = k;
            while k < s.len() && s[k].is_ascii_digit() && k - d0 < 6 {
                k += 1;
            }
            if k > d0 && !s.get(k).is_some_and(|c| c.is_ascii_alphanumeric()) {
                let e: i64 = text[d0..k].parse().unwrap_or(0);
                exp10 = if neg { -e } else { e };
                i = k;
            }
        }
        self.sc.i = i;
        self.sc.out.push(T::Num { int, frac, exp10 });
    }
}

/// A thousands separator at `j` (`,\!`, `, \!`, `{,}`, `\,`, and a bare `,`
/// outside brackets) and where its group starts, after any spaces (not after a
/// bare `,`). Each separator is its own kind.
fn group_sep(s: &[u8], j: usize, bracketed: bool) -> Option<(&'static [u8], usize)> {
    let rest = &s[j..];
    let sep: &'static [u8] = if rest.starts_with(b",\\!") {
        b",\\!"
    } else if rest.starts_with(b", \\!") {
        b", \\!"
    } else if rest.starts_with(b"{,}") {
        b"{,}"
    } else if rest.starts_with(b"\\,") {
        b"\\,"
    } else if rest.starts_with(b",") && !bracketed {
        b","
    } else {
        return None;
    };
    let mut after = j + sep.len();
    while sep != b"," && s.get(after) == Some(&b' ') {
        after += 1;
    }
    Some((sep, after))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(int: &str, frac: &str) -> T {
        T::Num {
            int: int.into(),
            frac: frac.into(),
            exp10: 0,
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(lex("10,\\!080").unwrap(), vec![n("10080", "")]);
        assert_eq!(lex("58,500").unwrap(), vec![n("58500", "")]);
        assert_eq!(
            lex("(12,102)").unwrap(),
            vec![T::LParen, n("12", ""), T::Comma, n("102", ""), T::RParen]
        );
        assert_eq!(lex(".0000672").unwrap(), vec![n("", "0000672")]);
        assert_eq!(
            lex("1.5e-3").unwrap(),
            vec![T::Num {
                int: "1".into(),
                frac: "5".into(),
                exp10: -3
            }]
        );
        assert_eq!(lex("90^\\circ").unwrap(), vec![n("90", ""), T::Degree]);
    }

    #[test]
    fn words_and_vars() {
        assert_eq!(lex("\\text{East}").unwrap(), vec![T::Word("east".into())]);
        assert_eq!(lex("2k").unwrap(), vec![n("2", ""), T::Var(b'k')]);
        assert_eq!(lex("ellipse").unwrap(), vec![T::Word("ellipse".into())]);
    }
}
