//! The math-mode parser: tokens to an [`Ans`]wer (a value, a tuple, an interval,
//! a set, a matrix, an equation, or words), every value in the exact form of
//! [`super::value`].

use num_bigint::BigInt;
use num_traits::{One, Zero};

use super::lex::{MAX_DEPTH, MAX_DIGITS, T};
use super::value::{Expr, Fail, Rat, Res, sqrt_rat};

/// Most items of a list, set or tuple, and cells of a matrix.
const MAX_ITEMS: usize = 256;
/// Largest power of ten of a scientific-notation literal.
const MAX_EXP10: i64 = 400;

/// A parsed answer.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ans {
    Val(Expr),
    /// `x = E` (a single variable on the left).
    Assign(u8, Expr),
    /// Any other equation: left minus right, and the last side.
    Equation {
        diff: Expr,
        last: Expr,
    },
    /// `(a, b, …)`, ordered.
    Tuple(Vec<Ans>),
    Interval(Iv),
    Union(Vec<Iv>),
    /// `\{…\}`, a top-level list, or the values of `\pm`: unordered.
    Set(Vec<Ans>),
    Matrix(Vec<Vec<Expr>>),
    /// Words, lower case, single spaces.
    Text(String),
}

/// An interval.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Iv {
    pub lo: Bound,
    pub hi: Bound,
    pub lo_closed: bool,
    pub hi_closed: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Bound {
    NegInf,
    PosInf,
    Fin(Expr),
}

/// A parsed answer with its markers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Parsed {
    pub ans: Ans,
    /// Written with `\%`.
    pub percent: bool,
}

/// Parses a whole answer.
pub(crate) fn parse(mut toks: Vec<T>) -> Res<Parsed> {
    let before = toks.len();
    toks.retain(|t| *t != T::Degree);
    let _degrees = toks.len() < before;
    let before = toks.len();
    toks.retain(|t| *t != T::Percent);
    let percent = toks.len() < before;
    // Words before a value (`\text{the answer is } 5`) are not units; leading `x =` / `x \in` go.
    let toks = strip_lead(&toks);
    if toks.is_empty() {
        return Err(Fail::NotExact);
    }
    Ok(Parsed {
        ans: top(toks)?,
        percent,
    })
}

/// Drops a leading `x \in`.
fn strip_lead(t: &[T]) -> &[T] {
    match t {
        [T::Var(_), T::In, rest @ ..] => rest,
        _ => t,
    }
}

fn top(t: &[T]) -> Res<Ans> {
    if let Some(words) = text_only(t) {
        return Ok(Ans::Text(words));
    }
    let items = split_top(t, |x| *x == T::Comma);
    let items: Vec<&[T]> = items.into_iter().filter(|i| !i.is_empty()).collect();
    if items.len() > MAX_ITEMS {
        return Err(Fail::TooLarge);
    }
    match items.as_slice() {
        [] => Err(Fail::NotExact),
        [one] => item(one, 0),
        many => Ok(Ans::Set(flatten(
            many.iter()
                .map(|i| item(strip_lead(i), 0))
                .collect::<Res<_>>()?,
        ))),
    }
}

/// The words of an answer made only of words (and brackets around them).
fn text_only(t: &[T]) -> Option<String> {
    let mut out = String::new();
    let mut any = false;
    for x in t {
        match x {
            T::Word(w) => {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(w);
                any = true;
            }
            T::LParen | T::RParen | T::LGroup | T::RGroup => {}
            _ => return None,
        }
    }
    any.then_some(out)
}

/// Splits at tokens `is_sep` outside any bracket, group, set or matrix.
fn split_top(t: &[T], is_sep: impl Fn(&T) -> bool) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut depth = 0i64;
    let mut start = 0;
    for (i, x) in t.iter().enumerate() {
        match x {
            T::LParen | T::LBrack | T::LGroup | T::LSet | T::MatBegin => depth += 1,
            T::RParen | T::RBrack | T::RGroup | T::RSet | T::MatEnd => depth -= 1,
            _ => {}
        }
        if depth == 0 && is_sep(x) {
            out.push(&t[start..i]);
            start = i + 1;
        }
    }
    out.push(&t[start..]);
    out
}

/// Drops trailing units: words, with a power (`\text{ cm}^2`) or a per-unit
/// (`\text{km}/\text{h}`), when something else is left.
fn strip_units(mut t: &[T]) -> &[T] {
    loop {
        let n = t.len();
        let word = |x: &T| matches!(x, T::Word(_));
        let cut = match t {
            [.., w, T::Pow, T::Num { .. }] if word(w) => 3,
            [.., w, T::Pow, T::LGroup, T::Num { .. }, T::RGroup] if word(w) => 5,
            [.., a, T::Div, b] if word(a) && word(b) => 3,
            [.., w] if word(w) => 1,
            _ => 0,
        };
        if cut == 0 || cut >= n || t[..n - cut].iter().all(word) {
            return t;
        }
        t = &t[..n - cut];
    }
}

/// Index of the bracket closing the one at 0, when `t[0]` opens one.
fn closing(t: &[T]) -> Option<usize> {
    let mut depth = 0i64;
    for (i, x) in t.iter().enumerate() {
        match x {
            T::LParen | T::LBrack | T::LGroup | T::LSet | T::MatBegin => depth += 1,
            T::RParen | T::RBrack | T::RGroup | T::RSet | T::MatEnd => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

fn item(t: &[T], depth: usize) -> Res<Ans> {
    if depth > MAX_DEPTH {
        return Err(Fail::TooLarge);
    }
    let t = strip_units(t);
    if t.is_empty() {
        return Err(Fail::NotExact);
    }
    if let Some(words) = text_only(t) {
        return Ok(Ans::Text(words));
    }
    // Equations.
    let sides = split_top(t, |x| *x == T::Eq);
    if sides.len() >= 2 {
        let last = value(sides[sides.len() - 1])?;
        if let [T::Var(v)] = sides[0]
            && *v != b'i'
        {
            return Ok(Ans::Assign(*v, last));
        }
        let lhs = value(sides[0])?;
        let rhs = value(sides[1])?;
        return Ok(Ans::Equation {
            diff: lhs.sub(&rhs)?,
            last,
        });
    }
    // Unions of intervals.
    let parts = split_top(t, |x| *x == T::Cup);
    if parts.len() >= 2 {
        if parts.len() > MAX_ITEMS {
            return Err(Fail::TooLarge);
        }
        let mut ivs = Vec::new();
        for p in parts {
            match item(p, depth + 1)? {
                Ans::Interval(iv) => ivs.push(iv),
                Ans::Tuple(xs) if xs.len() == 2 => ivs.push(open_interval(&xs)?),
                _ => return Err(Fail::NotExact),
            }
        }
        return Ok(Ans::Union(ivs));
    }
    // One bracketed whole.
    if let Some(close) = closing(t)
        && close == t.len() - 1
    {
        let inner = &t[1..close];
        match (&t[0], &t[close]) {
            (T::LSet, T::RSet) => {
                let items = split_top(inner, |x| *x == T::Comma);
                if items.len() > MAX_ITEMS {
                    return Err(Fail::TooLarge);
                }
                return Ok(Ans::Set(flatten(
                    items
                        .into_iter()
                        .filter(|i| !i.is_empty())
                        .map(|i| item(i, depth + 1))
                        .collect::<Res<_>>()?,
                )));
            }
            (T::MatBegin, T::MatEnd) => return matrix(inner),
            (T::LGroup, T::RGroup) => return item(inner, depth + 1),
            (open @ (T::LParen | T::LBrack), close_t @ (T::RParen | T::RBrack)) => {
                let items = split_top(inner, |x| *x == T::Comma);
                if items.len() > MAX_ITEMS {
                    return Err(Fail::TooLarge);
                }
                let paren = *open == T::LParen && *close_t == T::RParen;
                if items.len() == 2 && (!paren || items.iter().any(|i| is_inf(i))) {
                    return Ok(Ans::Interval(Iv {
                        lo: bound(items[0])?,
                        hi: bound(items[1])?,
                        lo_closed: *open == T::LBrack,
                        hi_closed: *close_t == T::RBrack,
                    }));
                }
                if items.len() >= 2 && (paren || items.len() >= 3) {
                    return Ok(Ans::Tuple(
                        items
                            .into_iter()
                            .map(|i| item(i, depth + 1))
                            .collect::<Res<_>>()?,
                    ));
                }
            }
            _ => {}
        }
    }
    // A value; `\pm` gives two.
    let pm: Vec<usize> = t
        .iter()
        .enumerate()
        .filter(|(_, x)| **x == T::PlusMinus)
        .map(|(i, _)| i)
        .collect();
    match pm.as_slice() {
        [] => Ok(Ans::Val(value(t)?)),
        [k] => {
            let mut a = t.to_vec();
            a[*k] = T::Plus;
            let mut b = t.to_vec();
            b[*k] = T::Minus;
            Ok(Ans::Set(vec![Ans::Val(value(&a)?), Ans::Val(value(&b)?)]))
        }
        _ => Err(Fail::NotExact),
    }
}

/// The items of a set, the values of a `\pm` item spliced in (`\{1 \pm \sqrt{5}, -2\}` has three).
fn flatten(items: Vec<Ans>) -> Vec<Ans> {
    let mut out = Vec::with_capacity(items.len());
    for a in items {
        match a {
            Ans::Set(inner) => out.extend(inner),
            other => out.push(other),
        }
    }
    out
}

fn is_inf(t: &[T]) -> bool {
    matches!(t, [T::Inf] | [T::Minus, T::Inf] | [T::Plus, T::Inf])
}

fn bound(t: &[T]) -> Res<Bound> {
    Ok(match t {
        [T::Minus, T::Inf] => Bound::NegInf,
        [T::Inf] | [T::Plus, T::Inf] => Bound::PosInf,
        _ => Bound::Fin(value(t)?),
    })
}

/// `(a, b)` read as an open interval.
pub(crate) fn open_interval(xs: &[Ans]) -> Res<Iv> {
    let fin = |a: &Ans| match a {
        Ans::Val(v) => Ok(Bound::Fin(v.clone())),
        _ => Err(Fail::NotExact),
    };
    Ok(Iv {
        lo: fin(&xs[0])?,
        hi: fin(&xs[1])?,
        lo_closed: false,
        hi_closed: false,
    })
}

fn matrix(inner: &[T]) -> Res<Ans> {
    let mut rows = Vec::new();
    let mut cells = 0usize;
    for row in split_top(inner, |x| *x == T::RowSep) {
        if row.is_empty() {
            continue;
        }
        let mut out = Vec::new();
        for cell in split_top(row, |x| *x == T::Amp) {
            cells += 1;
            if cells > MAX_ITEMS {
                return Err(Fail::TooLarge);
            }
            out.push(value(cell)?);
        }
        rows.push(out);
    }
    let width = rows.first().map_or(0, Vec::len);
    if rows.is_empty() || rows.iter().any(|r| r.len() != width) {
        return Err(Fail::NotExact);
    }
    Ok(Ans::Matrix(rows))
}

/// One exact value.
pub(crate) fn value(t: &[T]) -> Res<Expr> {
    let mut p = Parser {
        t: t.to_vec(),
        i: 0,
        depth: 0,
    };
    let v = p.sum()?;
    if p.i != p.t.len() {
        return Err(Fail::NotExact);
    }
    Ok(v)
}

/// Recursive descent with implicit multiplication:
///
/// ```text
/// sum    := term (('+' | '-') term)*
/// term   := ('+' | '-') term | power ((('*' | '/') power) | power)*   mixed numbers: `1\frac{4}{5}`
/// power  := post ('^' arg)?
/// post   := atom '!'*
/// atom   := number | letter | \pi | '(' sum ')' | '{' sum '}' | \frac arg arg | \sqrt arg
/// arg    := '{' sum '}' | one digit | a letter | \pi
/// ```
struct Parser {
    t: Vec<T>,
    i: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&T> {
        self.t.get(self.i)
    }

    fn eat(&mut self, x: &T) -> bool {
        if self.peek() == Some(x) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn enter(&mut self) -> Res<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            Err(Fail::TooLarge)
        } else {
            Ok(())
        }
    }

    fn sum(&mut self) -> Res<Expr> {
        self.enter()?;
        let mut v = self.term()?;
        loop {
            if self.eat(&T::Plus) {
                v = v.add(&self.term()?)?;
            } else if self.eat(&T::Minus) {
                v = v.sub(&self.term()?)?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Ok(v)
    }

    fn term(&mut self) -> Res<Expr> {
        self.enter()?;
        let v = if self.eat(&T::Minus) {
            self.term()?.neg()
        } else if self.eat(&T::Plus) {
            self.term()?
        } else {
            let start = self.i;
            let mut v = self.power()?;
            // A mixed number: an integer literal, then a fraction of integer literals.
            if self.i == start + 1
                && matches!(&self.t[start], T::Num { frac, exp10: 0, .. } if frac.is_empty())
                && self.peek() == Some(&T::Frac)
            {
                let at = self.i;
                let q = self.power()?;
                let numeric = self.t[at..self.i].iter().all(|x| {
                    matches!(x, T::Frac | T::LGroup | T::RGroup)
                        || matches!(x, T::Num { frac, exp10: 0, .. } if frac.is_empty())
                });
                v = if numeric { v.add(&q)? } else { v.mul(&q)? };
            }
            loop {
                if self.eat(&T::Times) {
                    v = v.mul(&self.power()?)?;
                } else if self.eat(&T::Div) {
                    v = v.div(&self.power()?)?;
                } else if matches!(
                    self.peek(),
                    Some(T::Var(_) | T::Pi | T::LParen | T::LGroup | T::Frac | T::Sqrt)
                ) {
                    v = v.mul(&self.power()?)?;
                } else {
                    break;
                }
            }
            v
        };
        self.depth -= 1;
        Ok(v)
    }

    fn power(&mut self) -> Res<Expr> {
        let base = self.post()?;
        if !self.eat(&T::Pow) {
            return Ok(base);
        }
        let neg = self.eat(&T::Minus);
        let e = self.arg()?;
        let e = if neg { e.neg() } else { e };
        let Some(r) = e.as_rat() else {
            return Err(Fail::NotExact);
        };
        base.pow(&r)
    }

    fn post(&mut self) -> Res<Expr> {
        let mut v = self.atom()?;
        while self.eat(&T::Bang) {
            let n = v
                .as_rat()
                .and_then(|r| r.to_small_int())
                .filter(|n| (0..=300).contains(n))
                .ok_or(Fail::NotExact)?;
            let mut acc = BigInt::one();
            for k in 2..=n {
                acc *= k;
            }
            v = Expr::rat(Rat::new(acc, BigInt::one())?);
        }
        Ok(v)
    }

    fn atom(&mut self) -> Res<Expr> {
        self.enter()?;
        let Some(tok) = self.peek().cloned() else {
            return Err(Fail::NotExact);
        };
        self.i += 1;
        let v = match tok {
            T::Num { int, frac, exp10 } => literal(&int, &frac, exp10)?,
            T::Var(b'i') => Expr::imag(),
            T::Var(c) => Expr::var(c),
            T::Pi => Expr::pi(),
            T::LParen | T::LGroup | T::LBrack => {
                let v = self.sum()?;
                let close = match tok {
                    T::LParen => T::RParen,
                    T::LGroup => T::RGroup,
                    _ => T::RBrack,
                };
                if !self.eat(&close) {
                    return Err(Fail::NotExact);
                }
                v
            }
            T::Frac => {
                let a = self.arg()?;
                let b = self.arg()?;
                a.div(&b)?
            }
            T::Sqrt => {
                let a = self.arg()?;
                let r = a.as_rat().ok_or(Fail::NotExact)?;
                sqrt_rat(&r)?
            }
            _ => return Err(Fail::NotExact),
        };
        self.depth -= 1;
        Ok(v)
    }

    /// A macro argument: a group, one digit (`\frac12`), one letter, `\pi`.
    fn arg(&mut self) -> Res<Expr> {
        match self.peek().cloned() {
            Some(T::LGroup) => self.atom(),
            Some(T::Num { int, frac, exp10 }) => {
                if frac.is_empty() && exp10 == 0 && int.len() >= 2 {
                    let (first, rest) = int.split_at(1);
                    let v = literal(first, "", 0)?;
                    self.t[self.i] = T::Num {
                        int: rest.to_string(),
                        frac,
                        exp10,
                    };
                    Ok(v)
                } else {
                    self.i += 1;
                    literal(&int, &frac, exp10)
                }
            }
            Some(T::Var(_) | T::Pi) => self.atom(),
            Some(T::Sqrt | T::Frac) => self.atom(),
            _ => Err(Fail::NotExact),
        }
    }
}

/// An exact decimal literal: `int.frac × 10^exp10`.
fn literal(int: &str, frac: &str, exp10: i64) -> Res<Expr> {
    if int.len() > MAX_DIGITS || frac.len() > MAX_DIGITS || exp10.abs() > MAX_EXP10 {
        return Err(Fail::TooLarge);
    }
    let digits = format!("{int}{frac}");
    let num: BigInt = if digits.is_empty() {
        BigInt::zero()
    } else {
        digits.parse().map_err(|_| Fail::NotExact)?
    };
    let scale = exp10 - frac.len() as i64;
    let ten = Rat::int(10).pow(scale)?;
    Ok(Expr::rat(Rat::new(num, BigInt::one())?.mul(&ten)?))
}
