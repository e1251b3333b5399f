//! The SFT corpus: demonstrations of the agent format built from generated tasks.
//!
//! Each demonstration is problem → reasoning → tool call with correct Python → tool response →
//! answer in `\boxed{}`. A configurable share (a third by default) first makes a failing call
//! (a typo in a name, a function that does not exist, a syntax error), reads the error and
//! fixes it. A share of each kind's demonstrations ([`SftConfig::wrong_programs`]) solves
//! the problem with a plausible but wrong program ([`Task::wrong_code`]: an off-by-one range,
//! the wrong modulus, …) that runs, prints a number, and boxes it, as imperfect real SFT data
//! does: only the verifier's reward can tell those apart. Tool responses are never invented:
//! the builder takes an executor callback (the trainer runs the code in `rstar-toolenv`) and
//! checks what it returns: the failing call must fail, the correct call must print the exact
//! answer and a wrong program the number [`Task::wrong_answer`] says, or the build stops with
//! an error.

use rand::SeedableRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::{Task, TaskKind, fnv1a};
use std::collections::BTreeMap;
use std::path::Path;

use crate::Error;
use rstar_episode::episode::{Limits, TextTokenizer, read_jsonl, write_jsonl};
use rstar_episode::template::{Template, TemplateFormat};
use rstar_episode::toolcall::{OutcomeKind, ToolCall, ToolOutcome};

/// How a demonstration's first call goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bug {
    /// `print` is misspelt `prnt` (a `NameError`).
    Typo,
    /// A helper that does not exist is called, e.g. `powmod(…)` (a `NameError`).
    WrongFunction,
    /// The last closing parenthesis is missing (a `SyntaxError`).
    SyntaxError,
}

impl Bug {
    /// Every bug.
    pub const ALL: [Bug; 3] = [Bug::Typo, Bug::WrongFunction, Bug::SyntaxError];

    /// The task's solution program with this bug in it.
    pub fn apply(self, task: &Task) -> String {
        self.apply_to(task, &task.solution_code())
    }

    /// `code` (the task's solution or its wrong program) with this bug in it.
    pub fn apply_to(self, task: &Task, code: &str) -> String {
        let a = &task.args;
        match self {
            Bug::Typo => code.replacen("print(", "prnt(", 1),
            Bug::WrongFunction => match task.kind {
                TaskKind::Product => format!("print(mul({},{}))", a[0], a[1]),
                TaskKind::ModPow => format!("print(powmod({},{},{}))", a[0], a[1], a[2]),
                TaskKind::DivisorCount => format!("print(len(divisors({})))", a[0]),
                TaskKind::DivisorSum => format!("print(sum(divisors({})))", a[0]),
                TaskKind::RangeSum => format!("print(range_sum({},{},{}))", a[0], a[1], a[2]),
                TaskKind::BaseConversion => format!("print(base({},{}))", a[0], a[1]),
                TaskKind::Power => format!("print(power({},{}))", a[0], a[1]),
                TaskKind::DigitSum => format!("print(digitsum({}**{}))", a[0], a[1]),
            },
            Bug::SyntaxError => match code.rfind(')') {
                Some(i) => format!("{}{}", &code[..i], &code[i + 1..]),
                None => format!("{code}("),
            },
        }
    }
}

/// Settings of the corpus builder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftConfig {
    /// Share of demonstrations whose first call fails (rounded to a count).
    pub failing_fraction: f64,
    /// Seed of the choice of failing demonstrations and of their bugs.
    pub seed: u64,
    /// Limits whose tool-response budget the demonstrations apply, so they look exactly like
    /// rollouts.
    pub limits: Limits,
    /// Per kind, the share of its demonstrations that use [`Task::wrong_code`] instead of the
    /// solution (rounded to a count of that kind's demonstrations, drawn with the seed's
    /// `wrong-programs` stream among those whose wrong program prints another number); kinds
    /// not listed are always solved correctly. Empty by default.
    #[serde(default)]
    pub wrong_programs: BTreeMap<TaskKind, f64>,
    /// The relative weight of each bug among the failing demonstrations; bugs not listed are
    /// never drawn. Empty (the default) draws the three uniformly. A corpus with one habitual
    /// bug (say `{"syntax_error": 1}` with `failing_fraction` above one half) makes the failing
    /// first call the SFT policy's *mode*, which sharpening alone never removes.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bug_weights: BTreeMap<Bug, f64>,
}

impl SftConfig {
    /// A third failing, seed 0, the given limits.
    pub fn new(limits: Limits) -> Self {
        SftConfig {
            failing_fraction: 1.0 / 3.0,
            seed: 0,
            limits,
            wrong_programs: BTreeMap::new(),
            bug_weights: BTreeMap::new(),
        }
    }
}

impl Default for SftConfig {
    fn default() -> Self {
        SftConfig::new(Limits::compact())
    }
}

/// A piece of a demonstration's response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// The text.
    pub text: String,
    /// Whether it is an assistant turn (trained on) rather than a tool turn.
    pub trainable: bool,
}

/// One SFT example: a prompt and the response split into assistant and tool turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Demonstration {
    /// The task's id.
    pub id: String,
    /// The template it is written in.
    pub template: TemplateFormat,
    /// The prompt.
    pub prompt: String,
    /// Assistant and tool turns, alternating, starting and ending with an assistant turn.
    pub segments: Vec<Segment>,
    /// The first call's bug, if it had one.
    pub bug: Option<Bug>,
    /// The answer in `\boxed{}`: the ground truth, or what the wrong program printed.
    pub answer: String,
    /// Whether it solves the problem with [`Task::wrong_code`] (its `answer` is then wrong).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub wrong_program: bool,
}

impl Demonstration {
    /// The response text (all segments).
    pub fn response_text(&self) -> String {
        self.segments.iter().map(|s| s.text.as_str()).collect()
    }

    /// Prompt and response.
    pub fn full_text(&self) -> String {
        format!("{}{}", self.prompt, self.response_text())
    }

    /// The assistant turns' texts, in order.
    pub fn assistant_turns(&self) -> Vec<&str> {
        self.segments
            .iter()
            .filter(|s| s.trainable)
            .map(|s| s.text.as_str())
            .collect()
    }

    /// Token ids of prompt and response, and the loss mask (0 on the prompt and tool turns,
    /// 1 on assistant turns). Segments are tokenized one by one, as an episode does.
    pub fn encode(&self, tokenizer: &(impl TextTokenizer + ?Sized)) -> (Vec<u32>, Vec<u8>) {
        let mut ids = tokenizer.encode(&self.prompt);
        let mut mask = vec![0u8; ids.len()];
        for s in &self.segments {
            let seg = tokenizer.encode(&s.text);
            mask.extend(std::iter::repeat_n(u8::from(s.trainable), seg.len()));
            ids.extend(seg);
        }
        (ids, mask)
    }
}

/// Reasoning before the first call.
fn plan(task: &Task, format: TemplateFormat) -> String {
    let a = &task.args;
    match format {
        TemplateFormat::Compact => match task.kind {
            TaskKind::Product => "Multiply.",
            TaskKind::ModPow => "Use pow.",
            TaskKind::DivisorCount => "Count divisors.",
            TaskKind::DivisorSum => "Sum divisors.",
            TaskKind::RangeSum => "Sum multiples.",
            TaskKind::BaseConversion => "Convert.",
            TaskKind::Power => "Power.",
            TaskKind::DigitSum => "Sum digits.",
        }
        .to_string(),
        TemplateFormat::ChatMl => {
            let what = match task.kind {
                TaskKind::Product => format!("I need the product of {} and {}.", a[0], a[1]),
                TaskKind::ModPow => format!(
                    "I need {}^{} modulo {}; Python's three-argument pow does this exactly.",
                    a[0], a[1], a[2]
                ),
                TaskKind::DivisorCount => {
                    format!("I need to count the positive divisors of {}.", a[0])
                }
                TaskKind::DivisorSum => {
                    format!("I need the sum of the positive divisors of {}.", a[0])
                }
                TaskKind::RangeSum => format!(
                    "I need the sum of the multiples of {} between {} and {}, inclusive.",
                    a[2], a[0], a[1]
                ),
                TaskKind::BaseConversion => {
                    format!("I need the digits of {} in base {}.", a[0], a[1])
                }
                TaskKind::Power => format!("I need the exact value of {}^{}.", a[0], a[1]),
                TaskKind::DigitSum => {
                    format!("I need the sum of the decimal digits of {}^{}.", a[0], a[1])
                }
            };
            format!("{what} This is error-prone by hand, so I will compute it with Python.")
        }
    }
}

/// Reasoning after a failed call.
fn fix(format: TemplateFormat, outcome: &ToolOutcome) -> String {
    match format {
        TemplateFormat::Compact => "Fix.".to_string(),
        TemplateFormat::ChatMl => {
            // The compact body is the error's headline, e.g. `NameError: name 'prnt' is …`.
            let headline = Template::compact().tool_response_body(outcome);
            format!("The code failed ({headline}). I will fix it and run it again.")
        }
    }
}

/// Reasoning before the answer.
fn conclude(format: TemplateFormat, answer: &str) -> String {
    match format {
        TemplateFormat::Compact => String::new(),
        TemplateFormat::ChatMl => format!("The code printed {answer}."),
    }
}

/// Which tasks get their wrong program: for each kind with share `s` in
/// `config.wrong_programs`, `round(s · n_kind)` of its `n_kind` tasks, drawn with a generator
/// seeded from `config.seed` and the stream name `wrong-programs` among the tasks whose wrong
/// program prints another number than the answer (fewer when too few do).
pub fn wrong_program_choice(tasks: &[Task], config: &SftConfig) -> Vec<bool> {
    let mut rng = ChaCha8Rng::seed_from_u64(fnv1a(&format!("{}/wrong-programs", config.seed)));
    let mut wrong = vec![false; tasks.len()];
    for (&kind, &share) in &config.wrong_programs {
        let of_kind: Vec<usize> = (0..tasks.len())
            .filter(|&i| tasks[i].kind == kind)
            .collect();
        let want = (share.clamp(0.0, 1.0) * of_kind.len() as f64).round() as usize;
        let mut eligible: Vec<usize> = of_kind
            .into_iter()
            .filter(|&i| tasks[i].wrong_program_differs())
            .collect();
        eligible.shuffle(&mut rng);
        for &i in eligible.iter().take(want) {
            wrong[i] = true;
        }
    }
    wrong
}

/// Builds one demonstration per task. `executor` runs each call (correct, wrong and buggy)
/// and its outcomes become the tool turns. Exactly `round(failing_fraction · n)`
/// demonstrations, chosen with the seed, start with a buggy call; each of those gets a bug
/// drawn uniformly. Independently, [`wrong_program_choice`] picks those that use their wrong
/// program.
///
/// # Errors
/// [`Error::Demonstration`] when a buggy call does not fail, a correct call does not
/// print exactly the answer or a wrong program not exactly its wrong answer (for example when
/// Python is missing, or the executor is wrong).
pub fn build_corpus(
    tasks: &[Task],
    template: &Template,
    config: &SftConfig,
    mut executor: impl FnMut(&ToolCall) -> ToolOutcome,
) -> Result<Vec<Demonstration>, Error> {
    let wrong = wrong_program_choice(tasks, config);
    let n = tasks.len();
    let failing = ((config.failing_fraction.clamp(0.0, 1.0)) * n as f64).round() as usize;
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    let mut bugs: Vec<Option<Bug>> = vec![None; n];
    let weighted: Vec<(Bug, f64)> = config
        .bug_weights
        .iter()
        .filter(|(_, w)| **w > 0.0)
        .map(|(b, w)| (*b, *w))
        .collect();
    for &i in &order[..failing] {
        bugs[i] = Some(if weighted.is_empty() {
            *Bug::ALL.choose(&mut rng).expect("non-empty")
        } else {
            weighted
                .choose_weighted(&mut rng, |(_, w)| *w)
                .map_err(|e| Error::Demonstration {
                    id: tasks[i].id.clone(),
                    message: format!("sft bug weights {:?}: {e}", config.bug_weights),
                })?
                .0
        });
    }
    tasks
        .iter()
        .zip(bugs)
        .zip(wrong)
        .map(|((task, bug), wrong)| {
            demonstrate_program(task, bug, wrong, template, config, &mut executor)
        })
        .collect()
}

/// One demonstration of `task`, with `bug` in its first call if given.
pub fn demonstrate(
    task: &Task,
    bug: Option<Bug>,
    template: &Template,
    config: &SftConfig,
    executor: &mut impl FnMut(&ToolCall) -> ToolOutcome,
) -> Result<Demonstration, Error> {
    demonstrate_program(task, bug, false, template, config, executor)
}

/// [`demonstrate`], with the task's wrong program ([`Task::wrong_code`]) instead of its
/// solution when `wrong`: the demonstration boxes the number it prints.
pub fn demonstrate_program(
    task: &Task,
    bug: Option<Bug>,
    wrong: bool,
    template: &Template,
    config: &SftConfig,
    executor: &mut impl FnMut(&ToolCall) -> ToolOutcome,
) -> Result<Demonstration, Error> {
    let format = template.format;
    let (code, answer) = if wrong {
        (task.wrong_code(), task.wrong_answer())
    } else {
        (task.solution_code(), task.answer())
    };
    let budget = config.limits.max_tool_response_chars;
    let fail = |message: String| Error::Demonstration {
        id: task.id.clone(),
        message,
    };
    let mut segments = Vec::new();
    let mut reasoning = plan(task, format);
    if let Some(bug) = bug {
        let call = ToolCall::python(bug.apply_to(task, &code));
        let outcome = executor(&call);
        if !outcome.is_error() {
            return Err(fail(format!(
                "the buggy call ({bug:?}) did not fail: {:?}",
                outcome.text
            )));
        }
        segments.push(Segment {
            text: template.render_call_turn(&reasoning, &call),
            trainable: true,
        });
        segments.push(Segment {
            text: template.render_tool_turn(std::slice::from_ref(&outcome), budget),
            trainable: false,
        });
        reasoning = fix(format, &outcome);
    }
    let call = ToolCall::python(code);
    let outcome = executor(&call);
    let printed = outcome.stdout().map(str::trim);
    if outcome.kind != OutcomeKind::Output || printed != Some(answer.as_str()) {
        let which = if wrong { "wrong program" } else { "solution" };
        return Err(fail(format!(
            "the {which} printed {printed:?} ({:?}), expected {answer:?}",
            outcome.kind
        )));
    }
    segments.push(Segment {
        text: template.render_call_turn(&reasoning, &call),
        trainable: true,
    });
    segments.push(Segment {
        text: template.render_tool_turn(std::slice::from_ref(&outcome), budget),
        trainable: false,
    });
    segments.push(Segment {
        text: template.render_answer_turn(&conclude(format, &answer), &answer),
        trainable: true,
    });
    Ok(Demonstration {
        id: task.id.clone(),
        template: format,
        prompt: template.render_prompt(&task.problem_text()),
        segments,
        bug,
        answer,
        wrong_program: wrong,
    })
}

/// Writes a corpus as JSONL (one [`Demonstration`] a line), e.g. as a run artefact.
pub fn write_corpus(path: &Path, demos: &[Demonstration]) -> Result<(), Error> {
    Ok(write_jsonl(path, demos)?)
}

/// Reads a corpus written by [`write_corpus`]; errors name the file and line.
pub fn read_corpus(path: &Path) -> Result<Vec<Demonstration>, Error> {
    Ok(read_jsonl(path)?)
}
