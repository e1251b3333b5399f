//! Exact, fast 0/1 reward for boxed integer answers (and, in their own modes, LaTeX math answers and multiple choice).
//!
//! `rstar-verifier` scores a model's response against an integer ground truth,
//! the way rStar2-Agent's outcome reward does, but exactly: it finds the final
//! `<answer>…</answer>` block (or takes the whole text), the last `\boxed{…}` /
//! `\fbox{…}` in it (nested braces, `\boxed 5` without braces), strips what
//! never changes an integer's value (`$…$`, `\text{}`, `\left`, thousands
//! separators, units, `x =`, degrees, `\%`, leading zeros, `.0`), evaluates
//! small exact expressions (`2^{10}`, `\frac{84}{2}`, `\binom{9}{2}`, `5!`)
//! under size caps, and compares integers of any size exactly.
//!
//! It is deliberately **not** a general math grader: no floating tolerance, no
//! sympy, no symbolic equivalence, no `×100` leniency (the rStar2 reference
//! pays 1 for `4200` against `42`; this crate never does). It does no IO: the
//! caller passes assistant text only, never tool output.
//!
//! Main types: [`Verifier`] (options and the scoring methods), [`Verdict`]
//! (reward, extracted text, normalised [`Integer`], [`Reason`]), [`Error`]
//! (a ground truth that is not an integer). [`verify`] and [`verify_batch`]
//! use the default options; the batch runs on rayon.
//!
//! ```
//! use rstar_verifier::{verify, Reason};
//!
//! let v = verify("<answer>so the total is $\\boxed{1{,}024}$</answer>", "1024").unwrap();
//! assert_eq!((v.reward, v.reason), (1, Reason::Right));
//! let v = verify("\\boxed{2^{10} \\text{ cm}}", "1024").unwrap();
//! assert_eq!(v.reward, 1);
//! let v = verify("\\boxed{4200}", "42").unwrap();
//! assert_eq!((v.reward, v.reason), (0, Reason::Wrong));
//! assert!(verify("\\boxed{1}", "1/2").is_err());
//! ```
//!
//! # Math and choice modes
//! [`Verifier::verify_math`] scores LaTeX answers (MATH-500): it decides
//! equivalence exactly over a canonical form (sums of rational ×
//! √squarefree × π^k × i × monomial terms) for numbers, fractions, surds,
//! multiples of π, complex numbers, polynomials, tuples, intervals, sets,
//! matrices, equations and words, and compares anything else as normalised
//! LaTeX text, never by floating point. [`Verifier::verify_choice`] reads a
//! multiple-choice letter `A`–`J`. [`Mode`] names the three modes; the
//! integer mode above is the default and is not changed by the others.
//! [`ScoreMode`] adds `auto`, which picks the mode from each ground truth, and
//! [`Scored`] is a verdict (or a ground-truth error) in the JSON form the HTTP
//! services answer with.
//!
//! ```
//! use rstar_verifier::Verifier;
//!
//! let v = Verifier::new();
//! assert!(v.verify_math("so $\\boxed{2\\sqrt{3}}$", "\\sqrt{12}").unwrap().is_right());
//! assert!(v.verify_math("\\boxed{(2, \\infty)}", "(2,\\infty)").unwrap().is_right());
//! assert!(!v.verify_math("\\boxed{0.333}", "\\frac{1}{3}").unwrap().is_right());
//! assert!(v.verify_choice("Thus the answer is (B).", "B").unwrap().is_right());
//! ```
//!
//! # What "several answers" means
//! A response gets [`Reason::SeveralAnswers`] when its final answer commits to
//! more than one value:
//! - the box lists items separated at the top level by `,`, `;`, `and` or `or`
//!   (commas of well-formed thousands groups excepted), possibly inside one
//!   pair of brackets around the whole list, and at least two items are
//!   different integers (`\boxed{3, 5}`, `\boxed{3 \text{ or } 5}`,
//!   `\boxed{\{3, 5\}}`, `\boxed{(3, 5)}`); identical items count once
//!   (`\boxed{5, 5}` is 5);
//! - the box contains `\pm` or `\mp`;
//! - an equation chain in the box has integer sides that differ
//!   (`\boxed{2^{10} = 1000}`); non-integer sides such as `x` in `x = 5` are ignored;
//! - the last box is joined to the boxes before it only by separators
//!   (whitespace, `$`, `,`, `;`, `.`, `\quad`, `and`, `or`, at most 64 bytes
//!   between two boxes) and their values differ (`\boxed{3} or \boxed{5}`).
//!
//! A later box that is separated from earlier ones by prose simply replaces
//! them: the last box is the answer.
//!
//! # Crate features
//! None.
#![warn(missing_docs)]

use std::fmt;

use num_bigint::BigInt;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

mod choice;
mod extract;
mod lex;
mod math;
mod norm;
mod scan;
mod score_mode;
mod scored;

use norm::{Limits, Norm};
pub use score_mode::ScoreMode;
pub use scored::{Scored, VerifyItem};

/// Why a response got its reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The answer is the ground truth: reward 1.
    Right,
    /// The answer is an integer other than the ground truth.
    Wrong,
    /// No complete `\boxed`/`\fbox` in the scored text (including a last box
    /// whose brace is never closed, as in a truncated response).
    NoBox,
    /// The last box holds nothing but formatting.
    EmptyBox,
    /// The answer commits to several different values (see the crate docs).
    SeveralAnswers,
    /// The answer is not an integer: a decimal, a fraction that does not
    /// divide, a symbol, text, or an expression this crate does not evaluate.
    NotAnInteger,
    /// The answer is an expression whose evaluation exceeds the size caps
    /// (`10^{10^{10}}`): refused quickly, never evaluated.
    TooLarge,
}

impl Reason {
    /// Every reason, in declaration order (handy for summaries).
    pub const ALL: [Reason; 7] = [
        Reason::Right,
        Reason::Wrong,
        Reason::NoBox,
        Reason::EmptyBox,
        Reason::SeveralAnswers,
        Reason::NotAnInteger,
        Reason::TooLarge,
    ];

    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Right => "right",
            Reason::Wrong => "wrong",
            Reason::NoBox => "no_box",
            Reason::EmptyBox => "empty_box",
            Reason::SeveralAnswers => "several_answers",
            Reason::NotAnInteger => "not_an_integer",
            Reason::TooLarge => "too_large",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An exact integer in canonical decimal form: an optional `-`, then digits
/// with no leading zero (`0` for zero, never `-0`). Any size.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Integer(String);

impl Integer {
    /// `digits` must be canonical (no leading zeros, non-empty).
    fn from_canonical(mut digits: String, negative: bool) -> Self {
        if negative && digits != "0" {
            digits.insert(0, '-');
        }
        Integer(digits)
    }

    fn from_bigint(v: &BigInt) -> Self {
        Integer(v.to_string())
    }

    /// The canonical decimal text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value as a big integer.
    pub fn to_bigint(&self) -> BigInt {
        self.0.parse().expect("canonical decimal text parses")
    }

    /// Whether it is negative.
    pub fn is_negative(&self) -> bool {
        self.0.starts_with('-')
    }
}

impl fmt::Display for Integer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&BigInt> for Integer {
    fn from(v: &BigInt) -> Self {
        Integer::from_bigint(v)
    }
}

impl From<Integer> for String {
    fn from(v: Integer) -> Self {
        v.0
    }
}

impl TryFrom<String> for Integer {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        Verifier::new().ground_truth(&s)
    }
}

impl std::str::FromStr for Integer {
    type Err = Error;
    /// Parses with the ground-truth rules: `"025"`, `"27.0"` and `"1,000"` are integers.
    fn from_str(s: &str) -> Result<Self, Error> {
        Verifier::new().ground_truth(s)
    }
}

/// The score of one response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// 1 when the answer is the ground truth, else 0.
    pub reward: u8,
    /// Why.
    pub reason: Reason,
    /// The text of the last box, as written (trimmed); `None` without a box.
    pub extracted: Option<String>,
    /// The extracted answer as an integer, when it is one.
    pub normalized: Option<Integer>,
    /// The math and choice modes' canonical form of the answer (the exact
    /// value, the normalised text, or the letter); `None` in integer mode,
    /// and then left out of JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical: Option<String>,
}

impl Verdict {
    /// Whether the reward is 1.
    pub fn is_right(&self) -> bool {
        self.reward == 1
    }
}

/// The crate's error: only a ground truth can be bad input; a bad response is
/// a [`Verdict`] with reward 0.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The ground truth does not normalise to one integer.
    #[error(
        "ground truth `{text}` is not an integer ({reason}); filter such rows out before training"
    )]
    GroundTruth {
        /// The ground truth, cut to 80 characters.
        text: String,
        /// What normalisation found ([`Reason::NotAnInteger`], [`Reason::EmptyBox`] for an empty one, …).
        reason: Reason,
    },
    /// A ground truth the math or choice mode cannot score: empty, or not one
    /// letter `A`–`J` in choice mode.
    #[error("ground truth `{text}` cannot be scored in {mode} mode: {why}")]
    Truth {
        /// The mode.
        mode: Mode,
        /// The ground truth, cut to 80 characters.
        text: String,
        /// Why.
        why: &'static str,
    },
}

/// Which comparison scores an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Exact integers (the training reward; the default).
    #[default]
    Integer,
    /// Exact equivalence of LaTeX math answers (see [`Verifier::verify_math`]).
    Math,
    /// A multiple-choice letter `A`–`J` (see [`Verifier::verify_choice`]).
    Choice,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 3] = [Mode::Integer, Mode::Math, Mode::Choice];

    /// The name used on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Integer => "integer",
            Mode::Math => "math",
            Mode::Choice => "choice",
        }
    }

    /// The mode a dataset's ground truths call for: `integer` when every one is
    /// an integer, `choice` when every one is a letter `A`–`J` (`B`, `(B)`),
    /// `math` otherwise (MATH-500). An empty dataset is `integer`.
    pub fn detect<'a>(truths: impl IntoIterator<Item = &'a str>) -> Mode {
        let v = Verifier::new();
        let (mut all_int, mut all_choice) = (true, true);
        for t in truths {
            if all_int && v.ground_truth(t).is_err() {
                all_int = false;
            }
            if all_choice && choice::truth_letter(t).is_none() {
                all_choice = false;
            }
            if !all_int && !all_choice {
                return Mode::Math;
            }
        }
        if all_int { Mode::Integer } else { Mode::Choice }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| format!("`{s}` is not one of integer, math, choice"))
    }
}

/// A math-mode ground truth parsed once ([`Verifier::math_truth`]), for many rollouts.
#[derive(Debug, Clone, PartialEq)]
pub struct MathTruth(math::Prepared);

impl MathTruth {
    /// The canonical form: the exact value, or the normalised text.
    pub fn canonical(&self) -> String {
        self.0.canonical()
    }
}

/// Scoring options. `Default` delegates to [`Verifier::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verifier {
    /// Evaluate simple exact expressions (`2^{10}`, `\frac{84}{2}`, `3\cdot 14`,
    /// `\binom{9}{2}`, `5!`). On by default.
    pub expressions: bool,
    /// The largest intermediate or final value an expression may reach, in
    /// bits (default 65 536, about 19 700 decimal digits). Plain literals are
    /// never capped.
    pub max_bits: u64,
}

impl Default for Verifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Verifier {
    /// Default options: expressions on, a 65 536-bit cap.
    pub fn new() -> Self {
        Verifier {
            expressions: true,
            max_bits: 1 << 16,
        }
    }

    /// Literal integers only: no expression evaluation.
    pub fn literal_only() -> Self {
        Verifier {
            expressions: false,
            ..Self::new()
        }
    }

    /// Sets [`Verifier::expressions`].
    pub fn with_expressions(mut self, on: bool) -> Self {
        self.expressions = on;
        self
    }

    /// Sets [`Verifier::max_bits`].
    pub fn with_max_bits(mut self, bits: u64) -> Self {
        self.max_bits = bits;
        self
    }

    fn limits(&self) -> Limits {
        Limits {
            expressions: self.expressions,
            max_bits: self.max_bits,
        }
    }

    /// Normalises a ground truth (`"025"`, `"27.0"`, `"\\boxed{42}"`) with
    /// the same rules as answers; the text may itself be boxed.
    ///
    /// # Errors
    /// [`Error::GroundTruth`] when it is not exactly one integer.
    pub fn ground_truth(&self, text: &str) -> Result<Integer, Error> {
        let inner = match extract::last_box(text) {
            extract::LastBox::Found(b) => b.content,
            _ => text,
        };
        match norm::normalize(inner, self.limits()) {
            Norm::Int(v) => Ok(v),
            other => Err(Error::GroundTruth {
                text: text.chars().take(80).collect(),
                reason: reason_of(&other),
            }),
        }
    }

    /// Normalises an answer text (no box extraction): the integer, or the
    /// reason it is not one.
    pub fn normalize(&self, answer: &str) -> Result<Integer, Reason> {
        match norm::normalize(answer, self.limits()) {
            Norm::Int(v) => Ok(v),
            other => Err(reason_of(&other)),
        }
    }

    /// Scores a response against a ground truth given as text.
    ///
    /// # Errors
    /// [`Error::GroundTruth`] when the ground truth is not an integer.
    pub fn verify(&self, response: &str, ground_truth: &str) -> Result<Verdict, Error> {
        let gt = self.ground_truth(ground_truth)?;
        Ok(self.verify_integer(response, &gt))
    }

    /// Scores a response against an already normalised ground truth (parse it
    /// once with [`Verifier::ground_truth`] when a problem has many rollouts).
    pub fn verify_integer(&self, response: &str, ground_truth: &Integer) -> Verdict {
        let region = extract::answer_region(response);
        let found = match extract::last_box(region) {
            extract::LastBox::Found(b) => b,
            extract::LastBox::None | extract::LastBox::Unclosed => {
                return Verdict {
                    reward: 0,
                    reason: Reason::NoBox,
                    extracted: None,
                    normalized: None,
                    canonical: None,
                };
            }
        };
        let extracted = Some(found.content.trim().to_string());
        let value = match norm::normalize(found.content, self.limits()) {
            Norm::Int(v) => v,
            other => {
                return Verdict {
                    reward: 0,
                    reason: reason_of(&other),
                    extracted,
                    normalized: None,
                    canonical: None,
                };
            }
        };
        // Boxes joined to the last one by separators only must agree with it.
        let mut cur = found;
        while let Some(prev) = extract::joined_before(region, &cur) {
            // The same text has the same value: skip normalising it again.
            if prev.content != cur.content
                && let Norm::Int(w) = norm::normalize(prev.content, self.limits())
                && w != value
            {
                return Verdict {
                    reward: 0,
                    reason: Reason::SeveralAnswers,
                    extracted,
                    normalized: None,
                    canonical: None,
                };
            }
            cur = prev;
        }
        let right = value == *ground_truth;
        Verdict {
            reward: u8::from(right),
            reason: if right { Reason::Right } else { Reason::Wrong },
            extracted,
            normalized: Some(value),
            canonical: None,
        }
    }

    /// Parses a math-mode ground truth (it may itself be boxed).
    ///
    /// # Errors
    /// [`Error::Truth`] when it holds nothing but formatting.
    pub fn math_truth(&self, text: &str) -> Result<MathTruth, Error> {
        let inner = match extract::last_box(text) {
            extract::LastBox::Found(b) => b.content,
            _ => text,
        };
        let p = math::Prepared::new(inner);
        if p.is_empty() {
            return Err(Error::Truth {
                mode: Mode::Math,
                text: text.chars().take(80).collect(),
                why: "it is empty",
            });
        }
        Ok(MathTruth(p))
    }

    /// Scores a response against a LaTeX math ground truth (MATH-500 style):
    /// exact equivalence of numbers, fractions, surds, multiples of π,
    /// complex numbers, polynomials, tuples, intervals, sets, matrices,
    /// equations and words; normalised text for the rest (see
    /// `docs/verifier.md`). Integers compare as in integer mode.
    ///
    /// # Errors
    /// [`Error::Truth`] when the ground truth is empty.
    pub fn verify_math(&self, response: &str, ground_truth: &str) -> Result<Verdict, Error> {
        let truth = self.math_truth(ground_truth)?;
        Ok(self.verify_math_truth(response, &truth))
    }

    /// [`Verifier::verify_math`] against a ground truth parsed once.
    pub fn verify_math_truth(&self, response: &str, truth: &MathTruth) -> Verdict {
        let region = extract::answer_region(response);
        let found = match extract::last_box(region) {
            extract::LastBox::Found(b) => b,
            _ => return verdict(Reason::NoBox, None, None, None),
        };
        let extracted = Some(found.content.trim().to_string());
        // Boxes joined to the last one by separators only are one list.
        let mut contents = vec![found.content];
        let mut cur = found;
        while let Some(prev) = extract::joined_before(region, &cur) {
            if contents.len() < 256 && !contents.contains(&prev.content) {
                contents.push(prev.content);
            }
            cur = prev;
        }
        let joined;
        let answer = if contents.len() == 1 {
            found.content
        } else {
            contents.reverse();
            joined = contents.join(", ");
            &joined
        };
        let p = math::Prepared::new(answer);
        if p.is_empty() {
            return verdict(Reason::EmptyBox, extracted, None, None);
        }
        let canonical = Some(p.canonical());
        let normalized = p.integer().map(|n| Integer::from_bigint(&n));
        let reason = if math::equivalent(&truth.0, &p) {
            Reason::Right
        } else if p.too_large() {
            Reason::TooLarge
        } else if contents.len() > 1 && !truth.0.is_list() {
            Reason::SeveralAnswers
        } else {
            Reason::Wrong
        };
        verdict(reason, extracted, normalized, canonical)
    }

    /// Scores a multiple-choice response against a letter `A`–`J` (`B`,
    /// `(B)`, `[B]`, `**B**`, `\text{(B)}`, `B)`; any case). The letter is read from the last box, else
    /// after the last "answer is" / "Answer:" / "option", else from a last
    /// line holding only the letter. No letter is [`Reason::NoBox`], a box
    /// naming two letters is [`Reason::SeveralAnswers`].
    ///
    /// # Errors
    /// [`Error::Truth`] when the ground truth is not one letter, bare or in those wrappers:
    /// `1e5` and `12b34` are errors, not `E` and `B`.
    pub fn verify_choice(&self, response: &str, ground_truth: &str) -> Result<Verdict, Error> {
        let Some(want) = choice::truth_letter(ground_truth) else {
            return Err(Error::Truth {
                mode: Mode::Choice,
                text: ground_truth.chars().take(80).collect(),
                why: "it is not one letter A-J",
            });
        };
        let (got, extracted) = choice::extract_choice(response);
        let (reason, canonical) = match got {
            choice::Choice::One(c) if c == want => (Reason::Right, Some(c)),
            choice::Choice::One(c) => (Reason::Wrong, Some(c)),
            choice::Choice::Several => (Reason::SeveralAnswers, None),
            choice::Choice::None => (Reason::NoBox, None),
        };
        Ok(verdict(
            reason,
            extracted,
            None,
            canonical.map(|c| char::from(c).to_string()),
        ))
    }

    /// Scores with the given mode: [`Verifier::verify`], [`Verifier::verify_math`]
    /// or [`Verifier::verify_choice`].
    ///
    /// # Errors
    /// The mode's ground-truth error.
    pub fn verify_mode(
        &self,
        mode: Mode,
        response: &str,
        ground_truth: &str,
    ) -> Result<Verdict, Error> {
        match mode {
            Mode::Integer => self.verify(response, ground_truth),
            Mode::Math => self.verify_math(response, ground_truth),
            Mode::Choice => self.verify_choice(response, ground_truth),
        }
    }

    /// Checks that a ground truth can be scored in `mode`.
    ///
    /// # Errors
    /// The mode's ground-truth error.
    pub fn check_truth(&self, mode: Mode, ground_truth: &str) -> Result<(), Error> {
        match mode {
            Mode::Integer => self.ground_truth(ground_truth).map(drop),
            Mode::Math => self.math_truth(ground_truth).map(drop),
            Mode::Choice => self.verify_choice("", ground_truth).map(drop),
        }
    }

    /// Scores many `(response, ground_truth)` pairs in parallel (rayon's
    /// global pool); results are in input order.
    pub fn verify_batch<R, G>(&self, pairs: &[(R, G)]) -> Vec<Result<Verdict, Error>>
    where
        R: AsRef<str> + Sync,
        G: AsRef<str> + Sync,
    {
        pairs
            .par_iter()
            .with_min_len(64)
            .map(|(r, g)| self.verify(r.as_ref(), g.as_ref()))
            .collect()
    }
}

fn verdict(
    reason: Reason,
    extracted: Option<String>,
    normalized: Option<Integer>,
    canonical: Option<String>,
) -> Verdict {
    Verdict {
        reward: u8::from(reason == Reason::Right),
        reason,
        extracted,
        normalized,
        canonical,
    }
}

fn reason_of(n: &Norm) -> Reason {
    match n {
        Norm::Int(_) => Reason::Right,
        Norm::Empty => Reason::EmptyBox,
        Norm::Several => Reason::SeveralAnswers,
        Norm::NotInteger => Reason::NotAnInteger,
        Norm::TooLarge => Reason::TooLarge,
    }
}

/// [`Verifier::verify`] with the default options.
///
/// # Errors
/// [`Error::GroundTruth`] when the ground truth is not an integer.
pub fn verify(response: &str, ground_truth: &str) -> Result<Verdict, Error> {
    Verifier::new().verify(response, ground_truth)
}

/// [`Verifier::verify_batch`] with the default options.
pub fn verify_batch<R, G>(pairs: &[(R, G)]) -> Vec<Result<Verdict, Error>>
where
    R: AsRef<str> + Sync,
    G: AsRef<str> + Sync,
{
    Verifier::new().verify_batch(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MB: usize = 10 << 20;
    const ONE_MB: usize = 1 << 20;

    fn reason(response: &str, gt: &str) -> Reason {
        verify(response, gt).unwrap().reason
    }

    /// Adversarial 10 MB responses: every scan is linear, so each of these
    /// finishes quickly (no timing is asserted; a quadratic scan would make
    /// this test run for hours).
    #[test]
    fn adversarial_ten_megabyte_responses() {
        // A million unclosed `\boxed{`, then braces nested two million deep.
        let mut s = "\\boxed{".repeat(1_000_000);
        s.push_str(&"{".repeat(TEN_MB - s.len()));
        assert_eq!(reason(&s, "1"), Reason::NoBox);

        // A million nested boxes, all closed: the innermost is empty.
        let s = format!("{}{}", "\\boxed{".repeat(1_000_000), "}".repeat(1_000_000));
        assert!(s.len() >= 8_000_000);
        assert_eq!(reason(&s, "1"), Reason::EmptyBox);

        // A box holding braces nested far deeper than any answer.
        let depth = TEN_MB / 2;
        let s = format!("\\boxed{{{}1{}}}", "{".repeat(depth), "}".repeat(depth));
        assert_eq!(reason(&s, "1"), Reason::NotAnInteger);

        // Adjacent boxes (1 MB each, so the debug build stays quick): the walk
        // back over joined boxes is linear.
        let s = "\\boxed{7}, ".repeat(ONE_MB / 11);
        assert_eq!(reason(&s, "7"), Reason::Right);
        let s = format!("\\boxed{{8}} {}", "\\boxed{7} ".repeat(ONE_MB / 10));
        assert_eq!(reason(&s, "7"), Reason::SeveralAnswers);

        // Many decoy commands that are not boxes.
        let s = format!("\\boxed{{5}}{}", "\\boxedx".repeat(TEN_MB / 7));
        assert_eq!(reason(&s, "5"), Reason::Right);
        let s = format!("\\fbox{{5}}{}", "\\fboxa\\\\".repeat(TEN_MB / 8));
        assert_eq!(reason(&s, "5"), Reason::Right);

        // One huge literal, and long lists of items and terms.
        let s = format!("\\boxed{{{}}}", "9".repeat(TEN_MB));
        assert_eq!(reason(&s, "9"), Reason::Wrong);
        let s = format!("\\boxed{{{}}}", "1,".repeat(ONE_MB / 2));
        assert_eq!(reason(&s, "1"), Reason::Right);
        let s = format!("\\boxed{{{}}}", "1+".repeat(ONE_MB / 2));
        assert_ne!(reason(&s, "1"), Reason::Right);
    }

    #[test]
    fn huge_expressions_are_refused_quickly() {
        for e in [
            "10^{10^{10}}",
            "2^{2^{2^{2^{2^{5}}}}}",
            "99999999!",
            "\\binom{10^{9}}{10^{8}}",
            "(10^{9})!",
        ] {
            assert_eq!(
                reason(&format!("\\boxed{{{e}}}"), "1"),
                Reason::TooLarge,
                "{e}"
            );
        }
    }

    #[test]
    fn integer_serde_round_trip() {
        let i: Integer = "007".parse().unwrap();
        assert_eq!(i.as_str(), "7");
        assert_eq!(serde_json::to_string(&i).unwrap(), "\"7\"");
        assert!(serde_json::from_str::<Integer>("\"1.5\"").is_err());
        assert_eq!(
            Integer::from(&BigInt::from(-12)).to_bigint(),
            BigInt::from(-12)
        );
    }
}
