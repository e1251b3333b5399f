//! The LaTeX scanning both lexers share ([`crate::lex`] for integer answers,
//! `math::lex` for math answers): braces and wrapper frames, command names, the
//! tables of dropped commands, `^\circ`, non-ASCII symbols and the integer part
//! of a number with its thousands groups. What a token means stays with each
//! lexer: a [`Dialect`] names its extra wrappers and dropped commands.

/// Deepest brace nesting an answer may have; deeper text is refused.
pub(crate) const MAX_DEPTH: usize = 64;

/// Wrappers whose argument is text, in both lexers: `\text{42}` is 42.
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
];
/// Wrappers whose argument is read as if it stood alone, in both lexers.
const TRANSPARENT: &[&str] = &[
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
];
/// Delimiter sizes, dropped by both lexers and by `math::text`.
pub(crate) const SIZING: &[&str] = &["bigl", "bigr", "big", "Big", "bigg", "Bigg"];
/// Other commands both lexers drop with no argument: sizes, styles, spacing, font switches.
const IGNORED: &[&str] = &[
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
    "dollar",
    "bf",
    "rm",
    "it",
];

/// What one lexer adds to the shared tables.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// More wrappers whose argument is text.
    pub(crate) text: &'static [&'static str],
    /// More wrappers whose argument is read as if it stood alone.
    pub(crate) transparent: &'static [&'static str],
    /// More commands dropped with no argument.
    pub(crate) ignored: &'static [&'static str],
}

/// The tokens the scanner pushes itself (for braces).
pub(crate) trait Lexeme: Sized {
    /// The `{` of a group.
    const OPEN: Self;
    /// Its `}`.
    const CLOSE: Self;
    /// A `}` with no `{`.
    const OTHER: Self;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Group,
    Transparent,
    Text,
}

/// What follows a `\`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmd<'a> {
    /// Nothing: the text ends there.
    End,
    /// A symbol: `\,`, `\{`, `\\`…, or the first byte of a non-ASCII character.
    Symbol(u8),
    /// A name of ASCII letters.
    Name(&'a str),
}

/// What both lexers make of a non-ASCII character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Uni {
    /// The Unicode minus and its small and full-width forms; not the en dash, which writes ranges.
    Minus,
    Times,
    Div,
    /// `°`.
    Degree,
    /// The full-width `％`.
    Percent,
    /// No-break, thin and ideographic spaces.
    Space,
    /// The start of a word.
    Letter,
    Other,
}

/// What both lexers make of the non-ASCII character `c`.
pub(crate) fn classify(c: char) -> Uni {
    match c {
        '\u{2212}' | '\u{fe63}' | '\u{ff0d}' => Uni::Minus,
        '\u{00d7}' | '\u{00b7}' | '\u{22c5}' => Uni::Times,
        '\u{00f7}' => Uni::Div,
        '\u{00b0}' => Uni::Degree,
        '\u{ff05}' => Uni::Percent,
        '\u{00a0}' | '\u{2009}' | '\u{202f}' | '\u{2007}' | '\u{3000}' => Uni::Space,
        c if c.is_alphabetic() => Uni::Letter,
        _ => Uni::Other,
    }
}

/// The end of the run of ASCII digits from `i`.
pub(crate) fn digits_end(s: &[u8], mut i: usize) -> usize {
    while s.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
}

/// The end of the run of ASCII letters from `i`.
fn letters_end(s: &[u8], mut i: usize) -> usize {
    while s.get(i).is_some_and(u8::is_ascii_alphabetic) {
        i += 1;
    }
    i
}

/// A pass over an answer: the position, the tokens so far, and the open braces.
pub(crate) struct Scan<'a, K> {
    pub(crate) s: &'a [u8],
    pub(crate) text: &'a str,
    pub(crate) i: usize,
    pub(crate) out: Vec<K>,
    frames: Vec<Frame>,
    text_frames: usize,
    dialect: &'static Dialect,
}

impl<'a, K: Lexeme> Scan<'a, K> {
    pub(crate) fn new(text: &'a str, dialect: &'static Dialect) -> Self {
        Scan {
            s: text.as_bytes(),
            text,
            i: 0,
            out: Vec::new(),
            frames: Vec::new(),
            text_frames: 0,
            dialect,
        }
    }

    /// Whether the text is all read.
    pub(crate) fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    /// The byte `ahead` bytes on.
    pub(crate) fn peek(&self, ahead: usize) -> Option<u8> {
        self.s.get(self.i + ahead).copied()
    }

    /// Moves past one byte and pushes `t`.
    pub(crate) fn push(&mut self, t: K) {
        self.i += 1;
        self.out.push(t);
    }

    /// Whether the position is inside a text wrapper (`\text{…}`).
    pub(crate) fn in_text(&self) -> bool {
        self.text_frames > 0
    }

    /// At a `{`: opens a group; `None` past [`MAX_DEPTH`].
    pub(crate) fn open_brace(&mut self) -> Option<()> {
        if self.frames.len() >= MAX_DEPTH {
            return None;
        }
        self.frames.push(Frame::Group);
        self.push(K::OPEN);
        Some(())
    }

    /// At a `}`: closes a group, or a wrapper's argument (no token), or is
    /// [`Lexeme::OTHER`] when nothing is open.
    pub(crate) fn close_brace(&mut self) {
        self.i += 1;
        match self.frames.pop() {
            Some(Frame::Group) => self.out.push(K::CLOSE),
            Some(Frame::Text) => self.text_frames -= 1,
            Some(Frame::Transparent) => {}
            None => self.out.push(K::OTHER),
        }
    }

    /// At a `\`: what follows, moving past it (but not past a non-ASCII
    /// character, which is read again as text).
    pub(crate) fn command(&mut self) -> Cmd<'a> {
        let text = self.text;
        let start = self.i + 1;
        let Some(&c) = self.s.get(start) else {
            self.i = start;
            return Cmd::End;
        };
        if !c.is_ascii_alphabetic() {
            self.i = if c >= 0x80 { start } else { start + 1 };
            return Cmd::Symbol(c);
        }
        self.i = letters_end(self.s, start);
        Cmd::Name(&text[start..self.i])
    }

    /// Right after a command's name: `Some(true)` when it is a wrapper, whose
    /// `{` (after any white space) is then entered; `Some(false)` when it is
    /// not; `None` past [`MAX_DEPTH`].
    pub(crate) fn wrapper(&mut self, name: &str) -> Option<bool> {
        let d = self.dialect;
        let frame = if TEXT_WRAPPERS.contains(&name) || d.text.contains(&name) {
            Frame::Text
        } else if TRANSPARENT.contains(&name) || d.transparent.contains(&name) {
            Frame::Transparent
        } else {
            return Some(false);
        };
        let mut j = self.i;
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
        Some(true)
    }

    /// Whether `name` is dropped with no argument.
    pub(crate) fn ignored(&self, name: &str) -> bool {
        SIZING.contains(&name) || IGNORED.contains(&name) || self.dialect.ignored.contains(&name)
    }

    /// After `\left` or `\right`: the invisible delimiter `.` goes too.
    pub(crate) fn skip_null_delimiter(&mut self) {
        if self.peek(0) == Some(b'.') {
            self.i += 1;
        }
    }

    /// At a `^`: when a degree sign follows (`^\circ`, `^{\circ}`), moves past
    /// it and says `true`; a power is left unread.
    pub(crate) fn degree_sign(&mut self) -> bool {
        let rest = &self.text[self.i + 1..];
        let trimmed = rest.trim_start();
        let after = match trimmed.strip_prefix("\\circ") {
            Some(after) => Some(after),
            None => trimmed
                .strip_prefix('{')
                .map(str::trim_start)
                .and_then(|inner| inner.strip_prefix("\\circ"))
                .map(str::trim_start)
                .and_then(|a| a.strip_prefix('}')),
        };
        let Some(after) = after else {
            return false;
        };
        self.i += 1 + rest.len() - after.len();
        true
    }

    /// At an ASCII letter: the run of ASCII letters, moving past it.
    pub(crate) fn ascii_word(&mut self) -> &'a str {
        let text = self.text;
        let start = self.i;
        self.i = letters_end(self.s, start);
        &text[start..self.i]
    }

    /// At a non-ASCII byte: the character, moving past it.
    pub(crate) fn next_char(&mut self) -> char {
        let c = self.text[self.i..].chars().next().unwrap_or('\u{fffd}');
        self.i += c.len_utf8();
        c
    }

    /// After a letter that started at `from`: moves past the letters that
    /// follow; the word from `from`.
    pub(crate) fn word_from(&mut self, from: usize) -> &'a str {
        let text = self.text;
        while let Some(c) = text[self.i..].chars().next() {
            if !c.is_alphabetic() {
                break;
            }
            self.i += c.len_utf8();
        }
        &text[from..self.i]
    }

    /// At a digit (or a `.`): the integer digits with their thousands groups,
    /// separators left out, and whether there were groups; moves past them.
    /// Only a lead of one to three digits not starting with `0` takes groups
    /// (`0,001` is a European decimal). `sep(s, j)` reads a separator at `j`:
    /// its kind and where its group starts. A group is exactly three digits
    /// with no digit after; one number keeps one kind of separator.
    pub(crate) fn integer_part<S: PartialEq>(
        &mut self,
        sep: impl Fn(&[u8], usize) -> Option<(S, usize)>,
    ) -> (String, bool) {
        let (s, text, start) = (self.s, self.text, self.i);
        let mut j = digits_end(s, start);
        let mut digits = String::from(&text[start..j]);
        let mut grouped = false;
        if (1..=3).contains(&(j - start)) && s[start] != b'0' {
            let mut kind: Option<S> = None;
            while let Some((k, after)) = sep(s, j) {
                if kind.as_ref().is_some_and(|have| *have != k) {
                    break;
                }
                let end = after + 3;
                if end > s.len()
                    || !s[after..end].iter().all(u8::is_ascii_digit)
                    || s.get(end).is_some_and(u8::is_ascii_digit)
                {
                    break;
                }
                kind = Some(k);
                digits.push_str(&text[after..end]);
                grouped = true;
                j = end;
            }
        }
        self.i = j;
        (digits, grouped)
    }
}
