//! Normalisation: answer text to one exact integer, or the reason it is not one.
//!
//! The tokens of [`crate::lex`] are split into list items (`,`, `;`, `and`,
//! `or`) and equation sides (`=`); trailing unit words are dropped; what is
//! left is either a single integer literal (the fast path, no big-integer
//! arithmetic) or a small expression evaluated exactly with capped operands.

use num_bigint::{BigInt, Sign};
use num_traits::{One, Signed, ToPrimitive, Zero};

use crate::Integer;
use crate::lex::{Tok, lex};

/// Why a text is not a single integer, or the integer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Norm {
    Int(Integer),
    Empty,
    Several,
    NotInteger,
    TooLarge,
}

/// Limits on expression evaluation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub expressions: bool,
    pub max_bits: u64,
}

/// Normalises one answer text.
pub(crate) fn normalize(text: &str, limits: Limits) -> Norm {
    let Some(toks) = lex(text) else {
        return Norm::NotInteger;
    };
    if toks.is_empty() {
        return Norm::Empty;
    }
    if toks.contains(&Tok::PlusMinus) {
        return Norm::Several;
    }
    let mut found: Option<Integer> = None;
    let mut several = false;
    let mut failure: Option<Norm> = None;
    let mut any_item = false;
    // `\{2, 3\}` and `(2, 3)` list their items inside one pair of brackets.
    for item in split_top(strip_outer(&toks), &Tok::Sep) {
        if item.is_empty() {
            continue;
        }
        any_item = true;
        match item_value(item, limits) {
            Norm::Int(v) => match &found {
                Some(f) if *f != v => several = true,
                Some(_) => {}
                None => found = Some(v),
            },
            Norm::Several => several = true,
            other => {
                failure.get_or_insert(other);
            }
        }
    }
    if several {
        return Norm::Several;
    }
    if !any_item {
        return Norm::Empty;
    }
    match (failure, found) {
        (Some(f), _) => f,
        (None, Some(v)) => Norm::Int(v),
        (None, None) => Norm::Empty,
    }
}

/// One list item: the last side of an equation chain is the answer; earlier
/// sides that are integers must agree with it.
fn item_value(item: &[Tok], limits: Limits) -> Norm {
    let sides: Vec<&[Tok]> = split_top(item, &Tok::Eq).collect();
    let Some((last, earlier)) = sides.split_last() else {
        return Norm::Empty;
    };
    let value = side_value(last, limits);
    if let Norm::Int(v) = &value {
        for side in earlier {
            if let Norm::Int(w) = side_value(side, limits)
                && &w != v
            {
                return Norm::Several;
            }
        }
    }
    value
}

/// One side: units dropped, then a literal or an expression.
fn side_value(side: &[Tok], limits: Limits) -> Norm {
    let side = strip_units(side);
    match side {
        [] => Norm::Empty,
        [Tok::Num { digits, .. }] => Norm::Int(Integer::from_canonical(digits.clone(), false)),
        [Tok::Plus, Tok::Num { digits, .. }] => {
            Norm::Int(Integer::from_canonical(digits.clone(), false))
        }
        [Tok::Minus, Tok::Num { digits, .. }] => {
            Norm::Int(Integer::from_canonical(digits.clone(), true))
        }
        _ if !limits.expressions => Norm::NotInteger,
        _ => {
            let mut p = Parser {
                t: side,
                i: 0,
                max_bits: limits.max_bits,
                depth: 0,
            };
            match p.expr() {
                Ok(v) if p.i == side.len() => Norm::Int(Integer::from_bigint(&v)),
                Ok(_) => Norm::NotInteger,
                Err(Fail::TooLarge) => Norm::TooLarge,
                Err(Fail::NotInteger) => Norm::NotInteger,
            }
        }
    }
}

/// Drops trailing units: unit words, optionally with a power (`cm^2`,
/// `m^{3}`) or a per-unit (`km/h`). Never drops everything.
fn strip_units(mut t: &[Tok]) -> &[Tok] {
    loop {
        let before = t.len();
        let is_unit = |tok: &Tok| matches!(tok, Tok::Word { unit: true });
        let is_word = |tok: &Tok| matches!(tok, Tok::Word { .. });
        let n = t.len();
        if n >= 4 && is_word(&t[n - 1]) && t[n - 2] == Tok::Div && is_unit(&t[n - 3]) {
            t = &t[..n - 2];
        } else if n >= 2 && is_unit(&t[n - 1]) {
            t = &t[..n - 1];
        } else if n >= 4
            && matches!(t[n - 1], Tok::Num { .. })
            && t[n - 2] == Tok::Pow
            && is_unit(&t[n - 3])
        {
            t = &t[..n - 3];
        } else if n >= 6
            && t[n - 1] == Tok::Close
            && matches!(t[n - 2], Tok::Num { .. })
            && t[n - 3] == Tok::Open
            && t[n - 4] == Tok::Pow
            && is_unit(&t[n - 5])
        {
            t = &t[..n - 5];
        }
        if t.len() == before {
            return t;
        }
    }
}

/// Drops brackets that enclose the whole list: `(…)`, `{…}`, `\{…\}`. One
/// pass: `m` outer pairs enclose everything when the list is balanced, starts
/// with `m` opens, ends with `m` closes and never drops below depth `m` in
/// between (`(1)+(2)` drops to 0, so nothing is stripped).
fn strip_outer(t: &[Tok]) -> &[Tok] {
    let lead = t.iter().take_while(|x| **x == Tok::Open).count();
    let trail = t.iter().rev().take_while(|x| **x == Tok::Close).count();
    if lead == 0 || trail == 0 || lead == t.len() {
        return t;
    }
    let inner_end = t.len() - trail;
    let mut depth = 0usize;
    let mut m = lead.min(trail);
    for (i, tok) in t.iter().enumerate() {
        match tok {
            Tok::Open => depth += 1,
            Tok::Close => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return t,
            },
            _ => {}
        }
        if i >= lead && i < inner_end {
            m = m.min(depth);
        }
    }
    if depth != 0 {
        return t;
    }
    &t[m..t.len() - m]
}

/// Splits at `sep` tokens that are outside brackets.
fn split_top<'t>(toks: &'t [Tok], sep: &'t Tok) -> impl Iterator<Item = &'t [Tok]> + 't {
    let mut depth = 0i64;
    toks.split(move |t| {
        match t {
            Tok::Open => depth += 1,
            Tok::Close => depth -= 1,
            _ => {}
        }
        depth == 0 && t == sep
    })
}

enum Fail {
    NotInteger,
    TooLarge,
}

type R = Result<BigInt, Fail>;

/// Recursive descent over the tokens of one side:
///
/// ```text
/// expr   := term (('+' | '-') term)*
/// term   := unary (('*' | '/') unary)*          no implicit multiplication
/// unary  := ('+' | '-') unary | power
/// power  := fact ('^' arg)?                     one superscript, as in LaTeX
/// fact   := atom '!'*
/// atom   := number | '(' expr ')' | '{' expr '}' | \frac arg arg | \binom arg arg
/// arg    := '{' expr '}' | a single digit
/// ```
struct Parser<'t> {
    t: &'t [Tok],
    i: usize,
    max_bits: u64,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.t.get(self.i)
    }

    fn eat(&mut self, tok: &Tok) -> bool {
        if self.peek() == Some(tok) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn check(&self, v: &BigInt) -> Result<(), Fail> {
        if v.bits() > self.max_bits {
            Err(Fail::TooLarge)
        } else {
            Ok(())
        }
    }

    fn expr(&mut self) -> R {
        self.depth += 1;
        if self.depth > crate::lex::MAX_DEPTH {
            return Err(Fail::NotInteger);
        }
        let mut v = self.term()?;
        loop {
            if self.eat(&Tok::Plus) {
                v += self.term()?;
            } else if self.eat(&Tok::Minus) {
                v -= self.term()?;
            } else {
                break;
            }
            self.check(&v)?;
        }
        self.depth -= 1;
        Ok(v)
    }

    fn term(&mut self) -> R {
        let mut v = self.unary()?;
        loop {
            if self.eat(&Tok::Times) {
                let w = self.unary()?;
                if v.bits() + w.bits() > self.max_bits {
                    return Err(Fail::TooLarge);
                }
                v *= w;
            } else if self.eat(&Tok::Div) {
                let w = self.unary()?;
                v = exact_div(&v, &w)?;
            } else {
                return Ok(v);
            }
        }
    }

    fn unary(&mut self) -> R {
        self.depth += 1;
        if self.depth > crate::lex::MAX_DEPTH {
            return Err(Fail::NotInteger);
        }
        let v = if self.eat(&Tok::Minus) {
            -self.unary()?
        } else if self.eat(&Tok::Plus) {
            self.unary()?
        } else {
            self.power()?
        };
        self.depth -= 1;
        Ok(v)
    }

    fn power(&mut self) -> R {
        let base = self.fact()?;
        if !self.eat(&Tok::Pow) {
            return Ok(base);
        }
        let exp = self.arg()?;
        if exp.is_negative() {
            return if base.abs().is_one() {
                Ok(if exp.is_odd_big() {
                    base
                } else {
                    BigInt::one()
                })
            } else {
                Err(Fail::NotInteger)
            };
        }
        if base.is_zero() || base.abs().is_one() {
            return Ok(if exp.is_zero() {
                BigInt::one()
            } else if base.is_zero() || !exp.is_odd_big() {
                base.abs()
            } else {
                base
            });
        }
        let e = exp.to_u64().ok_or(Fail::TooLarge)?;
        // |base|^e has at least (bits - 1) * e bits.
        if (base.bits() - 1).saturating_mul(e) > self.max_bits {
            return Err(Fail::TooLarge);
        }
        let e = u32::try_from(e).map_err(|_| Fail::TooLarge)?;
        let v = num_traits::pow::Pow::pow(&base, e);
        self.check(&v)?;
        Ok(v)
    }

    fn fact(&mut self) -> R {
        let mut v = self.atom()?;
        while self.eat(&Tok::Bang) {
            v = self.factorial(&v)?;
        }
        Ok(v)
    }

    fn factorial(&self, v: &BigInt) -> R {
        let n = v.to_u64().ok_or(Fail::NotInteger)?;
        // log2(n!) >= n * (log2(n) - 1.45); refuse before multiplying.
        if n > 20 {
            let bound = (n as f64) * ((n as f64).log2() - 1.45);
            if bound > self.max_bits as f64 {
                return Err(Fail::TooLarge);
            }
        }
        let mut acc = BigInt::one();
        for k in 2..=n {
            acc *= k;
        }
        self.check(&acc)?;
        Ok(acc)
    }

    fn atom(&mut self) -> R {
        match self.peek().cloned() {
            Some(Tok::Num { digits, .. }) => {
                self.i += 1;
                self.literal(&digits)
            }
            Some(Tok::Open) => {
                self.i += 1;
                let v = self.expr()?;
                if self.eat(&Tok::Close) {
                    Ok(v)
                } else {
                    Err(Fail::NotInteger)
                }
            }
            Some(Tok::Frac) => {
                self.i += 1;
                let (a, b) = self.two_args()?;
                exact_div(&a, &b)
            }
            Some(Tok::Binom) => {
                self.i += 1;
                let (n, k) = self.two_args()?;
                self.binom(&n, &k)
            }
            _ => Err(Fail::NotInteger),
        }
    }

    fn literal(&self, digits: &str) -> R {
        // A decimal digit carries log2(10) < 3.33 bits.
        if digits.len() as f64 * 3.33 > self.max_bits as f64 + 4.0 {
            return Err(Fail::TooLarge);
        }
        digits.parse::<BigInt>().map_err(|_| Fail::NotInteger)
    }

    /// The two arguments of `\frac`/`\binom`; `\frac12` is `\frac{1}{2}`.
    fn two_args(&mut self) -> Result<(BigInt, BigInt), Fail> {
        if let Some(Tok::Num {
            digits,
            raw_len: 2,
            plain: true,
        }) = self.peek()
            && digits.len() == 2
        {
            let (a, b) = digits.split_at(1);
            let out = (self.literal(a)?, self.literal(b)?);
            self.i += 1;
            return Ok(out);
        }
        Ok((self.arg()?, self.arg()?))
    }

    /// A macro argument or superscript: a braced group or one digit.
    fn arg(&mut self) -> R {
        match self.peek() {
            Some(Tok::Num {
                digits,
                raw_len: 1,
                plain: true,
            }) => {
                let v = self.literal(&digits.clone())?;
                self.i += 1;
                Ok(v)
            }
            Some(Tok::Open) => self.atom(),
            _ => Err(Fail::NotInteger),
        }
    }

    fn binom(&self, n: &BigInt, k: &BigInt) -> R {
        if n.is_negative() || k.is_negative() || k > n {
            return if n.is_negative() {
                Err(Fail::NotInteger)
            } else {
                Ok(BigInt::zero())
            };
        }
        let n_u = n.to_u64().ok_or(Fail::TooLarge)?;
        let k_u = k.to_u64().ok_or(Fail::TooLarge)?;
        let k_u = k_u.min(n_u - k_u);
        // C(n, k) < n^k: refuse when k * bits(n) exceeds the cap by far, then check exactly.
        if k_u.saturating_mul(n.bits()) > self.max_bits.saturating_mul(2) && k_u > 64 {
            return Err(Fail::TooLarge);
        }
        let mut acc = BigInt::one();
        for i in 0..k_u {
            acc *= n_u - i;
            acc /= i + 1;
            if acc.bits() > self.max_bits.saturating_mul(2) {
                return Err(Fail::TooLarge);
            }
        }
        self.check(&acc)?;
        Ok(acc)
    }
}

fn exact_div(a: &BigInt, b: &BigInt) -> R {
    if b.is_zero() {
        return Err(Fail::NotInteger);
    }
    let (q, r) = num_integer::Integer::div_rem(a, b);
    if r.is_zero() {
        Ok(q)
    } else {
        Err(Fail::NotInteger)
    }
}

trait Odd {
    fn is_odd_big(&self) -> bool;
}

impl Odd for BigInt {
    fn is_odd_big(&self) -> bool {
        self.sign() != Sign::NoSign && self.magnitude().bit(0)
    }
}
