//! Test doubles for `rstar-episode`: a multi-byte tokenizer and a hand-written scorer.

use rstar_episode::episode::{Score, TextTokenizer};

/// Two bytes per token (an odd last byte gets its own id above 65535), so token spans and
/// byte spans differ and a mask computed from bytes would be wrong.
#[derive(Debug)]
pub struct PairTokenizer;

impl TextTokenizer for PairTokenizer {
    fn encode(&self, text: &str) -> Vec<u32> {
        text.as_bytes()
            .chunks(2)
            .map(|c| match c {
                [a, b] => u32::from(*a) * 256 + u32::from(*b),
                [a] => 65536 + u32::from(*a),
                _ => unreachable!(),
            })
            .collect()
    }

    fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            if id >= 65536 {
                bytes.push((id - 65536) as u8);
            } else {
                bytes.push((id / 256) as u8);
                bytes.push((id % 256) as u8);
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// The text of the last `\boxed{…}` in `text` (no nesting needed for integers).
pub fn last_boxed(text: &str) -> Option<String> {
    let start = text.rfind("\\boxed{")? + "\\boxed{".len();
    let end = text[start..].find('}')? + start;
    Some(text[start..end].to_string())
}

/// A scorer written out by hand, independent of `rstar-verifier`: 1 when the last boxed answer
/// equals `truth`.
pub fn scorer(truth: &str) -> impl FnOnce(&str) -> Score + '_ {
    move |text| {
        let answer = last_boxed(text);
        let reward = if answer.as_deref() == Some(truth) {
            1.0
        } else {
            0.0
        };
        Score { answer, reward }
    }
}
