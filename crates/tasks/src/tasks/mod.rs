//! The embedded task set: seeded integer problems that are hard in one's head and easy with
//! Python, each with an exactly computed answer, split into train and held-out sets, plus the
//! SFT corpus builder ([`sft`]) and JSONL in the schema of `../shared/datasets`.
//!
//! Splits are disjoint by construction:
//!
//! - **by numbers**: a problem belongs to [`Split::HeldOut`] when a fixed hash (FNV-1a) of its
//!   kind and numbers falls in the first `held_out_per_mille` of 1000 buckets, else to
//!   [`Split::Train`]; the membership of a problem never depends on a seed;
//! - **by template**: [`Split::HeldOutKinds`] draws only from `held_out_kinds`, which must not
//!   overlap the training `kinds`.
//!
//! ```
//! use rstar_tasks::tasks::{Split, TaskConfig, TaskSet};
//!
//! let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
//! let train = set.generate(Split::Train, 5, 7).unwrap();
//! let test = set.generate(Split::HeldOut, 5, 7).unwrap();
//! assert!(train.iter().all(|t| !test.iter().any(|u| u.key() == t.key())));
//! assert_eq!(train, set.generate(Split::Train, 5, 7).unwrap()); // seeded
//! println!("{} = {}", train[0].problem_text(), train[0].answer());
//! ```

pub mod math;
pub mod sft;

use rstar_episode::{IoError, LineError};
use std::collections::HashSet;
use std::io::BufRead;
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::Error;

/// A kind of problem (a "template" of the issue: one phrasing, one solution program).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// `a*b` with two 4–5 digit factors.
    Product,
    /// `a^e mod m`.
    ModPow,
    /// The number of divisors of `n` (below 100 000, so the brute-force program runs in
    /// milliseconds).
    DivisorCount,
    /// The sum of the divisors of `n` (below 100 000).
    DivisorSum,
    /// The sum of the multiples of `k` in `[a, b]`.
    RangeSum,
    /// `n` written in base `b` (2–9); the digits read as a decimal integer.
    BaseConversion,
    /// `a^e` exactly (up to ~80 digits).
    Power,
    /// The sum of the decimal digits of `a^e`.
    DigitSum,
}

impl TaskKind {
    /// Every kind.
    pub const ALL: [TaskKind; 8] = [
        TaskKind::Product,
        TaskKind::ModPow,
        TaskKind::DivisorCount,
        TaskKind::DivisorSum,
        TaskKind::RangeSum,
        TaskKind::BaseConversion,
        TaskKind::Power,
        TaskKind::DigitSum,
    ];

    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskKind::Product => "product",
            TaskKind::ModPow => "mod_pow",
            TaskKind::DivisorCount => "divisor_count",
            TaskKind::DivisorSum => "divisor_sum",
            TaskKind::RangeSum => "range_sum",
            TaskKind::BaseConversion => "base_conversion",
            TaskKind::Power => "power",
            TaskKind::DigitSum => "digit_sum",
        }
    }

    /// Draws the numbers of a problem of this kind.
    fn sample(self, rng: &mut ChaCha8Rng) -> Vec<u64> {
        match self {
            TaskKind::Product => vec![
                rng.random_range(1000..100_000),
                rng.random_range(1000..100_000),
            ],
            TaskKind::ModPow => vec![
                rng.random_range(2..1000),
                rng.random_range(100..10_000),
                rng.random_range(1000..10_000),
            ],
            TaskKind::DivisorCount | TaskKind::DivisorSum => {
                vec![rng.random_range(1000..100_000)]
            }
            TaskKind::RangeSum => vec![
                rng.random_range(1..1000),
                rng.random_range(1000..100_000),
                rng.random_range(3..20),
            ],
            TaskKind::BaseConversion => {
                vec![rng.random_range(100..100_000), rng.random_range(2..10)]
            }
            TaskKind::Power => vec![rng.random_range(2..100), rng.random_range(10..41)],
            TaskKind::DigitSum => vec![rng.random_range(2..100), rng.random_range(20..100)],
        }
    }
}

/// Which part of the task space to draw from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Training kinds, numbers outside the held-out buckets.
    Train,
    /// Training kinds, numbers in the held-out buckets (never in `Train`).
    HeldOut,
    /// Held-out kinds only (never trained on).
    HeldOutKinds,
}

impl Split {
    /// The snake_case name, used in problem ids.
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::HeldOut => "held_out",
            Split::HeldOutKinds => "held_out_kinds",
        }
    }
}

/// One generated problem: its kind and numbers. Everything else (text, answer, solution
/// program) is derived from them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Task {
    /// A unique id within its split, e.g. `train-00042-product`.
    pub id: String,
    /// The kind.
    pub kind: TaskKind,
    /// The numbers, in the order the kind's text uses them.
    pub args: Vec<u64>,
}

impl Task {
    /// Builds a task; `args` must have the arity of `kind` (see [`TaskKind`]).
    pub fn new(id: impl Into<String>, kind: TaskKind, args: Vec<u64>) -> Self {
        Task {
            id: id.into(),
            kind,
            args,
        }
    }

    /// The identity used for splitting and de-duplication: kind and numbers.
    pub fn key(&self) -> String {
        let nums: Vec<String> = self.args.iter().map(u64::to_string).collect();
        format!("{}:{}", self.kind.as_str(), nums.join(","))
    }

    /// The problem statement.
    pub fn problem_text(&self) -> String {
        let a = &self.args;
        match self.kind {
            TaskKind::Product => format!("What is {}*{}?", a[0], a[1]),
            TaskKind::ModPow => format!("What is {}^{} mod {}?", a[0], a[1], a[2]),
            TaskKind::DivisorCount => format!("How many divisors does {} have?", a[0]),
            TaskKind::DivisorSum => format!("What is the sum of the divisors of {}?", a[0]),
            TaskKind::RangeSum => {
                format!("Sum the multiples of {} from {} to {}.", a[2], a[0], a[1])
            }
            TaskKind::BaseConversion => format!("Write {} in base {}.", a[0], a[1]),
            TaskKind::Power => format!("What is {}^{}?", a[0], a[1]),
            TaskKind::DigitSum => format!("What is the digit sum of {}^{}?", a[0], a[1]),
        }
    }

    /// The exact answer, as the integer's decimal text.
    pub fn answer(&self) -> String {
        let a = &self.args;
        match self.kind {
            TaskKind::Product => (u128::from(a[0]) * u128::from(a[1])).to_string(),
            TaskKind::ModPow => math::mod_pow(a[0], a[1], a[2]).to_string(),
            TaskKind::DivisorCount => math::divisor_count(a[0]).to_string(),
            TaskKind::DivisorSum => math::divisor_sum(a[0]).to_string(),
            TaskKind::RangeSum => math::sum_of_multiples(a[0], a[1], a[2]).to_string(),
            TaskKind::BaseConversion => math::to_base(a[0], a[1]),
            TaskKind::Power => math::big_pow(a[0], a[1] as u32).to_string(),
            TaskKind::DigitSum => math::digit_sum(&math::big_pow(a[0], a[1] as u32)).to_string(),
        }
    }

    /// A short Python program that prints the answer (kept short for character models).
    pub fn solution_code(&self) -> String {
        let a = &self.args;
        match self.kind {
            TaskKind::Product => format!("print({}*{})", a[0], a[1]),
            TaskKind::ModPow => format!("print(pow({},{},{}))", a[0], a[1], a[2]),
            TaskKind::DivisorCount => {
                format!("n={}\nprint(sum(n%d==0 for d in range(1,n+1)))", a[0])
            }
            TaskKind::DivisorSum => {
                format!("n={}\nprint(sum(d for d in range(1,n+1) if n%d==0))", a[0])
            }
            // `b+1` is left to Python: the policy should copy numbers, not add to them.
            TaskKind::RangeSum => format!(
                "print(sum(x for x in range({},{}+1) if x%{}==0))",
                a[0], a[1], a[2]
            ),
            TaskKind::BaseConversion => format!(
                "n,s={},''\nwhile n:s=str(n%{b})+s;n//={b}\nprint(s)",
                a[0],
                b = a[1]
            ),
            TaskKind::Power => format!("print({}**{})", a[0], a[1]),
            TaskKind::DigitSum => format!("print(sum(map(int,str({}**{}))))", a[0], a[1]),
        }
    }

    /// A plausible but wrong program for the task: it runs and prints a number, but not the
    /// answer (for the SFT corpus's imperfect demonstrations, `sft::SftConfig::wrong_programs`):
    ///
    /// - product: an off-by-one factor, `a*(b-1)`;
    /// - modular power: the wrong modulus, `pow(a,e,m+1)`;
    /// - divisor count and sum: an off-by-one range, `range(1,n)`, which misses `n` itself;
    /// - range sum: stepping by `k` from `a`, `sum(range(a,b+1,k))`, which sums multiples
    ///   only when `a` is one;
    /// - base conversion: the digits in the wrong order (appended instead of prepended);
    /// - exact power: an off-by-one exponent, `a**(e-1)`;
    /// - digit sum: the digit sum of the wrong number, `a*e` instead of `a**e`.
    ///
    /// Its output is [`Task::wrong_answer`]; it can coincide with the truth (a modulus, a range
    /// starting at a multiple, a palindrome), which [`Task::wrong_program_differs`] tells.
    pub fn wrong_code(&self) -> String {
        let a = &self.args;
        match self.kind {
            TaskKind::Product => format!("print({}*({}-1))", a[0], a[1]),
            TaskKind::ModPow => format!("print(pow({},{},{}+1))", a[0], a[1], a[2]),
            TaskKind::DivisorCount => {
                format!("n={}\nprint(sum(n%d==0 for d in range(1,n)))", a[0])
            }
            TaskKind::DivisorSum => {
                format!("n={}\nprint(sum(d for d in range(1,n) if n%d==0))", a[0])
            }
            TaskKind::RangeSum => format!("print(sum(range({},{}+1,{})))", a[0], a[1], a[2]),
            TaskKind::BaseConversion => format!(
                "n,s={},''\nwhile n:s+=str(n%{b});n//={b}\nprint(s)",
                a[0],
                b = a[1]
            ),
            TaskKind::Power => format!("print({}**({}-1))", a[0], a[1]),
            TaskKind::DigitSum => format!("print(sum(map(int,str({}*{}))))", a[0], a[1]),
        }
    }

    /// What [`Task::wrong_code`] prints (computed here, independently of Python).
    pub fn wrong_answer(&self) -> String {
        let a = &self.args;
        match self.kind {
            TaskKind::Product => (u128::from(a[0]) * u128::from(a[1] - 1)).to_string(),
            TaskKind::ModPow => math::mod_pow(a[0], a[1], a[2] + 1).to_string(),
            TaskKind::DivisorCount => (math::divisor_count(a[0]) - 1).to_string(),
            TaskKind::DivisorSum => (math::divisor_sum(a[0]) - u128::from(a[0])).to_string(),
            TaskKind::RangeSum => {
                let (lo, hi, k) = (u128::from(a[0]), u128::from(a[1]), u128::from(a[2]));
                let count = if hi < lo { 0 } else { (hi - lo) / k + 1 };
                (count * lo + k * count * count.saturating_sub(1) / 2).to_string()
            }
            TaskKind::BaseConversion => math::to_base(a[0], a[1]).chars().rev().collect(),
            TaskKind::Power => math::big_pow(a[0], a[1] as u32 - 1).to_string(),
            TaskKind::DigitSum => math::digit_sum(&math::big_pow(a[0] * a[1], 1)).to_string(),
        }
    }

    /// Whether [`Task::wrong_answer`] is a different number from [`Task::answer`] (compared
    /// as integers: reversed digits may start with zeros).
    pub fn wrong_program_differs(&self) -> bool {
        fn number(s: &str) -> &str {
            let t = s.trim_start_matches('0');
            if t.is_empty() { "0" } else { t }
        }
        number(&self.wrong_answer()) != number(&self.answer())
    }

    /// As a dataset record (`source` is `rstar-agent/tasks/<kind>`).
    pub fn to_problem(&self) -> Problem {
        Problem {
            id: self.id.clone(),
            problem: self.problem_text(),
            answer: self.answer(),
            source: format!("rstar-agent/tasks/{}", self.kind.as_str()),
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskConfig {
    /// Kinds of the training and held-out-numbers splits.
    pub kinds: Vec<TaskKind>,
    /// Kinds seen only in [`Split::HeldOutKinds`].
    pub held_out_kinds: Vec<TaskKind>,
    /// Share of each kind's number space held out, in thousandths (1..=999).
    pub held_out_per_mille: u32,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig::embedded_default()
    }
}

impl TaskConfig {
    /// The embedded default: trains on products, modular powers, divisor counts and range
    /// sums (four kinds, as in the issue's calibration); holds out divisor sums, base
    /// conversion, exact powers and digit sums; holds out 10% of the number space.
    pub fn embedded_default() -> Self {
        TaskConfig {
            kinds: vec![
                TaskKind::Product,
                TaskKind::ModPow,
                TaskKind::DivisorCount,
                TaskKind::RangeSum,
            ],
            held_out_kinds: vec![
                TaskKind::DivisorSum,
                TaskKind::BaseConversion,
                TaskKind::Power,
                TaskKind::DigitSum,
            ],
            held_out_per_mille: 100,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        if self.kinds.is_empty() {
            return Err(Error::TaskConfig("`kinds` is empty".to_string()));
        }
        if !(1..=999).contains(&self.held_out_per_mille) {
            return Err(Error::TaskConfig(format!(
                "`held_out_per_mille` is {}, expected 1..=999",
                self.held_out_per_mille
            )));
        }
        if let Some(k) = self.held_out_kinds.iter().find(|k| self.kinds.contains(k)) {
            return Err(Error::TaskConfig(format!(
                "kind `{}` is in both `kinds` and `held_out_kinds`",
                k.as_str()
            )));
        }
        Ok(())
    }
}

/// FNV-1a, 64 bit: a fixed hash, so split membership is the same on every machine and run.
pub(crate) fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A generator of tasks for a [`TaskConfig`].
#[derive(Debug, Clone)]
pub struct TaskSet {
    config: TaskConfig,
}

impl TaskSet {
    /// Checks the config: `kinds` non-empty, `held_out_per_mille` in 1..=999, no kind in both
    /// lists.
    pub fn new(config: TaskConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(TaskSet { config })
    }

    /// The config.
    pub fn config(&self) -> &TaskConfig {
        &self.config
    }

    /// The split a task of a training kind belongs to, by its numbers.
    pub fn split_of(&self, task: &Task) -> Split {
        if self.config.held_out_kinds.contains(&task.kind) {
            Split::HeldOutKinds
        } else if fnv1a(&task.key()) % 1000 < u64::from(self.config.held_out_per_mille) {
            Split::HeldOut
        } else {
            Split::Train
        }
    }

    /// `n` distinct tasks of a split, drawn with a seeded RNG: kinds uniformly at random,
    /// numbers uniformly in each kind's ranges. The same arguments give the same tasks.
    pub fn generate(&self, split: Split, n: usize, seed: u64) -> Result<Vec<Task>, Error> {
        let kinds = match split {
            Split::Train | Split::HeldOut => &self.config.kinds,
            Split::HeldOutKinds => &self.config.held_out_kinds,
        };
        if kinds.is_empty() && n > 0 {
            return Err(Error::TaskConfig(format!(
                "no kinds to draw the `{}` split from",
                split.as_str()
            )));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut seen = HashSet::new();
        let mut out = Vec::with_capacity(n);
        let max_attempts = 1000 * n as u64 + 1000;
        let mut attempts = 0u64;
        while out.len() < n {
            attempts += 1;
            if attempts > max_attempts {
                return Err(Error::TaskConfig(format!(
                    "could not draw {n} distinct `{}` problems",
                    split.as_str()
                )));
            }
            let kind = kinds[rng.random_range(0..kinds.len())];
            let args = kind.sample(&mut rng);
            let id = format!("{}-{:05}-{}", split.as_str(), out.len(), kind.as_str());
            let task = Task::new(id, kind, args);
            if self.split_of(&task) == split && seen.insert(task.key()) {
                out.push(task);
            }
        }
        Ok(out)
    }
}

/// A problem record in the schema of `../shared/datasets`: `{"id", "problem", "answer", "source"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// Unique id.
    pub id: String,
    /// The statement.
    pub problem: String,
    /// The ground truth, as text.
    pub answer: String,
    /// Where it came from.
    pub source: String,
}

/// Writes problems as JSONL, one record a line.
pub fn write_problems(path: &Path, problems: &[Problem]) -> Result<(), Error> {
    Ok(rstar_episode::episode::write_jsonl(path, problems)?)
}

/// Reads a JSONL problem file (ours or `../shared/datasets/*.jsonl`). Extra fields (`lang`)
/// are ignored; a numeric `answer` is read as its text. Errors name the file, the line and
/// the field. Blank lines are skipped.
pub fn read_problems(path: &Path) -> Result<Vec<Problem>, Error> {
    let io = |source| Error::Io(IoError::new(path.to_path_buf(), source));
    let file = std::fs::File::open(path).map_err(io)?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        let bad =
            |message: String| Error::Dataset(LineError::new(path.to_path_buf(), i + 1, message));
        let value: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| bad(format!("invalid json: {e}")))?;
        let object = value
            .as_object()
            .ok_or_else(|| bad("the record is not a json object".to_string()))?;
        let field = |name: &str, numbers_ok: bool| -> Result<String, Error> {
            match object.get(name) {
                Some(serde_json::Value::String(s)) => Ok(s.clone()),
                Some(serde_json::Value::Number(n)) if numbers_ok => Ok(n.to_string()),
                Some(_) => Err(bad(format!("field `{name}` must be a string"))),
                None => Err(bad(format!("missing field `{name}`"))),
            }
        };
        out.push(Problem {
            id: field("id", true)?,
            problem: field("problem", false)?,
            answer: field("answer", true)?,
            source: match object.get("source") {
                None | Some(serde_json::Value::Null) => String::new(),
                Some(_) => field("source", false)?,
            },
        });
    }
    Ok(out)
}

impl From<&Task> for rstar_episode::Prompt {
    fn from(task: &Task) -> Self {
        rstar_episode::Prompt::new(task.id.clone(), task.problem_text(), task.answer())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: TaskKind, args: &[u64], text: &str, answer: &str) {
        let t = Task::new("x", kind, args.to_vec());
        assert_eq!(t.problem_text(), text);
        assert_eq!(t.answer(), answer, "{text}");
    }

    #[test]
    fn answers_by_hand() {
        check(
            TaskKind::Product,
            &[12345, 6789],
            "What is 12345*6789?",
            "83810205",
        );
        check(
            TaskKind::ModPow,
            &[3, 200, 1000],
            "What is 3^200 mod 1000?",
            "1",
        ); // 3^100 ≡ 1 (mod 1000)
        check(
            TaskKind::DivisorCount,
            &[1024],
            "How many divisors does 1024 have?",
            "11",
        );
        check(
            TaskKind::DivisorSum,
            &[1000],
            "What is the sum of the divisors of 1000?",
            "2340",
        ); // 15·156
        check(
            TaskKind::RangeSum,
            &[10, 30, 7],
            "Sum the multiples of 7 from 10 to 30.",
            "63",
        ); // 14+21+28
        check(
            TaskKind::BaseConversion,
            &[100, 3],
            "Write 100 in base 3.",
            "10201",
        ); // 81+18+1
        check(TaskKind::Power, &[12, 10], "What is 12^10?", "61917364224");
        check(
            TaskKind::DigitSum,
            &[10, 50],
            "What is the digit sum of 10^50?",
            "1",
        );
    }

    #[test]
    fn wrong_answers_by_hand() {
        let wrong = |kind, args: &[u64]| Task::new("x", kind, args.to_vec()).wrong_answer();
        assert_eq!(wrong(TaskKind::Product, &[12345, 6789]), "83797860"); // 12345·6788
        assert_eq!(wrong(TaskKind::ModPow, &[3, 4, 10]), "4"); // 81 mod 11
        assert_eq!(wrong(TaskKind::DivisorCount, &[1024]), "10");
        assert_eq!(wrong(TaskKind::DivisorSum, &[1000]), "1340");
        // 10 + 17 + 24: stepping by 7 from 10, not the multiples 14, 21, 28.
        assert_eq!(wrong(TaskKind::RangeSum, &[10, 30, 7]), "51");
        assert_eq!(wrong(TaskKind::RangeSum, &[31, 30, 7]), "0");
        assert_eq!(wrong(TaskKind::BaseConversion, &[6, 2]), "011"); // 110 reversed
        assert_eq!(wrong(TaskKind::Power, &[12, 10]), "5159780352"); // 12^9
        assert_eq!(wrong(TaskKind::DigitSum, &[10, 50]), "5"); // 500
        let t = |kind, args: &[u64]| Task::new("x", kind, args.to_vec());
        assert!(!t(TaskKind::RangeSum, &[14, 30, 7]).wrong_program_differs());
        assert!(!t(TaskKind::BaseConversion, &[100, 3]).wrong_program_differs()); // 10201
        assert!(t(TaskKind::BaseConversion, &[6, 2]).wrong_program_differs());
        assert!(t(TaskKind::Product, &[2, 3]).wrong_program_differs());
    }

    #[test]
    fn every_kind_generates_valid_answers() {
        let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
        for split in [Split::Train, Split::HeldOut, Split::HeldOutKinds] {
            for t in set.generate(split, 40, 3).unwrap() {
                let a = t.answer();
                assert!(
                    !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()),
                    "{a}"
                );
                assert!(a == "0" || !a.starts_with('0'), "{a}");
                assert_eq!(set.split_of(&t), split);
            }
        }
    }

    #[test]
    fn bad_configs_are_rejected() {
        let mut c = TaskConfig::embedded_default();
        c.held_out_kinds.push(TaskKind::Product);
        let err = TaskSet::new(c).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid task config: kind `product` is in both `kinds` and `held_out_kinds`"
        );
        let mut c = TaskConfig::embedded_default();
        c.held_out_per_mille = 0;
        assert!(TaskSet::new(c).is_err());
        let mut c = TaskConfig::embedded_default();
        c.kinds.clear();
        assert!(TaskSet::new(c).is_err());
        let mut c = TaskConfig::embedded_default();
        c.held_out_kinds.clear();
        let set = TaskSet::new(c).unwrap();
        assert!(set.generate(Split::HeldOutKinds, 1, 0).is_err());
        assert!(set.generate(Split::HeldOutKinds, 0, 0).unwrap().is_empty());
    }

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
    }

    proptest::proptest! {
        #[test]
        fn splits_never_overlap(seed in 0u64..1000) {
            let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
            let train = set.generate(Split::Train, 30, seed).unwrap();
            let held = set.generate(Split::HeldOut, 30, seed).unwrap();
            let keys: HashSet<String> = train.iter().map(Task::key).collect();
            proptest::prop_assert_eq!(keys.len(), 30);
            for t in &held {
                proptest::prop_assert!(!keys.contains(&t.key()));
            }
        }
    }
}
