//! [`Scored`]: what scoring one answer gave, in the JSON form the services answer with.

use serde::{Deserialize, Serialize};

use crate::{Error, Integer, Mode, Reason, Verdict, Verifier};

/// The verdict on one answer as JSON: [`Verdict`]'s fields, or `error` when the ground truth
/// cannot be scored in its mode (reward 0, as the trainer scores such a row).
///
/// This is the form of `rstar tools serve`'s `POST /verify` answer (`rstar_toolserver::api`
/// names it `VerifyVerdict`) and of the trainer's in-process scoring of the same items: a
/// verdict writes `reward`, `reason`, `extracted` (`null` without a box) and, when they are
/// set, `normalized` and `canonical`; an error writes `reward` 0, `extracted` `null` and
/// `error`.
///
/// ```
/// use rstar_verifier::{Mode, Scored, Verifier};
///
/// let v = Verifier::new();
/// let right = Scored::of(v.verify_mode(Mode::Integer, "so \\boxed{42}", "42"));
/// assert_eq!(
///     serde_json::to_string(&right).unwrap(),
///     r#"{"reward":1,"reason":"right","extracted":"42","normalized":"42"}"#
/// );
/// let bad = Scored::of(v.verify_mode(Mode::Integer, "\\boxed{1}", "x"));
/// assert_eq!((bad.reward, bad.reason), (0, None));
/// assert!(bad.error.unwrap().contains("not an integer"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scored {
    /// 1 when the answer is the ground truth, else 0.
    pub reward: u8,
    /// Why (`right`, `wrong`, `no_box`, …); absent with `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// The mode the answer was compared in, when the service chose it (`rstar verify serve`'s
    /// `/score` writes it: its `auto` mode picks one per ground truth); absent on `/verify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The text of the last box, as written (trimmed); `null` without a box.
    #[serde(default)]
    pub extracted: Option<String>,
    /// The extracted answer as an integer, when it is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized: Option<Integer>,
    /// The math and choice modes' canonical form of the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical: Option<String>,
    /// Why the ground truth cannot be scored (then `reward` is 0 and `reason` absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Scored {
    /// The JSON form of what [`Verifier::verify_mode`](crate::Verifier::verify_mode) returned.
    pub fn of(result: Result<Verdict, Error>) -> Self {
        match result {
            Ok(v) => Self {
                reward: v.reward,
                reason: Some(v.reason),
                mode: None,
                extracted: v.extracted,
                normalized: v.normalized,
                canonical: v.canonical,
                error: None,
            },
            Err(e) => Self {
                reward: 0,
                reason: None,
                mode: None,
                extracted: None,
                normalized: None,
                canonical: None,
                error: Some(e.to_string()),
            },
        }
    }
}

impl Scored {
    /// [`Scored::of`], naming the mode it was scored in (kept beside an error too).
    pub fn in_mode(result: Result<Verdict, Error>, mode: Mode) -> Self {
        Self {
            mode: Some(mode),
            ..Self::of(result)
        }
    }
}

impl From<Result<Verdict, Error>> for Scored {
    fn from(result: Result<Verdict, Error>) -> Self {
        Self::of(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Mode, Verifier};

    fn json(response: &str, truth: &str, mode: Mode) -> String {
        let s = Scored::of(Verifier::new().verify_mode(mode, response, truth));
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Scored>(&text).unwrap(), s);
        text
    }

    /// The wire form, byte for byte: `POST /verify` answers with it.
    #[test]
    fn json_form_is_stable() {
        assert_eq!(
            json("so \\boxed{42}", "42", Mode::Integer),
            r#"{"reward":1,"reason":"right","extracted":"42","normalized":"42"}"#
        );
        assert_eq!(
            json("no box at all", "7", Mode::Integer),
            r#"{"reward":0,"reason":"no_box","extracted":null}"#
        );
        assert_eq!(
            json("the answer is \\boxed{(B)}", "B", Mode::Choice),
            r#"{"reward":1,"reason":"right","extracted":"(B)","canonical":"B"}"#
        );
        let err = json("\\boxed{1}", "not a number", Mode::Integer);
        assert!(
            err.starts_with(r#"{"reward":0,"extracted":null,"error":"ground truth `not a number`"#),
            "{err}"
        );
    }

    /// `rstar verify serve`'s `/score` names the mode after `reason`, beside an error too.
    #[test]
    fn a_named_mode_follows_the_reason() {
        let v = Verifier::new();
        let s = Scored::in_mode(
            v.verify_mode(Mode::Math, "\\boxed{\\frac12}", "1/2"),
            Mode::Math,
        );
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"{"reward":1,"reason":"right","mode":"math","extracted":"\\frac12","canonical":"1/2"}"#
        );
        let e = Scored::in_mode(
            v.verify_mode(Mode::Integer, "\\boxed{1}", "1/2"),
            Mode::Integer,
        );
        let text = serde_json::to_string(&e).unwrap();
        assert!(
            text.starts_with(r#"{"reward":0,"mode":"integer","extracted":null,"error":"#),
            "{text}"
        );
    }

    #[test]
    fn missing_fields_read_as_absent() {
        let s: Scored = serde_json::from_str(r#"{"reward":0,"error":"x"}"#).unwrap();
        assert_eq!(
            s,
            Scored {
                reward: 0,
                reason: None,
                mode: None,
                extracted: None,
                normalized: None,
                canonical: None,
                error: Some("x".into()),
            }
        );
    }
}

/// One answer to score: what `rstar tools serve`'s `POST /verify` takes (an item of its
/// request) and what the trainer scores in process ([`VerifyItem::score`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyItem {
    /// The text scored: a response's assistant turns (its last `\boxed{}` is the answer).
    pub response: String,
    /// The ground truth.
    pub ground_truth: String,
    /// How the answer is compared: `integer` (the training reward; the default), `math` or
    /// `choice` ([`Mode`]).
    #[serde(default, deserialize_with = "mode_field")]
    pub mode: Mode,
}

impl VerifyItem {
    /// An answer to score in `mode`.
    pub fn new(response: impl Into<String>, ground_truth: impl Into<String>, mode: Mode) -> Self {
        Self {
            response: response.into(),
            ground_truth: ground_truth.into(),
            mode,
        }
    }

    /// Scored by `verifier` in its mode, in the JSON form.
    pub fn score(&self, verifier: &Verifier) -> Scored {
        Scored::of(verifier.verify_mode(self.mode, &self.response, &self.ground_truth))
    }
}

/// A mode with an error that names the field and the modes there are.
fn mode_field<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Mode, D::Error> {
    let s = String::deserialize(d)?;
    s.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "`mode`: `{s}` is not a mode (expected integer, math or choice)"
        ))
    })
}
