//! Generation: the choices of every prompt over the engines, and what a choice reports.

use super::*;

/// Generates `n` choices for every prompt (prompt-major order), spreading them over the
/// engines by their in-flight counts.
pub(crate) async fn generate_all(
    state: &Arc<AppState>,
    prompts: &[(Vec<u32>, usize)],
    common: &Common,
    stop_strings: Vec<String>,
) -> Result<(Vec<Generation>, Vec<Arc<str>>), ApiError> {
    let request = state.requests.fetch_add(1, Ordering::Relaxed);
    let base_seed = common.seed.unwrap_or_else(rand::random);
    let options = TurnOptions {
        sampling: Some(common.sampling),
        stop_strings: Some(stop_strings),
        eos: Some(if common.ignore_eos {
            Vec::new()
        } else {
            state.eos.clone()
        }),
    };
    let choices = prompts.len().saturating_mul(common.n);
    let permits = u32::try_from(choices)
        .ok()
        .and_then(|n| Arc::clone(&state.in_flight).try_acquire_many_owned(n).ok())
        .ok_or_else(|| ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            message: format!(
                "the server is generating its maximum of {} choices; retry later",
                state.config.max_in_flight
            ),
            param: None,
        })?;
    // Dropped with the request (a client that goes away): the tasks are aborted, and the
    // engine skips turns whose answer nobody waits for any more.
    let mut tasks = tokio::task::JoinSet::new();
    for (context, max_tokens) in prompts {
        for j in 0..common.n {
            let spec = TurnSpec {
                rollout: request,
                turn: j as u32,
                context: context.clone(),
                max_new_tokens: *max_tokens,
                seed: base_seed.wrapping_add(j as u64),
            };
            let state = Arc::clone(state);
            let adapter = common.adapter.clone();
            let options = options.clone();
            let index = tasks.len();
            tasks.spawn(async move {
                let slots = adapter.as_ref().map_or(&state.engines, |a| &a.engines);
                let slot = slots
                    .iter()
                    .min_by_key(|s| s.in_flight.load(Ordering::Relaxed))
                    .expect("at least one engine");
                slot.in_flight.fetch_add(1, Ordering::Relaxed);
                let out = slot.engine.generate_versioned(spec, options).await;
                slot.in_flight.fetch_sub(1, Ordering::Relaxed);
                (index, out.map_err(|e| e.to_string()))
            });
        }
    }
    let mut out: Vec<Option<(Generation, Arc<str>)>> = (0..tasks.len()).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        let (index, result) = joined.map_err(|e| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: format!("generation failed: {e}"),
            param: None,
        })?;
        out[index] = Some(result.map_err(|message| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            kind: "server_error",
            message: format!("generation failed: {message}"),
            param: None,
        })?);
    }
    drop(permits);
    Ok(out.into_iter().flatten().unzip())
}

/// A response's `metadata`, as SGLang writes it: the version of the weights that wrote the
/// choices (the oldest, in the rare case a weight update landed between them).
pub(crate) fn metadata(versions: &[Arc<str>]) -> wire::Metadata {
    let oldest = versions.iter().min_by_key(|v| version_order(v));
    wire::Metadata {
        weight_version: oldest.map(|v| v.to_string()),
    }
}

/// Versions sort numerically when they are numbers (`step-12` after `step-9`), else as text;
/// `default` comes first.
pub(crate) fn version_order(v: &str) -> (u8, u64, String) {
    if v == rstar_engine::INITIAL_WEIGHT_VERSION {
        return (0, 0, String::new());
    }
    let digits: String = v.chars().filter(char::is_ascii_digit).collect();
    match digits.parse::<u64>() {
        Ok(n) => (1, n, v.to_string()),
        Err(_) => (2, 0, v.to_string()),
    }
}

/// The choice's text: the generated text without the stop string unless asked to keep it.
pub(crate) fn choice_text(g: &Generation, include_stop: bool, keep: &[&str]) -> String {
    match &g.finish_reason {
        FinishReason::Stop(s) if !include_stop && !keep.contains(&s.as_str()) => g
            .text
            .strip_suffix(s.as_str())
            .unwrap_or(&g.text)
            .to_string(),
        _ => g.text.clone(),
    }
}

pub(crate) fn finish_reason(g: &Generation) -> (wire::FinishReason, Option<StopReason>) {
    match &g.finish_reason {
        FinishReason::Stop(s) => (wire::FinishReason::Stop, Some(StopReason::Text(s.clone()))),
        FinishReason::Eos => (
            wire::FinishReason::Stop,
            g.tokens.last().map(|&t| StopReason::Token(t)),
        ),
        FinishReason::Length => (wire::FinishReason::Length, None),
    }
}

pub(crate) fn token_strings(state: &AppState, tokens: &[u32]) -> Vec<String> {
    tokens
        .iter()
        .map(|&t| state.tokenizer.decode(&[t]).unwrap_or_default())
        .collect()
}

pub(crate) fn usage(prompts: &[(Vec<u32>, usize)], generations: &[Generation]) -> Usage {
    let prompt_tokens: usize = prompts.iter().map(|(p, _)| p.len()).sum();
    let completion_tokens: usize = generations.iter().map(|g| g.tokens.len()).sum();
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}
