//! The math-mode lexer: answer text (LaTeX or plain) to tokens, one forward pass.
//!
//! It drops what never changes a value (math delimiters, spacing, `\left`/`\right`,
//! font wrappers, `\$`), turns degrees and `\%` into marker tokens, keeps the
//! words of `\text{…}`, and reads numbers with their decimals, well-formed
//! thousands groups and `e` exponents.

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
    PlusMinus,
    Times,
    Div,
    Pow,
    Sub,
    Bang,
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

/// Deepest brace nesting read; deeper text is not parsed exactly.
pub(crate) const MAX_DEPTH: usize = 64;
/// Longest integer or fractional digit run read exactly.
pub(crate) const MAX_DIGITS: usize = 1000;

const TEXT_WRAPPERS: &[&str] = &[
    "text",
    "textrm",
    "textbf",
    "textit",
    "textnormal",
    "textsf",
    "texttt",
    "mbox",
    "hbox",
    "emph",
    "textup",
];
const MATH_WRAPPERS: &[&str] = &[
    "mathbf",
    "mathit",
    "mathsf",
    "mathtt",
    "mathnormal",
    "mathrm",
    "operatorname",
    "boldsymbol",
    "bm",
    "boxed",
    "fbox",
    "underline",
    "displaystyle",
];
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
    "biggl",
    "biggr",
    "displaystyle",
    "textstyle",
    "quad",
    "qquad",
    "enspace",
    "thinspace",
    "medspace",
    "thickspace",
    "negthinspace",
    "dollar",
    "bf",
    "rm",
    "it",
    "limits",
    "nolimits",
];

/// Lexes `text`; `None` when it nests deeper than [`MAX_DEPTH`].
pub(crate) fn lex(text: &str) -> Option<Vec<T>> {
    let mut l = Lexer {
        s: text.as_bytes(),
        text,
        i: 0,
        out: Vec::new(),
        frames: Vec::new(),
        text_frames: 0,
        brackets: 0,
    };
    l.run()?;
    Some(l.out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Group,
    Transparent,
    Text,
}

struct Lexer<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
    out: Vec<T>,
    frames: Vec<Frame>,
    text_frames: usize,
    brackets: i64,
}

impl Lexer<'_> {
    fn run(&mut self) -> Option<()> {
        while self.i < self.s.len() {
            let b = self.s[self.i];
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | b'~' | b'$' => self.i += 1,
                b'%' => self.push(T::Percent),
                b'0'..=b'9' => self.number(),
                b'.' if self.s.get(self.i + 1).is_some_and(u8::is_ascii_digit) => self.number(),
                b'.' => self.i += 1,
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
                b'^' => self.caret(),
                b'{' => {
                    if self.frames.len() >= MAX_DEPTH {
                        return None;
                    }
                    self.frames.push(Frame::Group);
                    self.push(T::LGroup);
                }
                b'}' => {
                    self.i += 1;
                    match self.frames.pop() {
                        Some(Frame::Group) => self.out.push(T::RGroup),
                        Some(Frame::Text) => self.text_frames -= 1,
                        Some(Frame::Transparent) => {}
                        None => self.out.push(T::Other),
                    }
                }
                b'\\' => self.command()?,
                b'a'..=b'z' | b'A'..=b'Z' => self.letters(),
                0x80.. => self.unicode(),
                _ => self.push(T::Other),
            }
        }
        Some(())
    }

    fn push(&mut self, t: T) {
        self.i += 1;
        self.emit(t);
    }

    /// Appends a token, keeping count of open brackets (for thousands commas).
    fn emit(&mut self, t: T) {
        match t {
            T::LParen | T::LBrack | T::LSet => self.brackets += 1,
            T::RParen | T::RBrack | T::RSet => self.brackets -= 1,
            _ => {}
        }
        self.out.push(t);
    }

    fn letters(&mut self) {
        let start = self.i;
        while self.s.get(self.i).is_some_and(u8::is_ascii_alphabetic) {
            self.i += 1;
        }
        let w = &self.text[start..self.i];
        if w == "and" || w == "or" {
            self.out.push(T::Comma);
        } else if self.text_frames > 0 || w.len() >= 3 {
            self.out.push(T::Word(w.to_ascii_lowercase()));
        } else {
            // `xy`, `2k`: single-letter variables side by side.
            for b in w.bytes() {
                self.out.push(T::Var(b));
            }
        }
    }

    fn unicode(&mut self) {
        let c = self.text[self.i..].chars().next().unwrap_or('\u{fffd}');
        self.i += c.len_utf8();
        match c {
            '\u{2212}' | '\u{fe63}' | '\u{ff0d}' => self.out.push(T::Minus),
            '\u{00d7}' | '\u{00b7}' | '\u{22c5}' => self.out.push(T::Times),
            '\u{00f7}' => self.out.push(T::Div),
            '\u{00b0}' => self.out.push(T::Degree),
            '\u{03c0}' => self.out.push(T::Pi),
            '\u{221e}' => self.out.push(T::Inf),
            '\u{221a}' => self.out.push(T::Sqrt),
            '\u{222a}' => self.out.push(T::Cup),
            '\u{00b1}' => self.out.push(T::PlusMinus),
            '\u{ff05}' => self.out.push(T::Percent),
            '\u{00a0}' | '\u{2009}' | '\u{202f}' | '\u{2007}' | '\u{3000}' => {}
            c if c.is_alphabetic() => {
                let mut w = String::from(c);
                while let Some(c) = self.text[self.i..].chars().next() {
                    if !c.is_alphabetic() {
                        break;
                    }
                    w.push(c);
                    self.i += c.len_utf8();
                }
                self.out.push(T::Word(w.to_lowercase()));
            }
            _ => self.out.push(T::Other),
        }
    }

    /// `^\circ`, `^{\circ}` are degrees; anything else is a power.
    fn caret(&mut self) {
        let rest = &self.text[self.i + 1..];
        let trimmed = rest.trim_start();
        let skip = if let Some(after) = trimmed.strip_prefix("\\circ") {
            Some(rest.len() - after.len())
        } else if let Some(inner) = trimmed.strip_prefix('{') {
            inner
                .trim_start()
                .strip_prefix("\\circ")
                .map(str::trim_start)
                .and_then(|a| a.strip_prefix('}'))
                .map(|after| rest.len() - after.len())
        } else {
            None
        };
        match skip {
            Some(n) => {
                self.i += 1 + n;
                self.out.push(T::Degree);
            }
            None => self.push(T::Pow),
        }
    }

    fn command(&mut self) -> Option<()> {
        let start = self.i + 1;
        let Some(&c) = self.s.get(start) else {
            self.i = start;
            self.out.push(T::Other);
            return Some(());
        };
        if !c.is_ascii_alphabetic() {
            self.i = start + 1;
            match c {
                b',' | b';' | b':' | b'!' | b' ' | b'>' | b'$' | b'(' | b')' | b'[' | b']' => {}
                b'%' => self.out.push(T::Percent),
                b'{' => self.emit(T::LSet),
                b'}' => self.emit(T::RSet),
                b'\\' => self.out.push(T::RowSep),
                _ => {
                    if c >= 0x80 {
                        self.i = start;
                    }
                    self.out.push(T::Other);
                }
            }
            return Some(());
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
            Some(Frame::Transparent)
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
            return Some(());
        }
        match name {
            "cdot" | "times" | "ast" => self.out.push(T::Times),
            "div" => self.out.push(T::Div),
            "frac" | "dfrac" | "tfrac" | "cfrac" => self.out.push(T::Frac),
            "sqrt" => {
                // `\sqrt[n]{…}` is not read exactly.
                let rest = self.text[end..].trim_start();
                self.out.push(if rest.starts_with('[') {
                    T::Other
                } else {
                    T::Sqrt
                });
            }
            "pi" => self.out.push(T::Pi),
            "infty" | "infinity" => self.out.push(T::Inf),
            "pm" | "mp" => self.out.push(T::PlusMinus),
            "cup" => self.out.push(T::Cup),
            "in" => self.out.push(T::In),
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
            "circ" | "degree" | "degrees" => self.out.push(T::Degree),
            "colon" => self.out.push(T::Eq),
            "cr" | "newline" => self.out.push(T::RowSep),
            "begin" | "end" => {
                let env = self.env_name();
                match env {
                    Some("pmatrix" | "bmatrix" | "matrix" | "Bmatrix" | "smallmatrix") => {
                        self.out.push(if name == "begin" {
                            T::MatBegin
                        } else {
                            T::MatEnd
                        });
                    }
                    // `\begin{array}{cc}`: the column spec is skipped.
                    Some("array") => {
                        if name == "begin" {
                            self.skip_group();
                            self.out.push(T::MatBegin);
                        } else {
                            self.out.push(T::MatEnd);
                        }
                    }
                    _ => self.out.push(T::Other),
                }
            }
            "left" | "right" => {
                if self.s.get(self.i) == Some(&b'.') {
                    self.i += 1;
                }
            }
            n if IGNORED.contains(&n) => {}
            _ => self.out.push(T::Other),
        }
        Some(())
    }

    /// The `{name}` after `\begin`/`\end`.
    fn env_name(&mut self) -> Option<&str> {
        let rest = &self.text[self.i..];
        let t = rest.trim_start();
        let inner = t.strip_prefix('{')?;
        let close = inner.find('}')?;
        let name = &inner[..close];
        self.i += rest.len() - t.len() + 1 + close + 1;
        Some(name.trim())
    }

    fn skip_group(&mut self) {
        let rest = &self.text[self.i..];
        let t = rest.trim_start();
        if let Some(inner) = t.strip_prefix('{')
            && let Some(close) = inner.find('}')
        {
            self.i += rest.len() - t.len() + 1 + close + 1;
        }
    }

    /// A number: digits with well-formed thousands groups (`{,}` and `,\!`
    /// anywhere; a bare `,` only outside brackets and before exactly three
    /// digits), a decimal part, an `e` exponent.
    fn number(&mut self) {
        let s = self.s;
        let start = self.i;
        let mut i = start;
        while i < s.len() && s[i].is_ascii_digit() {
            i += 1;
        }
        let mut int = String::from(&self.text[start..i]);
        let bracketed = self.brackets > 0;
        if (1..=3).contains(&(i - start)) && s[start] != b'0' {
            let mut kind: Option<&[u8]> = None;
            let mut j = i;
            loop {
                let rest = &s[j..];
                let sep: &[u8] = if rest.starts_with(b",\\!") {
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
                    break;
                };
                if kind.is_some_and(|k| k != sep) {
                    break;
                }
                let mut after = j + sep.len();
                while sep != b"," && s.get(after) == Some(&b' ') {
                    after += 1;
                }
                let g_end = after + 3;
                if g_end > s.len()
                    || !s[after..g_end].iter().all(u8::is_ascii_digit)
                    || s.get(g_end).is_some_and(u8::is_ascii_digit)
                {
                    break;
                }
                kind = Some(sep);
                int.push_str(&self.text[after..g_end]);
                j = g_end;
            }
            i = j;
        }
        let mut frac = String::new();
        if s.get(i) == Some(&b'.') && s.get(i + 1).is_some_and(u8::is_ascii_digit) {
            let k0 = i + 1;
            let mut k = k0;
            while k < s.len() && s[k].is_ascii_digit() {
                k += 1;
            }
            frac.push_str(&self.text[k0..k]);
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
                let e: i64 = self.text[d0..k].parse().unwrap_or(0);
                exp10 = if neg { -e } else { e };
                i = k;
            }
        }
        self.i = i;
        self.out.push(T::Num { int, frac, exp10 });
    }
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
