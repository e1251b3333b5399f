//! [`Scored`]: what scoring one answer gave, in the JSON form the services answer with.

use serde::{Deserialize, Serialize};

use crate::{Error, Integer, Reason, Verdict};

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
                extracted: v.extracted,
                normalized: v.normalized,
                canonical: v.canonical,
                error: None,
            },
            Err(e) => Self {
                reward: 0,
                reason: None,
                extracted: None,
                normalized: None,
                canonical: None,
                error: Some(e.to_string()),
            },
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

    #[test]
    fn missing_fields_read_as_absent() {
        let s: Scored = serde_json::from_str(r#"{"reward":0,"error":"x"}"#).unwrap();
        assert_eq!(
            s,
            Scored {
                reward: 0,
                reason: None,
                extracted: None,
                normalized: None,
                canonical: None,
                error: Some("x".into()),
            }
        );
    }
}
