//! The running curriculum: it sees each step's metrics and answers "stay" or
//! "advance"; its state serialises for resume.

use serde::{Deserialize, Serialize};

use crate::{CurriculumConfig, Error, Result, Stage};

/// What the trainer reports after each RL step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepMetrics {
    /// Mean outcome reward of the step's rollouts (finite).
    pub reward_mean: f64,
    /// Share of the step's responses cut at the token budget, in [0, 1].
    pub truncation_rate: f64,
}

impl StepMetrics {
    /// Metrics of one step.
    pub fn new(reward_mean: f64, truncation_rate: f64) -> Self {
        Self {
            reward_mean,
            truncation_rate,
        }
    }

    fn validate(&self, step: u64) -> Result<()> {
        if !self.reward_mean.is_finite() {
            return Err(Error::BadMetric {
                step,
                field: "reward_mean",
                value: self.reward_mean,
                range: "",
            });
        }
        if !(0.0..=1.0).contains(&self.truncation_rate) {
            return Err(Error::BadMetric {
                step,
                field: "truncation_rate",
                value: self.truncation_rate,
                range: " in [0, 1]",
            });
        }
        Ok(())
    }
}

/// The curriculum's answer to a step's metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Decision {
    /// Keep training in the current stage.
    Stay,
    /// The current stage ended: train the next steps in stage `to`.
    Advance {
        /// Index of the new stage.
        to: usize,
        /// Its name.
        name: String,
        /// Whether to reset the optimizer state before the next step.
        reset_optimizer: bool,
        /// Why the previous stage ended.
        because: String,
    },
    /// The last stage ended: training is over.
    Finish {
        /// Why it ended.
        because: String,
    },
}

/// Where a run stands; serialise it with the checkpoint to resume exactly.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CurriculumState {
    /// Index of the current stage.
    pub stage: usize,
    /// Steps taken in the current stage.
    pub stage_step: u64,
    /// Steps taken in the whole run.
    pub total_step: u64,
    /// Metrics of the steps taken in the current stage, oldest first (what the triggers read).
    pub history: Vec<StepMetrics>,
    /// The last stage has ended.
    pub finished: bool,
    /// The step at which each stage was entered (the first is 0).
    pub entered_at: Vec<u64>,
}

/// A curriculum in progress.
#[derive(Debug, Clone, PartialEq)]
pub struct Curriculum {
    config: CurriculumConfig,
    state: CurriculumState,
}

impl Curriculum {
    /// Starts at the first stage.
    ///
    /// # Errors
    /// An invalid configuration.
    pub fn new(config: CurriculumConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            state: CurriculumState {
                entered_at: vec![0],
                ..CurriculumState::default()
            },
        })
    }

    /// Continues from a saved state.
    ///
    /// # Errors
    /// An invalid configuration, or a state that names a stage it does not
    /// have or holds inconsistent counts or metrics.
    pub fn resume(config: CurriculumConfig, state: CurriculumState) -> Result<Self> {
        config.validate()?;
        if state.stage >= config.stages.len() {
            return Err(Error::State(format!(
                "stage {} but the curriculum has {} stages",
                state.stage,
                config.stages.len()
            )));
        }
        if state.history.len() as u64 != state.stage_step {
            return Err(Error::State(format!(
                "{} metrics in the history for {} steps in the stage",
                state.history.len(),
                state.stage_step
            )));
        }
        if state.stage_step > state.total_step || state.entered_at.len() != state.stage + 1 {
            return Err(Error::State("step counts do not add up".into()));
        }
        for (i, m) in state.history.iter().enumerate() {
            m.validate(state.total_step - state.stage_step + i as u64 + 1)?;
        }
        Ok(Self { config, state })
    }

    /// The configuration.
    pub fn config(&self) -> &CurriculumConfig {
        &self.config
    }

    /// The state to save.
    pub fn state(&self) -> &CurriculumState {
        &self.state
    }

    /// The stage the next step trains in (the last one once finished).
    pub fn stage(&self) -> &Stage {
        &self.config.stages[self.state.stage]
    }

    /// Index of the current stage.
    pub fn stage_index(&self) -> usize {
        self.state.stage
    }

    /// Whether the last stage has ended.
    pub fn is_finished(&self) -> bool {
        self.state.finished
    }

    /// Records one step's metrics (taken in the current stage) and decides.
    ///
    /// # Errors
    /// [`Error::BadMetric`] for a NaN or infinite reward or a truncation rate
    /// outside [0, 1] (the state is left unchanged), [`Error::Finished`] after
    /// the last stage ended.
    pub fn observe(&mut self, metrics: StepMetrics) -> Result<Decision> {
        if self.state.finished {
            return Err(Error::Finished(self.state.total_step));
        }
        metrics.validate(self.state.total_step + 1)?;
        self.state.total_step += 1;
        self.state.stage_step += 1;
        self.state.history.push(metrics);
        let trigger = self
            .stage()
            .end_trigger()
            .expect("validated stages have an end trigger");
        let Some(reason) = trigger.check(&self.state.history) else {
            return Ok(Decision::Stay);
        };
        let because = format!(
            "stage `{}` ended after {} steps (step {} of the run): {reason}",
            self.stage().name,
            self.state.stage_step,
            self.state.total_step
        );
        if self.state.stage + 1 == self.config.stages.len() {
            self.state.finished = true;
            return Ok(Decision::Finish { because });
        }
        self.state.stage += 1;
        self.state.stage_step = 0;
        self.state.history.clear();
        self.state.entered_at.push(self.state.total_step);
        let next = self.stage();
        Ok(Decision::Advance {
            to: self.state.stage,
            name: next.name.clone(),
            reset_optimizer: next.reset_optimizer,
            because,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_metrics_leave_the_state_alone() {
        let mut c = Curriculum::new(CurriculumConfig::tiny()).unwrap();
        c.observe(StepMetrics::new(0.5, 0.0)).unwrap();
        let before = c.state().clone();
        let err = c.observe(StepMetrics::new(f64::NAN, 0.0)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "step 2: metric `reward_mean` is NaN, expected a finite number"
        );
        let err = c.observe(StepMetrics::new(0.5, 1.5)).unwrap_err();
        assert!(
            err.to_string()
                .contains("`truncation_rate` is 1.5, expected a finite number in [0, 1]"),
            "{err}"
        );
        assert!(c.observe(StepMetrics::new(0.5, f64::INFINITY)).is_err());
        assert_eq!(c.state(), &before);
    }

    #[test]
    fn resume_rejects_inconsistent_state() {
        let state = CurriculumState {
            stage: 7,
            ..CurriculumState::default()
        };
        assert!(matches!(
            Curriculum::resume(CurriculumConfig::tiny(), state),
            Err(Error::State(_))
        ));
        let state = CurriculumState {
            stage_step: 2,
            total_step: 2,
            entered_at: vec![0],
            ..CurriculumState::default()
        };
        assert!(matches!(
            Curriculum::resume(CurriculumConfig::tiny(), state),
            Err(Error::State(_))
        ));
    }
}
