//! `RolloutSetup`: the one rule for a local engine's KV budget, and the drivers' configs made
//! from one setup.

use rstar_episode::episode::Limits;
use rstar_episode::template::TemplateFormat;
use rstar_policy::Sampling;
use rstar_rollout::setup::{RolloutSetup, base_limits};
use rstar_scheduler::DispatchPolicy;

#[test]
fn a_local_engine_has_room_for_its_whole_batch_and_never_less_than_the_default() {
    // Qwen3's 40,960 positions, the paper's 8,000-token budget, a batch of 64:
    // 64 × (8,000 + 40,960) tokens.
    let setup = RolloutSetup::new(TemplateFormat::ChatMl).budget(8_000, 30);
    assert_eq!(setup.kv_capacity(64, 40_960), 64 * 48_960);
    // A small stage on the tiny model needs less than the engine's 64 × 4,096 default.
    let small = RolloutSetup::new(TemplateFormat::Compact).budget(96, 3);
    assert_eq!(small.kv_capacity(4, 512), 64 * 4096);
    // A batch of 0 counts as 1.
    assert_eq!(setup.kv_capacity(0, 40_960), 64 * 4096);
    let config = setup.local_engine_config("e", 64, 40_960);
    assert_eq!(config.kv_capacity, 64 * 48_960);
    assert_eq!(config.stop_strings, ["<|im_end|>"]);
    assert_eq!(config.name, "e");
}

#[test]
fn both_drivers_take_the_setup_s_limits_sampler_and_eos() {
    let setup = RolloutSetup::new(TemplateFormat::ChatMl)
        .budget(100, 2)
        .temperature(0.6)
        .eos(vec![151_645]);
    let want = Limits {
        max_response_tokens: 100,
        max_assistant_turns: 2,
        ..Limits::rstar2_agent()
    };
    assert_eq!(setup.limits, want);
    assert_eq!(base_limits(TemplateFormat::Compact), Limits::compact());

    let lock_step = setup.lock_step(9, 16);
    assert_eq!(lock_step.limits, want);
    assert_eq!(
        lock_step.sampling,
        Sampling::Temperature { temperature: 0.6 }
    );
    assert_eq!(lock_step.eos, [151_645]);
    assert_eq!((lock_step.seed, lock_step.max_batch), (9, 16));
    assert!(lock_step.per_rollout_seeds);

    let scheduled = setup.schedule(9, DispatchPolicy::KvAware);
    assert_eq!(scheduled.limits, want);
    assert_eq!(scheduled.template, TemplateFormat::ChatMl);
    assert_eq!(scheduled.policy, DispatchPolicy::KvAware);
    let engine = setup.local_engine_config("e", 8, 1024);
    assert_eq!(engine.sampling, Sampling::Temperature { temperature: 0.6 });
    assert_eq!(engine.eos, [151_645]);
}
