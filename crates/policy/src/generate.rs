//! Batched generation with a KV cache, seeded sampling and stop strings.

use burn::module::Module;
use burn::tensor::{Int, Tensor, TensorData};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{KvCache, Qwen, to_vec_f32};
use crate::tokenizer::Tokenizer;

/// How the next token is chosen from the logits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Sampling {
    /// The most likely token (ties: the lowest id).
    Greedy,
    /// Sample from `softmax(logits / temperature)`.
    Temperature {
        /// Must be positive.
        temperature: f32,
    },
    /// Sample among the `k` most likely tokens.
    TopK {
        /// Number of candidates (≥ 1).
        k: usize,
        /// Must be positive.
        temperature: f32,
    },
    /// Nucleus sampling: the smallest set of most likely tokens whose
    /// probability reaches `p`.
    TopP {
        /// In `(0, 1]`.
        p: f32,
        /// Must be positive.
        temperature: f32,
    },
}

/// An OpenAI sampling parameter out of range, named by its OpenAI field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{field}`: {reason}")]
pub struct SamplingError {
    /// The OpenAI field: `temperature`, `top_p` or `top_k`.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl Sampling {
    /// The strategy for OpenAI/vLLM sampling parameters, as `rstar serve` reads a request and
    /// `rstar eval` its flags. Absent values are OpenAI's defaults (`temperature` 1, `top_p` 1,
    /// vLLM's `top_k` -1 = off; 0 is off too).
    ///
    /// `temperature` 0 is greedy whatever the other two say (vLLM's rule); otherwise `top_k` ≥ 1
    /// gives [`Sampling::TopK`], `top_p` < 1 [`Sampling::TopP`], and neither
    /// [`Sampling::Temperature`].
    ///
    /// # Errors
    /// A [`SamplingError`] naming the field: a negative or non-finite `temperature`, a `top_p`
    /// outside `(0, 1]`, a `top_k` below -1, or `top_k` and `top_p` both active (the sampler
    /// applies one of them).
    pub fn from_openai(
        temperature: Option<f32>,
        top_p: Option<f32>,
        top_k: Option<i64>,
    ) -> std::result::Result<Self, SamplingError> {
        let bad = |field: &'static str, reason: &str| SamplingError {
            field,
            reason: reason.to_string(),
        };
        let temperature = temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && temperature >= 0.0) {
            return Err(bad("temperature", "must be a number ≥ 0"));
        }
        let top_p = top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(bad("top_p", "must be in (0, 1]"));
        }
        let top_k = top_k.unwrap_or(-1);
        if top_k < -1 {
            return Err(bad("top_k", "must be -1 or 0 (off) or a positive count"));
        }
        Ok(if temperature == 0.0 {
            Sampling::Greedy
        } else if top_k >= 1 && top_p < 1.0 {
            return Err(bad(
                "top_k",
                "cannot be combined with `top_p` < 1; set one of them",
            ));
        } else if top_k >= 1 {
            Sampling::TopK {
                k: usize::try_from(top_k).unwrap_or(usize::MAX),
                temperature,
            }
        } else if top_p < 1.0 {
            Sampling::TopP {
                p: top_p,
                temperature,
            }
        } else {
            Sampling::Temperature { temperature }
        })
    }
}

/// Generation settings shared by a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationConfig {
    /// Token budget per sequence (a [`Request`] may lower it).
    pub max_new_tokens: usize,
    /// Strings that end a sequence (`</tool_call>`, `</answer>`); a
    /// [`Request`] may replace them.
    pub stop_strings: Vec<String>,
    /// Token ids that end a sequence.
    pub eos: Vec<u32>,
    /// The sampling strategy.
    pub sampling: Sampling,
    /// Sequence `i` of a batch samples with `ChaCha8Rng::seed_from_u64(seed + i)`,
    /// so a batch is reproducible and equals one-by-one calls with `seed + i`.
    pub seed: u64,
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl GenerationConfig {
    /// Greedy, 256 new tokens, no stop strings, no EOS, seed 0.
    pub fn new() -> Self {
        GenerationConfig {
            max_new_tokens: 256,
            stop_strings: Vec::new(),
            eos: Vec::new(),
            sampling: Sampling::Greedy,
            seed: 0,
        }
    }

    /// The rStar2-Agent rollout setting: temperature 1.0, stop at the end of a
    /// tool call or an answer.
    pub fn rstar2_rollout(max_new_tokens: usize, eos: Vec<u32>, seed: u64) -> Self {
        GenerationConfig {
            max_new_tokens,
            stop_strings: vec!["</tool_call>".into(), "</answer>".into()],
            eos,
            sampling: Sampling::Temperature { temperature: 1.0 },
            seed,
        }
    }
}

/// One sequence to continue, with optional per-sequence overrides.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Request {
    /// The prompt ids (not empty).
    pub prompt: Vec<u32>,
    /// Replaces [`GenerationConfig::stop_strings`] for this sequence.
    pub stop_strings: Option<Vec<String>>,
    /// Lowers the token budget for this sequence.
    pub max_new_tokens: Option<usize>,
    /// This sequence's sampling seed, replacing `config.seed + i`: a request then samples the
    /// same tokens whichever batch it lands in (up to float rounding), which is what an engine
    /// that batches concurrent requests as they arrive needs for reproducibility.
    pub seed: Option<u64>,
}

/// Why a sequence ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FinishReason {
    /// A stop string appeared in the generated text.
    Stop(String),
    /// An EOS token was sampled.
    Eos,
    /// The token budget or the context length ran out.
    Length,
}

/// A finished sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Generation {
    /// The new tokens (the EOS token or the token completing a stop string included).
    pub tokens: Vec<u32>,
    /// The decoded new text: up to the end of the stop string for
    /// [`FinishReason::Stop`], without the EOS token for [`FinishReason::Eos`].
    pub text: String,
    /// Per new token, its log-probability under the model (temperature 1,
    /// no truncation), the quantity the trainer recomputes.
    pub logprobs: Vec<f32>,
    /// Per new token, the entropy of the model's distribution (temperature 1).
    pub entropies: Vec<f32>,
    /// Why it ended.
    pub finish_reason: FinishReason,
}

struct SeqState {
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    entropies: Vec<f32>,
    finish: Option<FinishReason>,
    stop_end: Option<usize>,
    rng: ChaCha8Rng,
    budget: usize,
    prompt_len: usize,
    stops: Vec<String>,
}

/// Continues every prompt; see [`generate_requests`].
pub fn generate(
    model: &Qwen,
    tokenizer: &Tokenizer,
    prompts: &[Vec<u32>],
    config: &GenerationConfig,
) -> Result<Vec<Generation>> {
    let requests: Vec<Request> = prompts
        .iter()
        .map(|p| Request {
            prompt: p.clone(),
            ..Request::default()
        })
        .collect();
    generate_requests(model, tokenizer, &requests, config)
}

/// Continues a batch of prompts of different lengths together.
///
/// Prompts are left-padded into one prefill; each step decodes one token for
/// every unfinished row through the KV cache, and finished rows are dropped
/// from the batch. Only the last-position logits come back to the host, once
/// per step, for sampling. Results equal one-by-one calls (with seed `seed + i`)
/// up to float rounding.
pub fn generate_requests(
    model: &Qwen,
    tokenizer: &Tokenizer,
    requests: &[Request],
    config: &GenerationConfig,
) -> Result<Vec<Generation>> {
    validate_sampling(config.sampling)?;
    let vocab = model.config.vocab_size;
    let max_pos = model.config.max_position_embeddings;
    let mut states = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        if r.prompt.is_empty() {
            return Err(Error::InvalidRequest(format!("prompt {i} is empty")));
        }
        if let Some(&id) = r.prompt.iter().find(|&&id| id as usize >= vocab) {
            return Err(Error::TokenOutOfRange {
                id,
                vocab_size: vocab,
            });
        }
        if r.prompt.len() > max_pos {
            return Err(Error::TooLong {
                len: r.prompt.len(),
                max: max_pos,
            });
        }
        let budget = r
            .max_new_tokens
            .unwrap_or(config.max_new_tokens)
            .min(config.max_new_tokens)
            .min(max_pos - r.prompt.len());
        states.push(SeqState {
            tokens: Vec::new(),
            logprobs: Vec::new(),
            entropies: Vec::new(),
            finish: (budget == 0).then_some(FinishReason::Length),
            stop_end: None,
            rng: ChaCha8Rng::seed_from_u64(r.seed.unwrap_or(config.seed.wrapping_add(i as u64))),
            budget,
            prompt_len: r.prompt.len(),
            stops: r
                .stop_strings
                .clone()
                .unwrap_or_else(|| config.stop_strings.clone()),
        });
    }

    let model = model.valid();
    let device = model.device();
    // Rows of the running batch, as indices into `states`.
    let mut active: Vec<usize> = (0..states.len())
        .filter(|&i| states[i].finish.is_none())
        .collect();
    if active.is_empty() {
        return finish(states, tokenizer);
    }
    let max_len = active
        .iter()
        .map(|&i| states[i].prompt_len)
        .max()
        .unwrap_or(0);
    let mut pads: Vec<usize> = active
        .iter()
        .map(|&i| max_len - states[i].prompt_len)
        .collect();
    let mut ids = Vec::with_capacity(active.len() * max_len);
    for (&i, &p) in active.iter().zip(&pads) {
        ids.extend(std::iter::repeat_n(0i64, p));
        ids.extend(requests[i].prompt.iter().map(|&t| i64::from(t)));
    }
    let tokens =
        Tensor::<2, Int>::from_data(TensorData::new(ids, [active.len(), max_len]), &device);
    let mut cache = KvCache::new(model.config.num_hidden_layers);
    let mut logits = last_logits(&model, tokens, &pads, &mut cache)?;

    loop {
        let mut keep = Vec::with_capacity(active.len());
        let mut next = Vec::with_capacity(active.len());
        for (row, &i) in active.iter().enumerate() {
            let row_logits = &logits[row * vocab..(row + 1) * vocab];
            let s = &mut states[i];
            let (token, logp, entropy) = sample(row_logits, config.sampling, &mut s.rng);
            s.tokens.push(token);
            s.logprobs.push(logp);
            s.entropies.push(entropy);
            if config.eos.contains(&token) {
                s.finish = Some(FinishReason::Eos);
            } else if let Some((stop, end)) = find_stop(tokenizer, &s.tokens, &s.stops)? {
                s.finish = Some(FinishReason::Stop(stop));
                s.stop_end = Some(end);
            } else if s.tokens.len() >= s.budget {
                s.finish = Some(FinishReason::Length);
            }
            if s.finish.is_none() {
                keep.push(row);
                next.push(i64::from(token));
            }
        }
        if keep.is_empty() {
            break;
        }
        if keep.len() < active.len() {
            cache.select_rows(&keep, &device);
            active = keep.iter().map(|&r| active[r]).collect();
            pads = keep.iter().map(|&r| pads[r]).collect();
        }
        let tokens = Tensor::<2, Int>::from_data(TensorData::new(next, [active.len(), 1]), &device);
        logits = last_logits(&model, tokens, &pads, &mut cache)?;
    }
    finish(states, tokenizer)
}

fn last_logits(
    model: &Qwen,
    tokens: Tensor<2, Int>,
    pads: &[usize],
    cache: &mut KvCache,
) -> Result<Vec<f32>> {
    let [b, t] = tokens.dims();
    let hidden = model.forward_hidden(tokens, pads, Some(cache));
    let d = model.config.hidden_size;
    let last = hidden.slice([0..b, t - 1..t, 0..d]);
    to_vec_f32(model.logits(last))
}

fn finish(states: Vec<SeqState>, tokenizer: &Tokenizer) -> Result<Vec<Generation>> {
    states
        .into_iter()
        .map(|s| {
            let finish_reason = s.finish.unwrap_or(FinishReason::Length);
            let text = match (&finish_reason, s.stop_end) {
                (FinishReason::Eos, _) => tokenizer.decode(&s.tokens[..s.tokens.len() - 1])?,
                (FinishReason::Stop(_), Some(end)) => {
                    let mut text = tokenizer.decode(&s.tokens)?;
                    // `end` is counted from the end of the text.
                    let cut = text.len() - end;
                    text.truncate(cut);
                    text
                }
                _ => tokenizer.decode(&s.tokens)?,
            };
            Ok(Generation {
                tokens: s.tokens,
                text,
                logprobs: s.logprobs,
                entropies: s.entropies,
                finish_reason,
            })
        })
        .collect()
}

/// Looks for a stop string completed by the newest token. Only a window of
/// trailing tokens is decoded (every token is at least one byte), so the cost
/// per step does not grow with the sequence. Returns the stop string and how
/// many bytes of the full decoded text follow its end.
fn find_stop(
    tokenizer: &Tokenizer,
    tokens: &[u32],
    stops: &[String],
) -> Result<Option<(String, usize)>> {
    let longest = stops.iter().map(String::len).max().unwrap_or(0);
    if longest == 0 {
        return Ok(None);
    }
    // A few extra tokens cover a multi-byte character cut at the window start.
    let window = (longest + 4).min(tokens.len());
    let tail = tokenizer.decode(&tokens[tokens.len() - window..])?;
    let mut best: Option<(usize, &String)> = None;
    for stop in stops.iter().filter(|s| !s.is_empty()) {
        if let Some(at) = tail.find(stop.as_str())
            && best.is_none_or(|(b, _)| at < b)
        {
            best = Some((at, stop));
        }
    }
    Ok(best.map(|(at, stop)| (stop.clone(), tail.len() - at - stop.len())))
}

fn validate_sampling(s: Sampling) -> Result<()> {
    let temp_ok = |t: f32| t > 0.0 && t.is_finite();
    let ok = match s {
        Sampling::Greedy => true,
        Sampling::Temperature { temperature } => temp_ok(temperature),
        Sampling::TopK { k, temperature } => k >= 1 && temp_ok(temperature),
        Sampling::TopP { p, temperature } => p > 0.0 && p <= 1.0 && temp_ok(temperature),
    };
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidRequest(format!(
            "bad sampling parameters {s:?}"
        )))
    }
}

/// Chooses a token from one row of logits; returns it with its log-prob and
/// the entropy of the untempered distribution.
pub fn sample(logits: &[f32], sampling: Sampling, rng: &mut impl Rng) -> (u32, f32, f32) {
    // Log-softmax in f64 for the reported log-prob and entropy.
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    let log_z = max + sum.ln();
    let entropy: f64 = logits
        .iter()
        .map(|&l| {
            let lp = l as f64 - log_z;
            -lp.exp() * lp
        })
        .sum();
    let token = match sampling {
        Sampling::Greedy => argmax(logits),
        Sampling::Temperature { temperature } => {
            let cands: Vec<usize> = (0..logits.len()).collect();
            draw(logits, &cands, temperature, rng)
        }
        Sampling::TopK { k, temperature } => {
            let by_logit = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
            let mut cands: Vec<usize> = (0..logits.len()).collect();
            let k = k.clamp(1, cands.len());
            // Partition first (O(vocab)), then sort only the k kept: cheap for 150k-token vocabularies.
            if k < cands.len() {
                cands.select_nth_unstable_by(k - 1, by_logit);
                cands.truncate(k);
            }
            cands.sort_by(by_logit);
            draw(logits, &cands, temperature, rng)
        }
        Sampling::TopP { p, temperature } => nucleus(logits, p as f64, temperature as f64, rng),
    };
    let logp = (logits[token] as f64 - log_z) as f32;
    (token as u32, logp, entropy as f32)
}

fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best
}

/// Nucleus sampling: the smallest set of most likely tokens whose probability
/// under `softmax(logits / t)` reaches `p`. Only the top `k` candidates are
/// sorted, with `k` growing until their mass reaches `p`, so a 150k-token
/// vocabulary costs O(vocab) per draw instead of a full sort; the result is the
/// same as sorting everything.
fn nucleus(logits: &[f32], p: f64, t: f64, rng: &mut impl Rng) -> usize {
    let max = logits
        .iter()
        .map(|&l| l as f64 / t)
        .fold(f64::NEG_INFINITY, f64::max);
    let weight = |i: usize| (logits[i] as f64 / t - max).exp();
    let total: f64 = (0..logits.len()).map(weight).sum();
    let by_logit = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    let n = logits.len();
    let mut k = n.min(64);
    loop {
        let mut cands: Vec<usize> = (0..n).collect();
        if k < n {
            cands.select_nth_unstable_by(k - 1, by_logit);
            cands.truncate(k);
        }
        cands.sort_by(by_logit);
        let weights: Vec<f64> = cands.iter().map(|&i| weight(i)).collect();
        let mut acc = 0.0;
        let mut keep = None;
        for (j, w) in weights.iter().enumerate() {
            acc += w / total;
            if acc >= p {
                keep = Some(j + 1);
                break;
            }
        }
        if keep.is_some() || k == n {
            let keep = keep.unwrap_or(weights.len());
            return sample_weighted(&cands[..keep], &weights[..keep], rng);
        }
        k = (k * 4).min(n);
    }
}

/// Samples one of `cands` with probability proportional to `weights`.
fn sample_weighted(cands: &[usize], weights: &[f64], rng: &mut impl Rng) -> usize {
    let total: f64 = weights.iter().sum();
    let mut u = rng.random::<f64>() * total;
    for (n, w) in weights.iter().enumerate() {
        if u < *w {
            return cands[n];
        }
        u -= w;
    }
    cands[cands.len() - 1]
}

/// Samples among `cands` from `softmax(logits / temperature)`.
fn draw(logits: &[f32], cands: &[usize], temperature: f32, rng: &mut impl Rng) -> usize {
    let t = temperature as f64;
    let max = cands
        .iter()
        .map(|&i| logits[i] as f64 / t)
        .fold(f64::NEG_INFINITY, f64::max);
    let weights: Vec<f64> = cands
        .iter()
        .map(|&i| (logits[i] as f64 / t - max).exp())
        .collect();
    sample_weighted(cands, &weights, rng)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_openai_maps_and_names_the_bad_field() {
        use Sampling::*;
        // (temperature, top_p, top_k) → strategy, written out by hand from vLLM's rules.
        // (temperature, top_p, top_k) as an OpenAI request gives them.
        type Args = (Option<f32>, Option<f32>, Option<i64>);
        let valid: &[(Args, Sampling)] = &[
            ((None, None, None), Temperature { temperature: 1.0 }),
            ((Some(0.7), None, None), Temperature { temperature: 0.7 }),
            (
                (Some(0.7), Some(1.0), Some(-1)),
                Temperature { temperature: 0.7 },
            ),
            ((Some(0.7), None, Some(0)), Temperature { temperature: 0.7 }),
            ((Some(0.0), None, None), Greedy),
            ((Some(0.0), Some(0.5), Some(3)), Greedy),
            (
                (Some(0.5), None, Some(3)),
                TopK {
                    k: 3,
                    temperature: 0.5,
                },
            ),
            (
                (None, Some(1.0), Some(1)),
                TopK {
                    k: 1,
                    temperature: 1.0,
                },
            ),
            (
                (None, Some(0.9), None),
                TopP {
                    p: 0.9,
                    temperature: 1.0,
                },
            ),
            (
                (Some(2.0), Some(0.25), Some(-1)),
                TopP {
                    p: 0.25,
                    temperature: 2.0,
                },
            ),
        ];
        for &((t, p, k), want) in valid {
            assert_eq!(
                Sampling::from_openai(t, p, k),
                Ok(want),
                "{t:?} {p:?} {k:?}"
            );
            assert!(validate_sampling(want).is_ok(), "{want:?}");
        }
        let invalid: &[(Args, &str)] = &[
            ((Some(-0.1), None, None), "temperature"),
            ((Some(f32::NAN), None, None), "temperature"),
            ((Some(f32::INFINITY), None, None), "temperature"),
            ((None, Some(0.0), None), "top_p"),
            ((None, Some(1.5), None), "top_p"),
            ((Some(0.0), Some(-1.0), None), "top_p"),
            ((None, Some(f32::NAN), None), "top_p"),
            ((None, None, Some(-2)), "top_k"),
            ((Some(0.5), Some(0.5), Some(2)), "top_k"),
        ];
        for &((t, p, k), field) in invalid {
            let err = Sampling::from_openai(t, p, k).unwrap_err();
            assert_eq!(err.field, field, "{t:?} {p:?} {k:?}");
            assert!(
                err.to_string().starts_with(&format!("`{field}`: ")),
                "{err}"
            );
        }
    }

    fn counts(logits: &[f32], s: Sampling, n: usize) -> Vec<usize> {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut c = vec![0; logits.len()];
        for _ in 0..n {
            c[sample(logits, s, &mut rng).0 as usize] += 1;
        }
        c
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert_eq!(
            sample(&[0.0, 2.0, 2.0, 1.0], Sampling::Greedy, &mut rng).0,
            1
        );
    }

    #[test]
    fn logprob_and_entropy_match_hand_computation() {
        let logits = [0.0f32, (2.0f32).ln(), (5.0f32).ln()]; // probs 1/8, 2/8, 5/8
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        let (tok, logp, ent) = sample(&logits, Sampling::Greedy, &mut rng);
        assert_eq!(tok, 2);
        assert!((logp - (5.0f32 / 8.0).ln()).abs() < 1e-6);
        let p = [1.0f64 / 8.0, 2.0 / 8.0, 5.0 / 8.0];
        let h: f64 = p.iter().map(|p| -p * p.ln()).sum();
        assert!((ent as f64 - h).abs() < 1e-6);
    }

    #[test]
    fn temperature_sampling_follows_the_distribution() {
        let logits = [0.0f32, (3.0f32).ln()]; // 1/4, 3/4
        let c = counts(&logits, Sampling::Temperature { temperature: 1.0 }, 4000);
        let frac = c[1] as f64 / 4000.0;
        assert!((frac - 0.75).abs() < 0.03, "{frac}");
        // Temperature 0.5 squares the odds: 1/10, 9/10.
        let c = counts(&logits, Sampling::Temperature { temperature: 0.5 }, 4000);
        let frac = c[1] as f64 / 4000.0;
        assert!((frac - 0.9).abs() < 0.03, "{frac}");
    }

    #[test]
    fn top_k_and_top_p_cut_the_tail() {
        let logits = [3.0f32, 2.9, 2.8, -5.0, -5.0];
        let c = counts(
            &logits,
            Sampling::TopK {
                k: 2,
                temperature: 1.0,
            },
            2000,
        );
        assert_eq!(c[2] + c[3] + c[4], 0);
        assert!(c[0] > 0 && c[1] > 0);
        // probs ≈ .36 .33 .30: p = 0.5 keeps the first two.
        let c = counts(
            &logits,
            Sampling::TopP {
                p: 0.5,
                temperature: 1.0,
            },
            2000,
        );
        assert_eq!(c[2] + c[3] + c[4], 0);
        let c = counts(
            &logits,
            Sampling::TopP {
                p: 0.3,
                temperature: 1.0,
            },
            100,
        );
        assert_eq!(c[0], 100);
    }

    /// Nucleus sampling by sorting the whole vocabulary, written out plainly.
    fn nucleus_reference(logits: &[f32], p: f64, t: f64, rng: &mut impl Rng) -> usize {
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let max = logits[order[0]] as f64 / t;
        let w: Vec<f64> = order
            .iter()
            .map(|&i| (logits[i] as f64 / t - max).exp())
            .collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        let mut keep = w.len();
        for (j, x) in w.iter().enumerate() {
            acc += x / total;
            if acc >= p {
                keep = j + 1;
                break;
            }
        }
        sample_weighted(&order[..keep], &w[..keep], rng)
    }

    #[test]
    fn fast_nucleus_equals_a_full_sort() {
        let mut src = ChaCha8Rng::seed_from_u64(1);
        for (vocab, p) in [(5000usize, 0.9f64), (5000, 0.999), (300, 1.0), (70, 0.5)] {
            // Flat-ish logits so the nucleus needs more than the first 64 candidates.
            let logits: Vec<f32> = (0..vocab).map(|_| src.random::<f32>() * 3.0).collect();
            let mut a = ChaCha8Rng::seed_from_u64(9);
            let mut b = ChaCha8Rng::seed_from_u64(9);
            for _ in 0..50 {
                assert_eq!(
                    nucleus(&logits, p, 0.7, &mut a),
                    nucleus_reference(&logits, p, 0.7, &mut b)
                );
            }
        }
    }

    #[test]
    fn bad_sampling_parameters_are_rejected() {
        for s in [
            Sampling::Temperature { temperature: 0.0 },
            Sampling::TopK {
                k: 0,
                temperature: 1.0,
            },
            Sampling::TopP {
                p: 1.5,
                temperature: 1.0,
            },
        ] {
            assert!(validate_sampling(s).is_err());
        }
    }

    #[test]
    fn stop_strings_are_found_in_the_tail_only_once_complete() {
        let tok = Tokenizer::char();
        let stops = vec!["</answer>".to_string(), "END".to_string()];
        let ids = tok.encode("x = 1 EN").unwrap();
        assert_eq!(find_stop(&tok, &ids, &stops).unwrap(), None);
        let ids = tok.encode("x = 1 END").unwrap();
        assert_eq!(
            find_stop(&tok, &ids, &stops).unwrap(),
            Some(("END".into(), 0))
        );
        let ids = tok.encode("\\boxed{3}</answer>").unwrap();
        assert_eq!(
            find_stop(&tok, &ids, &stops).unwrap(),
            Some(("</answer>".into(), 0))
        );
    }
}
