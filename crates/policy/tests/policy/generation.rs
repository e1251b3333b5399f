//! Batched generation equals one-by-one generation; stops, EOS and budgets.

use super::common::*;
use rstar_policy::{
    FinishReason, Generation, GenerationConfig, Request, Sampling, generate, generate_requests,
};
use rstar_policy::{Qwen, load_model};

fn prompts() -> Vec<Vec<u32>> {
    let reference = reference("qwen3_tiny");
    let seqs = reference["sequences"].as_array().unwrap();
    let mut p: Vec<Vec<u32>> = seqs.iter().map(|s| u32s(&s["input_ids"])).collect();
    p.push(vec![5, 6, 7, 8]);
    p
}

fn assert_same(batched: &[Generation], single: &[Generation]) {
    assert_eq!(batched.len(), single.len());
    for (i, (b, s)) in batched.iter().zip(single).enumerate() {
        assert_eq!(b.tokens, s.tokens, "sequence {i} tokens");
        assert_eq!(b.text, s.text, "sequence {i} text");
        assert_eq!(b.finish_reason, s.finish_reason, "sequence {i} finish");
        assert!(
            max_abs_diff(&b.logprobs, &s.logprobs) <= 1e-4,
            "sequence {i} logprobs"
        );
        assert!(
            max_abs_diff(&b.entropies, &s.entropies) <= 1e-4,
            "sequence {i} entropies"
        );
    }
}

fn one_by_one(model: &Qwen, requests: &[Request], config: &GenerationConfig) -> Vec<Generation> {
    requests
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let config = GenerationConfig {
                seed: config.seed + i as u64,
                ..config.clone()
            };
            generate_requests(model, qwen_tokenizer(), std::slice::from_ref(r), &config)
                .unwrap()
                .remove(0)
        })
        .collect()
}

#[test]
fn batched_equals_one_by_one_for_every_sampler() {
    let model = load("qwen3_tiny");
    let requests: Vec<Request> = prompts()
        .into_iter()
        .enumerate()
        .map(|(i, prompt)| Request {
            prompt,
            max_new_tokens: Some(5 + 3 * i),
            ..Request::default()
        })
        .collect();
    for sampling in [
        Sampling::Greedy,
        Sampling::Temperature { temperature: 1.0 },
        Sampling::TopK {
            k: 5,
            temperature: 0.8,
        },
        Sampling::TopP {
            p: 0.9,
            temperature: 1.2,
        },
    ] {
        let config = GenerationConfig {
            max_new_tokens: 14,
            eos: vec![459],
            sampling,
            seed: 11,
            ..GenerationConfig::new()
        };
        let batched = generate_requests(&model, qwen_tokenizer(), &requests, &config).unwrap();
        assert_same(&batched, &one_by_one(&model, &requests, &config));
        for (r, g) in requests.iter().zip(&batched) {
            assert!(g.tokens.len() <= r.max_new_tokens.unwrap());
            assert!(g.logprobs.iter().all(|&lp| lp <= 0.0 && lp.is_finite()));
            match g.finish_reason {
                FinishReason::Eos => assert_eq!(*g.tokens.last().unwrap(), 459),
                FinishReason::Length => assert_eq!(g.tokens.len(), r.max_new_tokens.unwrap()),
                FinishReason::Stop(_) => panic!("no stop strings were given"),
            }
        }
        // Same seed, same result.
        let again = generate_requests(&model, qwen_tokenizer(), &requests, &config).unwrap();
        assert_same(&batched, &again);
    }
}

#[test]
fn sampling_depends_on_the_seed() {
    let model = load("qwen3_tiny");
    let config = |seed| GenerationConfig {
        max_new_tokens: 12,
        sampling: Sampling::Temperature { temperature: 1.5 },
        seed,
        ..GenerationConfig::new()
    };
    let p = prompts();
    let a = generate(&model, qwen_tokenizer(), &p, &config(1)).unwrap();
    let b = generate(&model, qwen_tokenizer(), &p, &config(2)).unwrap();
    assert_ne!(
        a.iter().map(|g| &g.tokens).collect::<Vec<_>>(),
        b.iter().map(|g| &g.tokens).collect::<Vec<_>>()
    );
}

#[test]
fn per_sequence_stop_strings_cut_the_text() {
    let model = load("qwen3_tiny");
    let tok = qwen_tokenizer();
    let p = prompts();
    let free = generate(
        &model,
        tok,
        &p,
        &GenerationConfig {
            max_new_tokens: 20,
            ..GenerationConfig::new()
        },
    )
    .unwrap();
    // Stop each sequence at a piece of its own greedy continuation.
    let requests: Vec<Request> = p
        .iter()
        .zip(&free)
        .map(|(prompt, g)| {
            let text_at_8 = tok.decode(&g.tokens[..8]).unwrap();
            let chars: Vec<char> = text_at_8.chars().collect();
            let stop: String = chars[chars.len().saturating_sub(3)..].iter().collect();
            Request {
                prompt: prompt.clone(),
                stop_strings: Some(vec![stop, "never-appears".into()]),
                max_new_tokens: None,
                seed: None,
            }
        })
        .collect();
    let config = GenerationConfig {
        max_new_tokens: 20,
        ..GenerationConfig::new()
    };
    let stopped = generate_requests(&model, tok, &requests, &config).unwrap();
    for ((r, g), f) in requests.iter().zip(&stopped).zip(&free) {
        let FinishReason::Stop(stop) = &g.finish_reason else {
            panic!("expected a stop, got {:?}", g.finish_reason);
        };
        assert_eq!(stop, &r.stop_strings.as_ref().unwrap()[0]);
        assert!(
            g.text.ends_with(stop.as_str()),
            "{:?} ends with {stop:?}",
            g.text
        );
        assert_eq!(
            g.text.matches(stop.as_str()).count(),
            1,
            "stops at the first occurrence"
        );
        assert!(g.tokens.len() <= 8);
        assert_eq!(&f.tokens[..g.tokens.len()], g.tokens.as_slice());
    }
    assert_same(&stopped, &one_by_one(&model, &requests, &config));
}

#[test]
fn bad_requests_are_errors() {
    let model = load("qwen3_tiny");
    let tok = qwen_tokenizer();
    let config = GenerationConfig::new();
    assert!(generate(&model, tok, &[vec![]], &config).is_err());
    assert!(generate(&model, tok, &[vec![100_000]], &config).is_err());
    let too_long = vec![1; model.config.max_position_embeddings + 1];
    assert!(generate(&model, tok, &[too_long], &config).is_err());
    let zero = GenerationConfig {
        max_new_tokens: 0,
        ..GenerationConfig::new()
    };
    let out = generate(&model, tok, &[vec![1, 2]], &zero).unwrap();
    assert!(out[0].tokens.is_empty() && out[0].finish_reason == FinishReason::Length);
}

#[test]
fn context_length_bounds_the_budget() {
    let model = load("qwen3_tiny");
    let max = model.config.max_position_embeddings;
    let prompt: Vec<u32> = (0..max as u32 - 3).map(|i| i % 500).collect();
    let config = GenerationConfig {
        max_new_tokens: 50,
        ..GenerationConfig::new()
    };
    let out = generate(&model, qwen_tokenizer(), &[prompt], &config).unwrap();
    assert_eq!(out[0].tokens.len(), 3);
    assert_eq!(out[0].finish_reason, FinishReason::Length);
}

#[test]
fn an_autodiff_model_generates_like_a_plain_one() {
    let plain = load("qwen2_tiny");
    let tracked = load_model(&fixture_dir("qwen2_tiny"), &device().autodiff()).unwrap();
    let config = GenerationConfig {
        max_new_tokens: 8,
        sampling: Sampling::TopP {
            p: 0.8,
            temperature: 1.0,
        },
        seed: 3,
        ..GenerationConfig::new()
    };
    let p = prompts();
    let a = generate(&plain, qwen_tokenizer(), &p, &config).unwrap();
    let b = generate(&tracked, qwen_tokenizer(), &p, &config).unwrap();
    assert_same(&a, &b);
}

#[test]
fn a_per_request_seed_samples_the_same_tokens_in_any_batch() {
    let model = load("qwen3_tiny");
    let p = prompts();
    let config = GenerationConfig {
        max_new_tokens: 10,
        sampling: Sampling::Temperature { temperature: 1.3 },
        seed: 99,
        ..GenerationConfig::new()
    };
    let seeded = |i: usize| Request {
        prompt: p[i].clone(),
        seed: Some(1000 + i as u64),
        ..Request::default()
    };
    // Forward order, reversed order and alone: request i always samples with seed 1000 + i.
    let forward: Vec<Request> = (0..p.len()).map(seeded).collect();
    let reversed: Vec<Request> = (0..p.len()).rev().map(seeded).collect();
    let a = generate_requests(&model, qwen_tokenizer(), &forward, &config).unwrap();
    let mut b = generate_requests(&model, qwen_tokenizer(), &reversed, &config).unwrap();
    b.reverse();
    assert_same(&a, &b);
    for (i, g) in a.iter().enumerate() {
        let alone = GenerationConfig {
            seed: 1000 + i as u64,
            ..config.clone()
        };
        let single = generate_requests(
            &model,
            qwen_tokenizer(),
            &[Request {
                prompt: p[i].clone(),
                ..Request::default()
            }],
            &alone,
        )
        .unwrap();
        assert_same(std::slice::from_ref(g), &single);
    }
    // Without the per-request seed, the reversed batch samples differently (seed + position).
    let unseeded: Vec<Request> = (0..p.len())
        .rev()
        .map(|i| Request {
            seed: None,
            ..seeded(i)
        })
        .collect();
    let mut c = generate_requests(&model, qwen_tokenizer(), &unseeded, &config).unwrap();
    c.reverse();
    assert_ne!(
        a.iter().map(|g| &g.tokens).collect::<Vec<_>>(),
        c.iter().map(|g| &g.tokens).collect::<Vec<_>>()
    );
}
