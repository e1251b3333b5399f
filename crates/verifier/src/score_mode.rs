//! [`ScoreMode`]: one of the [`Mode`]s, or `auto`, which picks the mode from the ground truth.

use std::fmt;

use crate::Mode;

/// How an answer is compared: one of the verifier's [`Mode`]s, or `auto`, which picks the mode
/// for each ground truth on its own ([`ScoreMode::resolve`]).
///
/// This is the `mode` of the Python API, of `rstar verify --mode` and of `rstar verify serve`
/// (its `--mode` and `/score`'s `mode` field). It parses from and prints as `auto`, `integer`,
/// `math` or `choice`.
///
/// ```
/// use rstar_verifier::{Mode, ScoreMode};
///
/// let auto: ScoreMode = "auto".parse().unwrap();
/// assert_eq!(auto.resolve("12"), Mode::Integer);
/// assert_eq!(auto.resolve("\\frac{1}{2}"), Mode::Math);
/// assert_eq!(auto.resolve("(C)"), Mode::Choice);
/// assert_eq!("math".parse::<ScoreMode>(), Ok(ScoreMode::Fixed(Mode::Math)));
/// assert_eq!(
///     "exact".parse::<ScoreMode>().unwrap_err(),
///     "`exact` is not one of auto, integer, math, choice"
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ScoreMode {
    /// `integer` for an integer ground truth, `choice` for a letter `A`-`J`, `math` otherwise.
    #[default]
    Auto,
    /// One mode for every item.
    Fixed(Mode),
}

impl ScoreMode {
    /// Every mode, `auto` first.
    pub const ALL: [ScoreMode; 4] = [
        ScoreMode::Auto,
        ScoreMode::Fixed(Mode::Integer),
        ScoreMode::Fixed(Mode::Math),
        ScoreMode::Fixed(Mode::Choice),
    ];

    /// The mode that scores against `truth`: [`Mode::detect`] on this one truth for `auto`.
    pub fn resolve(self, truth: &str) -> Mode {
        match self {
            ScoreMode::Auto => Mode::detect([truth]),
            ScoreMode::Fixed(m) => m,
        }
    }

    /// The one mode that scores a whole dataset: [`Mode::detect`] on all its truths for `auto`
    /// (so a dataset with one LaTeX answer is scored in math mode throughout).
    pub fn resolve_all<'a>(self, truths: impl IntoIterator<Item = &'a str>) -> Mode {
        match self {
            ScoreMode::Auto => Mode::detect(truths),
            ScoreMode::Fixed(m) => m,
        }
    }

    /// The name on the command line, in JSON and in Python (`auto`, `integer`, `math`, `choice`).
    pub fn as_str(self) -> &'static str {
        match self {
            ScoreMode::Auto => "auto",
            ScoreMode::Fixed(m) => m.as_str(),
        }
    }
}

impl From<Mode> for ScoreMode {
    fn from(m: Mode) -> Self {
        ScoreMode::Fixed(m)
    }
}

impl fmt::Display for ScoreMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for ScoreMode {
    type Err = String;
    /// Parses `auto` or a [`Mode`]'s name; the error names the four there are.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "auto" {
            return Ok(ScoreMode::Auto);
        }
        s.parse::<Mode>()
            .map(ScoreMode::Fixed)
            .map_err(|_| format!("`{s}` is not one of auto, integer, math, choice"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for m in ScoreMode::ALL {
            assert_eq!(m.as_str().parse::<ScoreMode>(), Ok(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        assert_eq!(ScoreMode::default(), ScoreMode::Auto);
        assert_eq!(
            ScoreMode::from(Mode::Choice),
            ScoreMode::Fixed(Mode::Choice)
        );
    }

    #[test]
    fn unknown_names_list_the_modes() {
        for bad in ["exact", "Auto", "", " integer"] {
            assert_eq!(
                bad.parse::<ScoreMode>().unwrap_err(),
                format!("`{bad}` is not one of auto, integer, math, choice")
            );
        }
    }

    #[test]
    fn auto_follows_each_truth_and_fixed_ignores_it() {
        let auto = ScoreMode::Auto;
        assert_eq!(auto.resolve("12"), Mode::Integer);
        assert_eq!(auto.resolve("\\frac{1}{2}"), Mode::Math);
        assert_eq!(auto.resolve("C"), Mode::Choice);
        assert_eq!(auto.resolve_all(["1", "B"]), Mode::Math);
        assert_eq!(auto.resolve_all(["1", "025"]), Mode::Integer);
        assert_eq!(auto.resolve_all([]), Mode::Integer);
        for m in Mode::ALL {
            assert_eq!(ScoreMode::Fixed(m).resolve("C"), m);
            assert_eq!(ScoreMode::Fixed(m).resolve_all(["1", "B"]), m);
        }
    }
}
