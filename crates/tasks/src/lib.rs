//! The problems rStar2-Agent trains and evaluates on, with nothing else: the embedded task set
//! ([`tasks`]: generated arithmetic and number-theory problems with exact answers, split into
//! train and held-out sets), its SFT corpus of tool-using demonstrations ([`tasks::sft`]), and
//! the loader of problem files ([`dataset`]: the shared JSONL layouts and verl's parquet).
//!
//! It is **not** a trainer or an evaluator: it runs no model, no sandbox and no async runtime.
//! Its only workspace dependency is `rstar-episode` (the turn format the demonstrations are
//! written in). Errors are [`Error`].
//!
//! # Crate features
//! - `parquet` (default): verl's parquet problem files in [`dataset::load_prompts`]; without it
//!   such a file is refused with an error naming the feature.
//!
//! ```
//! use rstar_tasks::tasks::{Split, TaskConfig, TaskSet};
//!
//! let set = TaskSet::new(TaskConfig::embedded_default()).unwrap();
//! let train = set.generate(Split::Train, 3, 7).unwrap();
//! assert_eq!(train.len(), 3);
//! let prompt = rstar_episode::Prompt::from(&train[0]);
//! assert_eq!(prompt.answer, train[0].answer());
//! ```
#![warn(missing_docs)]

pub mod conversations;
pub mod dataset;
pub mod error;
pub mod tasks;

pub use error::Error;
