//! Synthetic trajectories with hand-chosen entropies (byte tokens, compact template).

use rstar_episode::episode::{ByteTokenizer, Episode, Limits, Score, TokenStats, Trajectory};
use rstar_episode::template::Template;
use rstar_episode::toolcall::ToolOutcome;

/// Stats for `text` (one token per byte): every entropy 0.1 except the listed `(byte, entropy)`.
pub fn stats(text: &str, high: &[(usize, f32)]) -> TokenStats {
    let n = text.len();
    let mut entropies = vec![0.1; n];
    for &(i, e) in high {
        entropies[i] = e;
    }
    TokenStats {
        logprobs: entropies.iter().map(|e| -e / 2.0).collect(),
        entropies,
    }
}

fn ids(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

fn reward(r: f32) -> impl FnOnce(&str) -> Score {
    move |_| Score {
        answer: Some("1".to_string()),
        reward: r,
    }
}

/// Trajectory 1, reward 1, 31 assistant tokens:
///
/// - turn 1 `ab<c>xy</c>` (11 tokens): `a` 3.0 (reasoning), `x` 2.5 (code; `<c>xy</c>` is 9
///   code tokens), the rest 0.1;
/// - a tool turn (masked);
/// - turn 2 `Hm<answer>1</answer>` (20 tokens): `H` 2.8, `m` 0.5, the rest 0.1.
pub fn solved() -> Trajectory {
    let tok = ByteTokenizer;
    let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "What is 1?")
        .with_id("p1", 0)
        .with_ground_truth("1");
    let t1 = "ab<c>xy</c>";
    ep.push_assistant_sampled(&ids(t1), stats(t1, &[(0, 3.0), (5, 2.5)]))
        .unwrap();
    ep.push_tool_outcomes(vec![ToolOutcome::code_judge(true, "", "1\n", "", 0.01)])
        .unwrap();
    let t2 = "Hm<answer>1</answer>";
    ep.push_assistant_sampled(&ids(t2), stats(t2, &[(0, 2.8), (1, 0.5)]))
        .unwrap();
    ep.finish_scored(reward(1.0)).unwrap()
}

/// Trajectory 2, reward 0, 20 assistant tokens: `zz<answer>2</answer>` with the first `z` at
/// 2.0 (reasoning), the rest 0.1.
pub fn failed() -> Trajectory {
    let tok = ByteTokenizer;
    let mut ep = Episode::new(&tok, &Template::compact(), Limits::compact(), "What is 1?")
        .with_id("p1", 1)
        .with_ground_truth("1");
    let t = "zz<answer>2</answer>";
    ep.push_assistant_sampled(&ids(t), stats(t, &[(0, 2.0)]))
        .unwrap();
    ep.finish_scored(reward(0.0)).unwrap()
}
