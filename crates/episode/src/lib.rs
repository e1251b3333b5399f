//! The rStar2-Agent turn format, with nothing else: prompt templates, tool-call parsing, the
//! pure [`Episode`] state machine and the serialisable [`Trajectory`].
//!
//! [`template`] holds the reference ChatML prompt (Hermes tool calls) and a compact one for
//! character models; [`toolcall`] parses calls and renders tool responses in code-judge's
//! layout; [`episode`] is the state machine a driver steps (generate, run tools, repeat) and the
//! trajectory it records; [`Prompt`] is one problem to roll out. Tokenizers plug in through
//! [`episode::TextTokenizer`]. [`records`] are the per-step and per-evaluation records the drivers
//! and the trainer write (`metrics.jsonl`, `eval.jsonl`) and [`interval`] the Wilson interval
//! their accuracies carry: here, so that the drivers that write them and the readers in
//! `rstar-analysis` share them without depending on each other.
//!
//! It is **not** a driver, a model or a sandbox: it never generates text, never runs code and
//! depends on no tensor library and no async runtime (serde and thiserror only). The drivers
//! that put a policy and the sandbox around it live in `rstar-agent`. Errors are [`Error`].
//!
//! ```
//! use rstar_episode::{ByteTokenizer, Episode, Limits, Step, Template, ToolOutcome};
//!
//! let tok = ByteTokenizer;
//! let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "What is 6*7?");
//! let Step::CallTools(calls) = ep.push_assistant_text("<c>print(6*7)</c>").unwrap() else {
//!     panic!("a call was expected")
//! };
//! assert_eq!(calls[0].code, "print(6*7)");
//! ep.push_tool_outcomes(vec![ToolOutcome::code_judge(true, "", "42\n", "", 0.01)]).unwrap();
//! ep.push_assistant_text("<answer>\\boxed{42}</answer>").unwrap();
//! assert!(ep.finish().unwrap().response_text().ends_with("\\boxed{42}</answer>"));
//! ```
//!
//! # Crate features
//! None.
#![warn(missing_docs)]

pub mod chat;
pub mod episode;
pub mod error;
pub mod interval;
pub mod prompt;
pub mod records;
pub mod template;
pub mod toolcall;

pub use episode::{ByteTokenizer, Episode, Limits, Step, StopReason, TextTokenizer, Trajectory};
pub use error::{Error, IoError, LineError};
pub use prompt::Prompt;
pub use template::{Template, TemplateFormat};
pub use toolcall::{ToolCall, ToolOutcome};
