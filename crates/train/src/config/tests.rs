//! The config's presets, parsing and checks.

use super::*;

#[test]
fn presets_validate() {
    for name in ["smoke", "tiny"] {
        let c = TrainConfig::preset(name).unwrap();
        c.validate().unwrap();
        assert_eq!(c.preset, name);
    }
    assert!(TrainConfig::preset("huge").is_err());
}

#[test]
fn the_paper_preset_has_its_hyperparameters_and_needs_a_model_and_data() {
    let mut c = TrainConfig::preset("rstar2-agent").unwrap();
    assert_eq!(
        (c.rl.lr, c.rl.prompts_per_step, c.rl.group_size),
        (1e-6, 512, 16)
    );
    assert!(c.rl.roc == RocOptions::paper());
    assert!(c.rl.grpo.kl.is_none() && c.rl.grpo.entropy_coeff == 0.0);
    assert_eq!((c.rl.warmup_steps, c.rl.max_batch), (20, 64));
    assert_eq!(c.checkpoint_every, 10);
    assert_eq!(TrainConfig::tiny().checkpoint_every, 1);
    assert_eq!(
        (c.rl.grpo.clip_ratio_low, c.rl.grpo.clip_ratio_high),
        (0.2, 0.28)
    );
    let tokens: Vec<u32> = c
        .curriculum
        .stages
        .iter()
        .map(|s| s.max_response_tokens)
        .collect();
    assert_eq!(tokens, [8192, 12288, 12288]);
    assert!(c.curriculum.stages.iter().all(|s| s.temperature == 1.0));
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`init`") && err.contains("--model"), "{err}");
    c.init = Some("m".into());
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`data`") && err.contains("--data"), "{err}");
    c.data = Some("d.jsonl".into());
    c.validate().unwrap();
}

#[test]
fn bad_fields_are_named() {
    let mut c = TrainConfig::smoke();
    c.rl.group_size = 1;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`rl.group_size`"), "{err}");
    let mut c = TrainConfig::smoke();
    c.sft.lr = -1.0;
    assert!(c.validate().unwrap_err().to_string().contains("`sft.lr`"));
    // Bug weights: each ≥ 0 and finite, not all 0; read by name from JSON.
    use rstar_tasks::tasks::sft::Bug;
    let mut c = TrainConfig::smoke();
    c.sft.bug_weights = BTreeMap::from([(Bug::Typo, -1.0)]);
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`sft.bug_weights.typo`"), "{err}");
    c.sft.bug_weights = BTreeMap::from([(Bug::Typo, 0.0), (Bug::SyntaxError, 0.0)]);
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("`sft.bug_weights`") && err.contains("uniformly"),
        "{err}"
    );
    c.sft.bug_weights = BTreeMap::from([(Bug::SyntaxError, 1.0)]);
    c.validate().unwrap();
    let mut json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["sft"]["bug_weights"]["syntax_error"], 1.0);
    json["sft"]["bug_weights"] = serde_json::json!({"off_by_one": 1.0});
    let err = serde_json::from_value::<TrainConfig>(json)
        .unwrap_err()
        .to_string();
    assert!(err.contains("off_by_one"), "{err}");
}

#[test]
fn issue_46_the_tool_latency_budget_is_optional_and_positive() {
    let json = serde_json::to_value(TrainConfig::smoke()).unwrap();
    assert!(json["tools"].get("latency_budget_secs").is_none(), "{json}");
    let mut c = TrainConfig::smoke();
    c.tools.latency_budget_secs = Some(0.0);
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`tools.latency_budget_secs`"), "{err}");
    c.tools.latency_budget_secs = Some(2.5);
    c.validate().unwrap();
    let back: TrainConfig = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
    assert_eq!(back.tools.latency_budget_secs, Some(2.5));
}

#[test]
fn issue_46_remote_verification_needs_tool_servers_and_is_optional() {
    let json = serde_json::to_value(TrainConfig::smoke()).unwrap();
    assert!(json["rl"].get("verify").is_none(), "{json}");
    let mut c = TrainConfig::smoke();
    c.rl.verify = VerifyAt::Remote;
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("`rl.verify`") && err.contains("tools.servers"),
        "{err}"
    );
    c.tools.servers = vec!["http://a:1".into()];
    c.validate().unwrap();
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["rl"]["verify"], "remote");
    let back: TrainConfig = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back.rl.verify, VerifyAt::Remote);
    let mut bad = json;
    bad["rl"]["verify"] = "nearby".into();
    let err = serde_json::from_value::<TrainConfig>(bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("nearby"), "{err}");
}

#[test]
fn tool_servers_and_pushed_weights_are_checked_and_optional() {
    // Absent from the presets' JSON, and from older configs: the in-process sandbox, disk.
    let json = serde_json::to_value(TrainConfig::smoke()).unwrap();
    assert!(json["tools"].get("servers").is_none(), "{json}");
    assert!(json["rl"].get("publish_via").is_none(), "{json}");
    let mut c = TrainConfig::smoke();
    c.tools.servers = vec!["http://a:1".into(), "https://b:2".into()];
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("`tools.servers`") && err.contains("https://b:2"),
        "{err}"
    );
    c.tools.servers.pop();
    c.validate().unwrap();
    let back: TrainConfig = serde_json::from_value(serde_json::to_value(&c).unwrap()).unwrap();
    assert_eq!(back.tools.servers, ["http://a:1"]);
    // Pushing weights needs engines to push to.
    let mut c = TrainConfig::smoke();
    c.rl.publish_via = PublishVia::Http;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`rl.publish_via`"), "{err}");
    c.rl.rollout_driver = RolloutDriver::Scheduled;
    c.rl.engines = Engines::Remote(vec!["http://a:1".into()]);
    c.validate().unwrap();
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["rl"]["publish_via"], "http");
    assert_eq!("disk".parse::<PublishVia>(), Ok(PublishVia::Disk));
    assert!("ftp".parse::<PublishVia>().unwrap_err().contains("`ftp`"));
}

#[test]
fn the_load_refresh_defaults_to_a_second_and_must_be_a_duration() {
    let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
    json["rl"]
        .as_object_mut()
        .unwrap()
        .remove("load_refresh_secs");
    let c: TrainConfig = serde_json::from_value(json).unwrap();
    assert_eq!(
        c.rl.load_refresh_secs, 1.0,
        "older configs read every second"
    );
    for bad in [-0.5, f64::NAN, f64::INFINITY] {
        let mut c = TrainConfig::smoke();
        c.rl.load_refresh_secs = bad;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`rl.load_refresh_secs`"), "{bad}: {err}");
    }
    let mut c = TrainConfig::smoke();
    c.rl.load_refresh_secs = 0.0;
    c.validate().unwrap();
}

#[test]
fn the_eval_temperature_defaults_to_one_and_must_be_positive() {
    let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
    json["eval"].as_object_mut().unwrap().remove("temperature");
    let c: TrainConfig = serde_json::from_value(json).unwrap();
    assert_eq!(c.eval.temperature, 1.0);
    let mut c = TrainConfig::smoke();
    c.eval.temperature = 0.0;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`eval.temperature`"), "{err}");
}

#[test]
fn the_eval_budget_is_optional_and_must_be_positive() {
    // Absent in older configs and in the presets: the template's budget.
    let json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
    assert!(json["eval"].get("max_response_tokens").is_none(), "{json}");
    let mut set = json.clone();
    set["eval"]["max_response_tokens"] = 256.into();
    let c: TrainConfig = serde_json::from_value(set).unwrap();
    assert_eq!(c.eval.max_response_tokens, Some(256));
    let mut c = TrainConfig::smoke();
    c.eval.max_response_tokens = Some(0);
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`eval.max_response_tokens`"), "{err}");
}

#[test]
fn older_configs_get_adam_epsilon_1e_8_no_warm_up_and_one_lr_and_these_must_be_positive() {
    let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
    json["rl"].as_object_mut().unwrap().remove("adam_epsilon");
    json["rl"].as_object_mut().unwrap().remove("warmup_steps");
    json["rl"]
        .as_object_mut()
        .unwrap()
        .remove("gain_lr_multiplier");
    let c: TrainConfig = serde_json::from_value(json).unwrap();
    assert_eq!((c.rl.adam_epsilon, c.rl.warmup_steps), (1e-8, 0));
    assert_eq!(c.rl.gain_lr_multiplier, 1.0);
    for m in [0.0, -2.0, f64::INFINITY] {
        let mut c = TrainConfig::smoke();
        c.rl.gain_lr_multiplier = m;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`rl.gain_lr_multiplier`"), "{err}");
    }
    for eps in [0.0, -1e-3, f64::NAN] {
        let mut c = TrainConfig::smoke();
        c.rl.adam_epsilon = eps;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("`rl.adam_epsilon`"), "{err}");
    }
}

#[test]
fn roc_reads_old_bools_mode_names_and_objects() {
    let read = |roc: serde_json::Value| -> Result<TrainConfig, String> {
        let mut json = serde_json::to_value(TrainConfig::tiny()).unwrap();
        json["rl"]["roc"] = roc;
        serde_json::from_value(json).map_err(|e| e.to_string())
    };
    // Configs written before `rl.roc` was an object.
    assert_eq!(read(true.into()).unwrap().rl.roc, RocOptions::paper());
    assert_eq!(read(false.into()).unwrap().rl.roc, RocOptions::off());
    assert_eq!(
        read("reference".into()).unwrap().rl.roc,
        RocOptions::reference()
    );
    let c = read(serde_json::json!({"mode": "reference", "keep": 6, "min_failures": 1})).unwrap();
    assert_eq!(
        c.rl.roc,
        RocOptions {
            mode: RocMode::Reference,
            keep: Some(6),
            min_failures: Some(1),
            min_successes: None,
            reject_equal_reward: true,
        }
    );
    // The tiny preset's G = 8: floors 1 and min(2, 6 / 2) = 2.
    assert_eq!(c.rl.roc.floors(c.rl.roc.keep_for(8)), (1, 2));
    let paper = RocOptions::paper().select_config(8, 3).unwrap();
    assert_eq!(
        (paper.keep, paper.min_failures, paper.min_successes),
        (8, 0, 0)
    );
    assert!(paper.reject_equal_reward && paper.seed == 3);
    assert_eq!(paper.mode, rstar_roc::Mode::Paper);
    assert!(RocOptions::off().select_config(8, 3).is_none());
    assert_eq!(
        (
            RocOptions::off().rollouts(8),
            RocOptions::paper().rollouts(8)
        ),
        (8, 16)
    );
    // Bad values name the field.
    for bad in [
        serde_json::json!("sometimes"),
        serde_json::json!(3),
        serde_json::json!({"mode": "paper", "kepp": 4}),
        serde_json::json!({"mode": "half"}),
        serde_json::json!({"keep": 4}),
    ] {
        let err = read(bad.clone()).unwrap_err();
        assert!(err.contains("`rl.roc`"), "{bad}: {err}");
    }
}

#[test]
fn roc_keep_and_floors_are_checked_against_the_group() {
    let check = |roc: RocOptions| {
        let mut c = TrainConfig::smoke();
        c.rl.group_size = 4;
        c.rl.roc = roc;
        c.validate().map_err(|e| e.to_string())
    };
    check(RocOptions::paper()).unwrap();
    check(RocOptions::reference()).unwrap();
    let keep = |k| RocOptions {
        keep: Some(k),
        ..RocOptions::paper()
    };
    for k in [1, 8, 9] {
        let err = check(keep(k)).unwrap_err();
        assert!(err.contains("`rl.roc.keep`"), "{k}: {err}");
    }
    check(keep(6)).unwrap();
    let err = check(RocOptions {
        min_failures: Some(3),
        min_successes: Some(2),
        ..RocOptions::paper()
    })
    .unwrap_err();
    assert!(err.contains("`rl.roc.min_failures`"), "{err}");
    // Off ignores keep.
    check(RocOptions {
        keep: Some(100),
        ..RocOptions::off()
    })
    .unwrap();
}

#[test]
fn precision_defaults_to_f32_reads_bf16_and_names_the_field_of_a_bad_value() {
    let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
    assert_eq!(json["sft"]["precision"], "f32");
    assert_eq!(json["rl"]["precision"], "f32");
    json["sft"].as_object_mut().unwrap().remove("precision");
    json["rl"].as_object_mut().unwrap().remove("precision");
    let c: TrainConfig = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(
        (c.sft.precision, c.rl.precision),
        (Precision::F32, Precision::F32)
    );
    json["rl"]["precision"] = "bf16".into();
    let c: TrainConfig = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(
        (c.sft.precision, c.rl.precision),
        (Precision::F32, Precision::Bf16)
    );
    for (field, other) in [("sft", "rl"), ("rl", "sft")] {
        let mut bad = json.clone();
        bad[other]["precision"] = "f32".into();
        bad[field]["precision"] = "fp8".into();
        let err = serde_json::from_value::<TrainConfig>(bad)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("`{field}.precision`")) && err.contains("`fp8`"),
            "{err}"
        );
    }
    // From a file, the error names the file and line too.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.json");
    let mut bad = json;
    bad["sft"]["precision"] = "half".into();
    std::fs::write(&path, serde_json::to_string_pretty(&bad).unwrap()).unwrap();
    let err = TrainConfig::from_json_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("`sft.precision`") && err.contains("bad.json") && err.contains("`half`"),
        "{err}"
    );
}

#[test]
fn json_round_trips() {
    let c = TrainConfig::tiny();
    let text = serde_json::to_string_pretty(&c).unwrap();
    let back: TrainConfig = serde_json::from_str(&text).unwrap();
    assert_eq!(back, c);
}

#[test]
fn presets_are_data_with_notes_that_configs_may_carry_too() {
    for (name, text) in PRESETS {
        let c = TrainConfig::preset(name).unwrap();
        assert_eq!(c.preset, name);
        assert!(text.contains("\"//\""), "{name} has no note");
        // Written back without its notes, a preset reads as the same config.
        let plain = serde_json::to_string(&c).unwrap();
        assert_eq!(TrainConfig::from_json_str(&plain).unwrap(), c);
    }
    // A user's config may carry notes at any depth; any other unknown key is refused.
    let mut value = serde_json::to_value(TrainConfig::smoke()).unwrap();
    value["//"] = "why".into();
    value["rl"]["//"] = "why this lr".into();
    let text = value.to_string();
    assert_eq!(
        TrainConfig::from_json_str(&text).unwrap(),
        TrainConfig::smoke()
    );
    value["rl"]["note"] = "not a note".into();
    let err = TrainConfig::from_json_str(&value.to_string()).unwrap_err();
    assert!(err.to_string().contains("unknown field `note`"), "{err}");
}
