//! [`TrainConfig::validate`]: one check per section of the config, each naming the field it
//! refuses.

use super::*;

impl TrainConfig {
    /// Checks the fields; errors name the field.
    ///
    /// # Errors
    /// [`Error::TrainConfig`] naming the first bad field, [`Error::Curriculum`] for a
    /// bad curriculum.
    pub fn validate(&self) -> Result<(), Error> {
        self.check_counts()?;
        self.check_endpoints()?;
        self.check_numbers()?;
        self.check_sft_mix()?;
        self.check_clips_and_eval()?;
        self.check_preset()?;
        self.model.validate().map_err(|e| match e {
            rstar_policy::Error::InvalidConfig { field, reason } => Error::TrainConfig {
                field: format!("model.{field}"),
                message: reason,
            },
            other => Error::TrainConfig {
                field: "model".into(),
                message: other.to_string(),
            },
        })?;
        self.rl.roc.validate(self.rl.group_size)?;
        self.rl.grpo.validate()?;
        self.curriculum.validate()?;
        self.check_lora()?;
        self.validate_consistency()
    }

    /// `sft.lora` and `rl.lora`: a valid adapter config, and a base to put it on.
    fn check_lora(&self) -> Result<(), Error> {
        for (phase, lora) in [("sft", &self.sft.lora), ("rl", &self.rl.lora)] {
            if let Some(lora) = lora {
                lora.validate().map_err(|e| lora_error(phase, e))?;
            }
        }
        for (phase, lora, base) in [
            ("sft", &self.sft.lora, self.sft.base_precision),
            ("rl", &self.rl.lora, self.rl.base_precision),
        ] {
            if base == Precision::Bf16 && lora.is_none() {
                return bad(
                    &format!("{phase}.base_precision"),
                    format!(
                        "is bf16, which needs `{phase}.lora` (--lora RANK): without adapters the projections train, and bf16 weights lose every update smaller than about 1/256 of the weight (for bf16 compute over f32 weights, set `{phase}.precision`)"
                    ),
                );
            }
        }
        if self.sft.lora.is_some() && self.sft.steps > 0 && self.init.is_none() {
            return bad(
                "sft.lora",
                "trains adapters over a frozen pretrained model, but `init` is not set: a random model's weights would stay random (set `init`, --init DIR, or drop `sft.lora`)".into(),
            );
        }
        Ok(())
    }

    /// Sizes and counts that must be at least 1.
    fn check_counts(&self) -> Result<(), Error> {
        let positive = [
            ("sft.batch_size", self.sft.batch_size),
            ("sft.threads", self.sft.threads),
            ("sft.micro_batches", self.sft.micro_batches),
            ("sft.corpus_size", self.sft.corpus_size),
            ("rl.group_size", self.rl.group_size),
            ("rl.prompts_per_step", self.rl.prompts_per_step),
            ("rl.pool_size", self.rl.pool_size),
            ("rl.mini_batches", self.rl.mini_batches),
            ("rl.threads", self.rl.threads),
            ("rl.engines", self.rl.engines.count()),
            ("checkpoint_every", self.checkpoint_every),
        ];
        for (field, v) in positive {
            if v == 0 {
                return bad(field, "is 0, expected at least 1".into());
            }
        }
        Ok(())
    }

    /// Remote engines, tool servers, weight publication and the load refresh.
    fn check_endpoints(&self) -> Result<(), Error> {
        if let Some(urls) = self.rl.engines.urls() {
            if self.rl.rollout_driver != RolloutDriver::Scheduled {
                return bad(
                    "rl.engines",
                    format!(
                        "lists servers ({}), which only the scheduled driver uses: set `rl.rollout_driver` to `scheduled` (--rollout scheduled)",
                        urls.join(", ")
                    ),
                );
            }
            if let Some(url) = urls.iter().find(|u| !u.starts_with("http://")) {
                return bad("rl.engines", format!("`{url}` is not an http:// URL"));
            }
        }
        if let Some(url) = self
            .tools
            .servers
            .iter()
            .find(|u| !u.starts_with("http://"))
        {
            return bad("tools.servers", format!("`{url}` is not an http:// URL"));
        }
        if self.rl.verify == VerifyAt::Remote && self.tools.servers.is_empty() {
            return bad(
                "rl.verify",
                "is `remote`, which scores answers on the tool servers' `/verify`, but `tools.servers` lists none: give them (--tools URL[,URL…], `rstar tools serve`) or verify `local`"
                    .to_string(),
            );
        }
        if self.rl.publish_via == PublishVia::Http && self.rl.engines.urls().is_none() {
            return bad(
                "rl.publish_via",
                "is `http`, which pushes weights to remote engines, but `rl.engines` lists none"
                    .to_string(),
            );
        }
        if !(self.rl.load_refresh_secs.is_finite() && self.rl.load_refresh_secs >= 0.0) {
            return bad(
                "rl.load_refresh_secs",
                format!(
                    "is {}, expected a number of seconds ≥ 0 (0: only at each step's start)",
                    self.rl.load_refresh_secs
                ),
            );
        }
        if self.rl.logprob_diff_warn.is_nan() || self.rl.logprob_diff_warn < 0.0 {
            return bad(
                "rl.logprob_diff_warn",
                format!("is {}, expected a number ≥ 0", self.rl.logprob_diff_warn),
            );
        }
        Ok(())
    }

    /// The group size, learning rates and other positive numbers, and fractions.
    fn check_numbers(&self) -> Result<(), Error> {
        if self.rl.group_size < 2 {
            return bad(
                "rl.group_size",
                format!(
                    "is {}, expected at least 2 (GRPO compares within a group)",
                    self.rl.group_size
                ),
            );
        }
        let positive_numbers = [
            ("sft.lr", self.sft.lr, ""),
            ("rl.lr", self.rl.lr, ""),
            ("rl.adam_epsilon", self.rl.adam_epsilon, ""),
            (
                "rl.gain_lr_multiplier",
                self.rl.gain_lr_multiplier,
                " (1: one learning rate for all)",
            ),
            ("eval.temperature", self.eval.temperature, ""),
            ("tools.timeout_secs", self.tools.timeout_secs, ""),
            (
                "tools.latency_budget_secs",
                self.tools.latency_budget_secs.unwrap_or(1.0),
                " of seconds, or leave it out for no budget",
            ),
        ];
        for (field, v, hint) in positive_numbers {
            if !(v.is_finite() && v > 0.0) {
                return bad(field, format!("is {v}, expected a positive number{hint}"));
            }
        }
        for (field, v) in [
            ("sft.failing_fraction", self.sft.failing_fraction),
            ("sft.min_lr_ratio", self.sft.min_lr_ratio),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(field, format!("is {v}, expected a number in [0, 1]"));
            }
        }
        Ok(())
    }

    /// The SFT corpus's mix of wrong programs and bugs.
    fn check_sft_mix(&self) -> Result<(), Error> {
        for (kind, share) in &self.sft.wrong_programs {
            if !(0.0..=1.0).contains(share) {
                return bad(
                    &format!("sft.wrong_programs.{}", kind.as_str()),
                    format!("is {share}, expected a number in [0, 1]"),
                );
            }
        }
        for (bug, weight) in &self.sft.bug_weights {
            if !(weight.is_finite() && *weight >= 0.0) {
                let name = serde_json::to_value(bug)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default();
                return bad(
                    &format!("sft.bug_weights.{name}"),
                    format!("is {weight}, expected a weight ≥ 0"),
                );
            }
        }
        if !self.sft.bug_weights.is_empty() && self.sft.bug_weights.values().all(|w| *w == 0.0) {
            return bad(
                "sft.bug_weights",
                "gives every bug weight 0: leave it out to draw the bugs uniformly".into(),
            );
        }
        Ok(())
    }

    /// Gradient clips and the evaluation's budget and temperatures.
    fn check_clips_and_eval(&self) -> Result<(), Error> {
        for (field, clip) in [
            ("sft.grad_clip", self.sft.grad_clip),
            ("rl.grad_clip", self.rl.grad_clip),
        ] {
            if let Some(c) = clip
                && !(c.is_finite() && c > 0.0)
            {
                return bad(field, format!("is {c}, expected a positive number"));
            }
        }
        if self.eval.max_response_tokens == Some(0) {
            return bad(
                "eval.max_response_tokens",
                "is 0, expected at least 1 (or leave it out for the template's budget)".into(),
            );
        }
        if let Some(t) = self
            .eval
            .more_temperatures
            .iter()
            .find(|t| !(t.is_finite() && **t > 0.0))
        {
            return bad(
                "eval.more_temperatures",
                format!("has {t}, expected positive numbers"),
            );
        }
        Ok(())
    }

    /// What the `rstar2-agent` preset needs set.
    fn check_preset(&self) -> Result<(), Error> {
        if self.preset == "rstar2-agent" {
            if self.init.is_none() {
                return bad(
                    "init",
                    "is not set: the rstar2-agent preset trains a real model (--model DIR)".into(),
                );
            }
            if self.data.is_none() {
                return bad(
                    "data",
                    "is not set: the rstar2-agent preset trains on a dataset (--data FILE)".into(),
                );
            }
        }
        Ok(())
    }

    /// The checks across fields: what would panic deep in a step, or train without a word
    /// on something other than what the config says.
    fn validate_consistency(&self) -> Result<(), Error> {
        let bad = |field: &str, message: String| {
            Err(Error::TrainConfig {
                field: field.into(),
                message,
            })
        };
        // A run without `init` uses the built-in tokenizer: its ids must be rows of the
        // embedding (a smaller vocabulary fails in the embedding's gather at the first step).
        if self.init.is_none() {
            let tokens = rstar_policy::Tokenizer::char().vocab_size();
            if self.model.vocab_size < tokens {
                return bad(
                    "model.vocab_size",
                    format!(
                        "is {}, smaller than the built-in tokenizer's {tokens} tokens: set it to at least {tokens}",
                        self.model.vocab_size
                    ),
                );
            }
        }
        // The trainer applies the correction per micro-batch, against the step's global token
        // counts: per-token and per-sequence weights come out as verl's whole-batch ones, but
        // rejection changes those counts and batch normalisation needs the whole batch first.
        let correction = &self.rl.grpo.rollout_correction;
        if correction.rollout_rs.is_some() {
            return bad(
                "rl.grpo.rollout_correction.rollout_rs",
                "rejection sampling is not applied by the trainer yet (it changes the step's token counts before the update, which needs the step split into collect and train, issue #63); use importance weights: rollout_is token or sequence, truncated (a number) or masked (lower_upper)".into(),
            );
        }
        if correction.rollout_is_batch_normalize {
            return bad(
                "rl.grpo.rollout_correction.rollout_is_batch_normalize",
                "is not applied by the trainer yet: it divides by the mean weight of the whole batch, and the loss runs per micro-batch (issue #63)".into(),
            );
        }
        if self.rl.max_staleness > 0 && self.rl.rollout_driver != RolloutDriver::Scheduled {
            return bad(
                "rl.max_staleness",
                format!(
                    "is {}, which rolls out on engines while the trainer updates: it needs the scheduled driver (rl.rollout_driver = \"scheduled\", --rollout scheduled); 0 is the synchronous loop",
                    self.rl.max_staleness
                ),
            );
        }
        if self.rl.pool_size < self.rl.prompts_per_step {
            return bad(
                "rl.pool_size",
                format!(
                    "is {}, fewer problems than one step's rl.prompts_per_step ({}): every step would repeat problems",
                    self.rl.pool_size, self.rl.prompts_per_step
                ),
            );
        }
        if self.eval.problems == 0 {
            return bad(
                "eval.problems",
                "is 0, expected at least 1 (the table compares held-out accuracy)".into(),
            );
        }
        Ok(())
    }
}

/// A [`LoraConfig::validate`] error under `phase` (`rl.lora.rank`).
fn lora_error(phase: &str, e: rstar_policy::Error) -> Error {
    match e {
        rstar_policy::Error::InvalidConfig { field, reason } => Error::TrainConfig {
            field: format!("{phase}.{field}"),
            message: reason,
        },
        other => Error::TrainConfig {
            field: format!("{phase}.lora"),
            message: other.to_string(),
        },
    }
}
