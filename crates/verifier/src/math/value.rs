//! Exact values of the math mode: sums of rational × √(squarefree) × π^k × i^{0,1} × monomial terms.
//!
//! The form is canonical: radicands are squarefree, `i² = -1` is reduced,
//! variables are sorted with non-zero exponents, and zero terms are dropped.
//! Since √2, √3, …, π, `i` and formal variables are linearly independent over
//! the rationals, two values are equal exactly when their term maps are equal.
//! Every operation is capped (bits of a coefficient, number of terms,
//! exponents); a capped operation fails with [`Fail::TooLarge`].

use std::collections::BTreeMap;
use std::fmt;

use num_bigint::BigInt;
use num_integer::Integer as _;
use num_traits::{One, Signed, ToPrimitive, Zero};

/// Why a value could not be computed exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fail {
    /// Outside what the exact form represents (a function, `\sqrt{x}`, a division by a sum).
    NotExact,
    /// Over a size cap.
    TooLarge,
}

pub(crate) type Res<T> = Result<T, Fail>;

/// Largest numerator or denominator, in bits.
pub(crate) const MAX_BITS: u64 = 4096;
/// Most terms of one value.
pub(crate) const MAX_TERMS: usize = 64;
/// Largest exponent (of π, a variable, or an integer power of a sum).
pub(crate) const MAX_EXP: i64 = 64;
/// Largest radicand √ is taken of (after clearing the denominator).
const MAX_RADICAND: u64 = 1 << 40;

/// An exact rational, always in lowest terms with a positive denominator.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Rat {
    pub num: BigInt,
    pub den: BigInt,
}

impl Rat {
    pub fn int(n: impl Into<BigInt>) -> Rat {
        Rat {
            num: n.into(),
            den: BigInt::one(),
        }
    }

    pub fn zero() -> Rat {
        Rat::int(0)
    }

    pub fn one() -> Rat {
        Rat::int(1)
    }

    pub fn new(num: BigInt, den: BigInt) -> Res<Rat> {
        if den.is_zero() {
            return Err(Fail::NotExact);
        }
        let g = num.gcd(&den);
        let (mut num, mut den) = if g.is_one() || g.is_zero() {
            (num, den)
        } else {
            (num / &g, den / &g)
        };
        if den.is_negative() {
            num = -num;
            den = -den;
        }
        if num.bits() > MAX_BITS || den.bits() > MAX_BITS {
            return Err(Fail::TooLarge);
        }
        Ok(Rat { num, den })
    }

    pub fn is_zero(&self) -> bool {
        self.num.is_zero()
    }

    pub fn is_int(&self) -> bool {
        self.den.is_one()
    }

    pub fn add(&self, o: &Rat) -> Res<Rat> {
        if self.den == o.den {
            return Rat::new(&self.num + &o.num, self.den.clone());
        }
        Rat::new(&self.num * &o.den + &o.num * &self.den, &self.den * &o.den)
    }

    pub fn mul(&self, o: &Rat) -> Res<Rat> {
        if self.num.bits() + o.num.bits() > 2 * MAX_BITS
            || self.den.bits() + o.den.bits() > 2 * MAX_BITS
        {
            return Err(Fail::TooLarge);
        }
        Rat::new(&self.num * &o.num, &self.den * &o.den)
    }

    pub fn neg(&self) -> Rat {
        Rat {
            num: -&self.num,
            den: self.den.clone(),
        }
    }

    pub fn inv(&self) -> Res<Rat> {
        Rat::new(self.den.clone(), self.num.clone())
    }

    /// `self^e` for an integer `e` of at most [`MAX_EXP`]… in size of the result.
    pub fn pow(&self, e: i64) -> Res<Rat> {
        let base = if e < 0 { self.inv()? } else { self.clone() };
        let e = e.unsigned_abs();
        let bits = base.num.bits().max(base.den.bits());
        if bits.saturating_sub(1).saturating_mul(e) > MAX_BITS {
            return Err(Fail::TooLarge);
        }
        let e = u32::try_from(e).map_err(|_| Fail::TooLarge)?;
        Rat::new(
            num_traits::Pow::pow(&base.num, e),
            num_traits::Pow::pow(&base.den, e),
        )
    }

    /// The value as an `i64` when it is a small integer.
    pub fn to_small_int(&self) -> Option<i64> {
        if self.is_int() {
            self.num.to_i64()
        } else {
            None
        }
    }
}

impl fmt::Display for Rat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_int() {
            write!(f, "{}", self.num)
        } else {
            write!(f, "{}/{}", self.num, self.den)
        }
    }
}

/// The non-rational part of a term.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Key {
    /// Squarefree radicand; 1 for none.
    pub rad: u64,
    /// The power of π.
    pub pi: i64,
    /// A factor `i`.
    pub imag: bool,
    /// Variables (ASCII letters) with non-zero exponents, sorted by letter.
    pub vars: Vec<(u8, i64)>,
}

impl Key {
    pub fn unit() -> Key {
        Key {
            rad: 1,
            pi: 0,
            imag: false,
            vars: Vec::new(),
        }
    }

    pub fn is_unit(&self) -> bool {
        self.rad == 1 && self.pi == 0 && !self.imag && self.vars.is_empty()
    }

    /// The product of two keys, with the rational factor it produces
    /// (`√6·√10 = 2√15`, `i·i = -1`).
    fn mul(&self, o: &Key) -> Res<(Key, Rat)> {
        let g = gcd_u64(self.rad, o.rad);
        let a = self.rad / g;
        let b = o.rad / g;
        let rad = a.checked_mul(b).ok_or(Fail::TooLarge)?;
        let mut factor = Rat::int(g);
        let imag = self.imag ^ o.imag;
        if self.imag && o.imag {
            factor = factor.neg();
        }
        let pi = self.pi + o.pi;
        if pi.abs() > MAX_EXP {
            return Err(Fail::TooLarge);
        }
        let mut vars = self.vars.clone();
        for &(v, e) in &o.vars {
            match vars.binary_search_by_key(&v, |x| x.0) {
                Ok(k) => {
                    vars[k].1 += e;
                    if vars[k].1.abs() > MAX_EXP {
                        return Err(Fail::TooLarge);
                    }
                }
                Err(k) => vars.insert(k, (v, e)),
            }
        }
        vars.retain(|x| x.1 != 0);
        Ok((
            Key {
                rad,
                pi,
                imag,
                vars,
            },
            factor,
        ))
    }

    /// The inverse of a key, with its rational factor (`1/√r = √r / r`, `1/i = -i`).
    fn inv(&self) -> (Key, Rat) {
        let mut factor = Rat {
            num: BigInt::one(),
            den: BigInt::from(self.rad),
        };
        if self.imag {
            factor = factor.neg();
        }
        (
            Key {
                rad: self.rad,
                pi: -self.pi,
                imag: self.imag,
                vars: self.vars.iter().map(|&(v, e)| (v, -e)).collect(),
            },
            factor,
        )
    }
}

/// An exact value: a sum of terms `coefficient × key`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Expr {
    pub terms: BTreeMap<Key, Rat>,
}

impl Expr {
    pub fn rat(r: Rat) -> Expr {
        let mut terms = BTreeMap::new();
        if !r.is_zero() {
            terms.insert(Key::unit(), r);
        }
        Expr { terms }
    }

    pub fn int(n: i64) -> Expr {
        Expr::rat(Rat::int(n))
    }

    fn key(key: Key) -> Expr {
        let mut terms = BTreeMap::new();
        terms.insert(key, Rat::one());
        Expr { terms }
    }

    pub fn pi() -> Expr {
        Expr::key(Key {
            pi: 1,
            ..Key::unit()
        })
    }

    pub fn imag() -> Expr {
        Expr::key(Key {
            imag: true,
            ..Key::unit()
        })
    }

    pub fn var(v: u8) -> Expr {
        Expr::key(Key {
            vars: vec![(v, 1)],
            ..Key::unit()
        })
    }

    /// The rational value, when there is nothing else.
    pub fn as_rat(&self) -> Option<Rat> {
        match self.terms.len() {
            0 => Some(Rat::zero()),
            1 => {
                let (k, r) = self.terms.iter().next()?;
                k.is_unit().then(|| r.clone())
            }
            _ => None,
        }
    }

    /// The variable, when the value is exactly one variable (`x`).
    pub fn as_var(&self) -> Option<u8> {
        let (k, r) = self.single()?;
        (r == &Rat::one()
            && k.rad == 1
            && k.pi == 0
            && !k.imag
            && k.vars.len() == 1
            && k.vars[0].1 == 1)
            .then(|| k.vars[0].0)
    }

    /// Whether the value has no variable.
    pub fn is_constant(&self) -> bool {
        self.terms.keys().all(|k| k.vars.is_empty())
    }

    fn single(&self) -> Option<(&Key, &Rat)> {
        if self.terms.len() == 1 {
            self.terms.iter().next()
        } else {
            None
        }
    }

    fn add_term(&mut self, k: Key, r: Rat) -> Res<()> {
        match self.terms.get_mut(&k) {
            Some(c) => {
                *c = c.add(&r)?;
                if c.is_zero() {
                    self.terms.remove(&k);
                }
            }
            None => {
                if !r.is_zero() {
                    self.terms.insert(k, r);
                }
            }
        }
        if self.terms.len() > MAX_TERMS {
            return Err(Fail::TooLarge);
        }
        Ok(())
    }

    pub fn add(&self, o: &Expr) -> Res<Expr> {
        let mut out = self.clone();
        for (k, r) in &o.terms {
            out.add_term(k.clone(), r.clone())?;
        }
        Ok(out)
    }

    pub fn neg(&self) -> Expr {
        Expr {
            terms: self
                .terms
                .iter()
                .map(|(k, r)| (k.clone(), r.neg()))
                .collect(),
        }
    }

    pub fn sub(&self, o: &Expr) -> Res<Expr> {
        self.add(&o.neg())
    }

    pub fn mul(&self, o: &Expr) -> Res<Expr> {
        if self.terms.len() * o.terms.len() > MAX_TERMS * MAX_TERMS {
            return Err(Fail::TooLarge);
        }
        let mut out = Expr::default();
        for (ka, ra) in &self.terms {
            for (kb, rb) in &o.terms {
                let (k, f) = ka.mul(kb)?;
                out.add_term(k, ra.mul(rb)?.mul(&f)?)?;
            }
        }
        Ok(out)
    }

    pub fn scale(&self, r: &Rat) -> Res<Expr> {
        self.mul(&Expr::rat(r.clone()))
    }

    /// `1 / self`: a single term, or `a + b·k` with `k² ` rational (`√r` or `i`),
    /// rationalised with the conjugate. Anything else is [`Fail::NotExact`].
    pub fn inv(&self) -> Res<Expr> {
        if self.terms.is_empty() {
            return Err(Fail::NotExact);
        }
        if let Some((k, r)) = self.single() {
            let (ki, f) = k.inv();
            let mut out = Expr::default();
            out.add_term(ki, r.inv()?.mul(&f)?)?;
            return Ok(out);
        }
        if self.terms.len() == 2 && self.is_constant() && self.terms.keys().all(|k| k.pi == 0) {
            let conj = Expr {
                terms: self
                    .terms
                    .iter()
                    .map(|(k, r)| (k.clone(), if k.is_unit() { r.clone() } else { r.neg() }))
                    .collect(),
            };
            let norm = self.mul(&conj)?;
            if let Some(n) = norm.as_rat() {
                return conj.scale(&n.inv()?);
            }
        }
        Err(Fail::NotExact)
    }

    pub fn div(&self, o: &Expr) -> Res<Expr> {
        self.mul(&o.inv()?)
    }

    /// `self^e` for a rational exponent: an integer, or a half-integer of a
    /// non-negative rational (`4^{1/2}`, `2^{3/2}`).
    pub fn pow(&self, e: &Rat) -> Res<Expr> {
        if let Some(n) = e.to_small_int() {
            if n.abs() > MAX_EXP && self.as_rat().is_none() {
                return Err(Fail::TooLarge);
            }
            if let Some(r) = self.as_rat() {
                if r.is_zero() && n < 0 {
                    return Err(Fail::NotExact);
                }
                return Ok(Expr::rat(r.pow(n)?));
            }
            let base = if n < 0 { self.inv()? } else { self.clone() };
            return base.pow_uint(n.unsigned_abs());
        }
        if e.den == BigInt::from(2)
            && let Some(r) = self.as_rat()
        {
            let root = sqrt_rat(&r)?;
            let n = e.num.to_i64().ok_or(Fail::TooLarge)?;
            return root.pow(&Rat::int(n));
        }
        Err(Fail::NotExact)
    }

    fn pow_uint(&self, n: u64) -> Res<Expr> {
        let mut acc = Expr::int(1);
        let mut base = self.clone();
        let mut n = n;
        while n > 0 {
            if n & 1 == 1 {
                acc = acc.mul(&base)?;
            }
            n >>= 1;
            if n > 0 {
                base = base.mul(&base)?;
            }
        }
        Ok(acc)
    }

    /// Whether `self = c · other` for a non-zero constant `c` (equations `a = b`
    /// are compared as `a - b` up to such a factor).
    pub fn proportional(&self, other: &Expr) -> bool {
        let (Some((k1, r1)), Some(r2)) = (
            self.terms.iter().next(),
            other
                .terms
                .get(self.terms.keys().next().unwrap_or(&Key::unit())),
        ) else {
            return self.terms.is_empty() && other.terms.is_empty();
        };
        let _ = k1;
        if self.terms.len() != other.terms.len() {
            return false;
        }
        let Ok(c) = r2.mul(&r1.inv().unwrap_or_else(|_| Rat::one())) else {
            return false;
        };
        match self.scale(&c) {
            Ok(scaled) => scaled == *other,
            Err(_) => false,
        }
    }
}

/// √r of a rational: `√(p/q) = √(pq) / q`, the square part of `pq` taken out;
/// a negative `r` gives `i·√|r|`.
pub(crate) fn sqrt_rat(r: &Rat) -> Res<Expr> {
    let negative = r.num.is_negative();
    let pq = (r.num.abs() * &r.den).to_u64().ok_or(Fail::TooLarge)?;
    if pq > MAX_RADICAND {
        return Err(Fail::TooLarge);
    }
    let (outside, rad) = square_part(pq);
    if rad == 0 {
        return Ok(Expr::default());
    }
    let coef = Rat::new(BigInt::from(outside), r.den.clone())?;
    let mut out = Expr::default();
    out.add_term(
        Key {
            rad,
            imag: negative,
            ..Key::unit()
        },
        coef,
    )?;
    Ok(out)
}

/// `n = outside² · rad` with `rad` squarefree. Trial division by every `d`
/// with `d³ ≤ n`, then the cofactor (1, a prime, a prime squared or a product
/// of two primes) is checked for being a square: at most 10⁴ steps under the cap.
fn square_part(mut n: u64) -> (u64, u64) {
    if n == 0 {
        return (0, 0);
    }
    let mut outside = 1u64;
    let mut rad = 1u64;
    let mut d = 2u64;
    while d.saturating_mul(d).saturating_mul(d) <= n {
        let mut e = 0;
        while n.is_multiple_of(d) {
            n /= d;
            e += 1;
        }
        for _ in 0..e / 2 {
            outside *= d;
        }
        if e % 2 == 1 {
            rad *= d;
        }
        d += if d == 2 { 1 } else { 2 };
    }
    let s = n.isqrt();
    if s > 1 && s * s == n {
        outside *= s;
    } else {
        rad *= n;
    }
    (outside, rad)
}

fn gcd_u64(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.terms.is_empty() {
            return f.write_str("0");
        }
        for (n, (k, r)) in self.terms.iter().enumerate() {
            if n > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{r}")?;
            if k.rad != 1 {
                write!(f, "*sqrt({})", k.rad)?;
            }
            if k.pi != 0 {
                write!(f, "*pi^{}", k.pi)?;
            }
            if k.imag {
                f.write_str("*i")?;
            }
            for &(v, e) in &k.vars {
                write!(f, "*{}^{e}", v as char)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn square_parts() {
        assert_eq!(square_part(12), (2, 3));
        assert_eq!(square_part(72), (6, 2));
        assert_eq!(square_part(49), (7, 1));
        assert_eq!(square_part(1), (1, 1));
        assert_eq!(square_part(2 * 1_000_003 * 1_000_003), (1_000_003, 2));
        assert_eq!(square_part(999_983 * 1_000_003), (1, 999_983 * 1_000_003));
    }

    #[test]
    fn arithmetic() {
        let s3 = sqrt_rat(&Rat::int(3)).unwrap();
        let s12 = sqrt_rat(&Rat::int(12)).unwrap();
        assert_eq!(s3.scale(&Rat::int(2)).unwrap(), s12);
        // 1 / (1 + √2) = √2 - 1
        let d = Expr::int(1).add(&sqrt_rat(&Rat::int(2)).unwrap()).unwrap();
        let want = sqrt_rat(&Rat::int(2)).unwrap().sub(&Expr::int(1)).unwrap();
        assert_eq!(d.inv().unwrap(), want);
        // i² = -1
        assert_eq!(Expr::imag().mul(&Expr::imag()).unwrap(), Expr::int(-1));
        assert_eq!(
            sqrt_rat(&Rat::int(-4)).unwrap(),
            Expr::imag().scale(&Rat::int(2)).unwrap()
        );
        // (a + 5)(b + 2) = ab + 2a + 5b + 10
        let a = Expr::var(b'a');
        let b = Expr::var(b'b');
        let lhs = a
            .add(&Expr::int(5))
            .unwrap()
            .mul(&b.add(&Expr::int(2)).unwrap())
            .unwrap();
        let rhs = a
            .mul(&b)
            .unwrap()
            .add(&a.scale(&Rat::int(2)).unwrap())
            .unwrap()
            .add(&b.scale(&Rat::int(5)).unwrap())
            .unwrap()
            .add(&Expr::int(10))
            .unwrap();
        assert_eq!(lhs, rhs);
        assert!(lhs.proportional(&rhs.scale(&Rat::int(-3)).unwrap()));
        assert!(!lhs.proportional(&rhs.add(&Expr::int(1)).unwrap()));
    }
}
