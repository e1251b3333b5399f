//! The math-answer mode: exact equivalence of LaTeX answers (MATH-500 style).
//!
//! An answer is lexed ([`lex`]), parsed into an [`parse::Ans`] whose values are
//! exact ([`value`]: sums of rational × √squarefree × π^k × i × monomial), and
//! compared structurally with truth-driven leniency (a list truth is a set, a
//! percentage truth also takes the fraction, `x = 5` is `5`). Whatever does not
//! parse exactly is compared as normalised LaTeX text ([`text`]); floating
//! point is never used.

mod lex;
mod parse;
mod text;
mod value;

use parse::{Ans, Bound, Iv, Parsed};
use value::{Expr, Fail, Rat};

/// Longest answer parsed exactly, in bytes; longer ones are compared as text.
pub(crate) const MAX_EXACT_LEN: usize = 4096;

/// A prepared answer: its exact parse (when there is one) and its normalised text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Prepared {
    exact: Result<Parsed, Fail>,
    text: String,
}

impl Prepared {
    pub(crate) fn new(answer: &str) -> Prepared {
        let exact = if answer.len() > MAX_EXACT_LEN {
            Err(Fail::TooLarge)
        } else {
            match lex::lex(answer) {
                Some(toks) => parse::parse(toks),
                None => Err(Fail::TooLarge),
            }
        };
        Prepared {
            exact,
            text: text::normalize(answer),
        }
    }

    /// Nothing but formatting.
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    /// Whether the answer is a list or set of several values.
    pub(crate) fn is_list(&self) -> bool {
        matches!(&self.exact, Ok(Parsed { ans: Ans::Set(xs), .. }) if xs.len() > 1)
    }

    /// Whether the exact parse hit a size cap.
    pub(crate) fn too_large(&self) -> bool {
        self.exact == Err(Fail::TooLarge)
    }

    /// The canonical form, for display: the exact value, or the normalised text.
    pub(crate) fn canonical(&self) -> String {
        match &self.exact {
            Ok(p) => format!("{}{}", show(&p.ans), if p.percent { "%" } else { "" }),
            Err(_) => self.text.clone(),
        }
    }

    /// The integer, when the answer is exactly one.
    pub(crate) fn integer(&self) -> Option<num_bigint::BigInt> {
        match &self.exact {
            Ok(Parsed {
                ans: Ans::Val(v),
                percent: false,
            }) => v.as_rat().filter(Rat::is_int).map(|r| r.num),
            _ => None,
        }
    }
}

/// Whether `response` is equivalent to `truth`.
pub(crate) fn equivalent(truth: &Prepared, response: &Prepared) -> bool {
    if let (Ok(t), Ok(r)) = (&truth.exact, &response.exact) {
        if eq(&t.ans, &r.ans) {
            return true;
        }
        // A percentage truth also takes the fraction: 25% is 0.25.
        if t.percent
            && !r.percent
            && let (Ans::Val(tv), Ans::Val(rv)) = (&t.ans, &r.ans)
            && rv.scale(&Rat::int(100)).is_ok_and(|x| x == *tv)
        {
            return true;
        }
        // A percentage answer to a plain truth: 33% is 0.33.
        if r.percent
            && !t.percent
            && let (Ans::Val(tv), Ans::Val(rv)) = (&t.ans, &r.ans)
            && tv.scale(&Rat::int(100)).is_ok_and(|x| x == *rv)
        {
            return true;
        }
    }
    !truth.text.is_empty() && truth.text == response.text
}

fn eq(t: &Ans, r: &Ans) -> bool {
    use Ans::*;
    match (t, r) {
        (Val(a), Val(b)) => a == b,
        (Val(a), Assign(_, b)) | (Assign(_, a), Val(b)) => a == b,
        (Assign(v, a), Assign(w, b)) => a == b && (v == w || a.is_constant()),
        (Assign(v, a), Equation { diff, .. }) | (Equation { diff, .. }, Assign(v, a)) => {
            Expr::var(*v).sub(a).is_ok_and(|d| d.proportional(diff))
        }
        (Equation { diff: a, .. }, Equation { diff: b, .. }) => a.proportional(b),
        // `a + b = 42` against 42: the last side is the answer.
        (Val(a), Equation { last, .. }) => a == last,
        (Text(a), Text(b)) => a == b,
        (Text(a), Val(v)) | (Val(v), Text(a)) => v
            .as_var()
            .is_some_and(|c| a.len() == 1 && a.as_bytes()[0].eq_ignore_ascii_case(&c)),
        (Tuple(a), Tuple(b)) => a.len() == b.len() && a.iter().zip(b).all(|(x, y)| eq(x, y)),
        (Tuple(a), Interval(iv)) | (Interval(iv), Tuple(a)) => {
            a.len() == 2 && parse::open_interval(a).is_ok_and(|x| iv_eq(&x, iv))
        }
        (Interval(a), Interval(b)) => iv_eq(a, b),
        (Union(a), Union(b)) => {
            a.len() == b.len()
                && a.iter().all(|x| b.iter().any(|y| iv_eq(x, y)))
                && b.iter().all(|y| a.iter().any(|x| iv_eq(x, y)))
        }
        // `x = 2, y = 3` names the entries of the pair `(2, 3)` in order.
        (Tuple(xs), Set(ys)) | (Set(ys), Tuple(xs))
            if ys.iter().all(|y| matches!(y, Assign(..))) =>
        {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| eq(x, y))
        }
        (Set(a), Set(b)) => {
            a.iter().all(|x| b.iter().any(|y| eq(x, y)))
                && b.iter().all(|y| a.iter().any(|x| eq(x, y)))
        }
        // A one-element set is its element (`\{5\}`, `5, 5`, boxes joined).
        (Set(a), x) if !matches!(x, Set(_)) => !a.is_empty() && a.iter().all(|y| eq(y, x)),
        (x, Set(b)) if !matches!(x, Set(_)) => !b.is_empty() && b.iter().all(|y| eq(x, y)),
        (Matrix(a), Matrix(b)) => a == b,
        // A column vector is the tuple of its entries.
        (Matrix(m), Tuple(xs)) | (Tuple(xs), Matrix(m)) => {
            m.iter().all(|row| row.len() == 1)
                && m.len() == xs.len()
                && m.iter()
                    .zip(xs)
                    .all(|(row, x)| matches!(x, Val(v) if *v == row[0]))
        }
        _ => false,
    }
}

fn iv_eq(a: &Iv, b: &Iv) -> bool {
    a == b
        || (a.lo == b.lo
            && a.hi == b.hi
            // An infinite end is open however it is written.
            && (a.lo_closed == b.lo_closed || a.lo == Bound::NegInf)
            && (a.hi_closed == b.hi_closed || a.hi == Bound::PosInf))
}

fn show(a: &Ans) -> String {
    let list = |xs: &[Ans]| xs.iter().map(show).collect::<Vec<_>>().join(", ");
    let bound = |b: &Bound| match b {
        Bound::NegInf => "-inf".to_string(),
        Bound::PosInf => "inf".to_string(),
        Bound::Fin(e) => e.to_string(),
    };
    let iv = |i: &Iv| {
        format!(
            "{}{}, {}{}",
            if i.lo_closed { '[' } else { '(' },
            bound(&i.lo),
            bound(&i.hi),
            if i.hi_closed { ']' } else { ')' }
        )
    };
    match a {
        Ans::Val(e) => e.to_string(),
        Ans::Assign(v, e) => format!("{} = {e}", *v as char),
        Ans::Equation { diff, .. } => format!("{diff} = 0"),
        Ans::Tuple(xs) => format!("({})", list(xs)),
        Ans::Interval(i) => iv(i),
        Ans::Union(is) => is.iter().map(iv).collect::<Vec<_>>().join(" U "),
        Ans::Set(xs) => format!("{{{}}}", list(xs)),
        Ans::Matrix(rows) => format!(
            "[{}]",
            rows.iter()
                .map(|r| r.iter().map(Expr::to_string).collect::<Vec<_>>().join(", "))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Ans::Text(t) => format!("text:{t}"),
    }
}
