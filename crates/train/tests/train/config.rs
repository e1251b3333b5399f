//! Configs: presets, and errors that name the file, line and field.

use std::io::Write;

use rstar_train::TrainConfig;

#[test]
fn a_config_file_round_trips_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    let text = serde_json::to_string_pretty(&TrainConfig::smoke()).unwrap();
    std::fs::write(&path, &text).unwrap();
    assert_eq!(
        TrainConfig::from_json_file(&path).unwrap(),
        TrainConfig::smoke()
    );

    // An unknown field: the file and the line are named.
    let bad = text.replacen("\"seed\"", "\"sed\"", 1);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(bad.as_bytes()).unwrap();
    let err = TrainConfig::from_json_file(&path).unwrap_err().to_string();
    assert!(
        err.contains("config.json:3:") && err.contains("sed"),
        "{err}"
    );

    // A value out of range: the field is named.
    let mut c = TrainConfig::smoke();
    c.sft.batch_size = 0;
    std::fs::write(&path, serde_json::to_string_pretty(&c).unwrap()).unwrap();
    let err = TrainConfig::from_json_file(&path).unwrap_err().to_string();
    assert!(err.contains("`sft.batch_size`"), "{err}");
    let mut c = TrainConfig::smoke();
    c.sft.threads = 0;
    assert!(
        c.validate()
            .unwrap_err()
            .to_string()
            .contains("`sft.threads`")
    );
    let mut c = TrainConfig::smoke();
    c.sft.micro_batches = 0;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`sft.micro_batches`"), "{err}");
    let mut c = TrainConfig::smoke();
    c.rl.threads = 0;
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("`rl.threads`"), "{err}");
    // Older configs have no `threads` or `micro_batches`: one thread, one padded batch, as
    // before (the tiny preset now has 2 threads and 8 micro-batches).
    let mut json: serde_json::Value = serde_json::to_value(TrainConfig::tiny()).unwrap();
    json["sft"].as_object_mut().unwrap().remove("threads");
    json["sft"].as_object_mut().unwrap().remove("micro_batches");
    json["rl"].as_object_mut().unwrap().remove("threads");
    let old: TrainConfig = serde_json::from_value(json).unwrap();
    assert_eq!(
        (old.sft.threads, old.sft.micro_batches, old.rl.threads),
        (1, 1, 1)
    );
    let tiny = TrainConfig::tiny();
    assert_eq!(
        (tiny.sft.threads, tiny.sft.micro_batches, tiny.rl.threads),
        (2, 8, 2)
    );

    let err = TrainConfig::from_json_file(&dir.path().join("missing.json")).unwrap_err();
    assert!(err.to_string().contains("missing.json"), "{err}");
}

#[test]
fn lora_keys_are_absent_for_full_fine_tuning_and_bad_ones_are_named() {
    // Full fine-tuning serialises as before LoRA existed: a resume compares the JSON.
    let text = serde_json::to_string(&TrainConfig::tiny()).unwrap();
    assert!(!text.contains("lora"), "{text}");
    let mut c = TrainConfig::smoke();
    c.rl.lora = Some(rstar_policy::LoraConfig::new(8, 16.0));
    c.validate().unwrap();
    let back: TrainConfig = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    assert_eq!(back, c);
    let named = |c: &TrainConfig| c.validate().unwrap_err().to_string();
    let mut bad = c.clone();
    bad.rl.lora = Some(rstar_policy::LoraConfig::new(0, 16.0));
    assert!(named(&bad).contains("rl.lora.rank"), "{}", named(&bad));
    bad.rl.lora = Some(rstar_policy::LoraConfig::new(8, 16.0).with_targets(&["lm_head"]));
    assert!(named(&bad).contains("rl.lora.targets"), "{}", named(&bad));
    // SFT on adapters needs a pretrained base to freeze.
    let mut sft = TrainConfig::smoke();
    sft.sft.lora = Some(rstar_policy::LoraConfig::new(8, 16.0));
    let err = named(&sft);
    assert!(err.contains("sft.lora") && err.contains("init"), "{err}");
    sft.sft.steps = 0;
    sft.validate().unwrap();
}

#[test]
fn base_precision_and_checkpointing_keys_are_absent_unless_set_and_bf16_needs_lora() {
    use rstar_policy::Precision;
    let text = serde_json::to_string(&TrainConfig::tiny()).unwrap();
    assert!(
        !text.contains("base_precision") && !text.contains("gradient_checkpointing"),
        "{text}"
    );
    let mut c = TrainConfig::smoke();
    c.rl.base_precision = Precision::Bf16;
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("rl.base_precision") && err.contains("needs `rl.lora`"),
        "{err}"
    );
    c.rl.lora = Some(rstar_policy::LoraConfig::new(8, 16.0));
    c.rl.gradient_checkpointing = true;
    c.sft.gradient_checkpointing = true;
    c.validate().unwrap();
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["rl"]["base_precision"], "bf16");
    assert_eq!(json["rl"]["gradient_checkpointing"], true);
    let back: TrainConfig = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(back, c);
    let mut sft = TrainConfig::smoke();
    sft.sft.base_precision = Precision::Bf16;
    let err = sft.validate().unwrap_err().to_string();
    assert!(err.contains("sft.base_precision"), "{err}");
    // A bad value is named by its field.
    let mut bad = json;
    bad["rl"]["base_precision"] = "fp8".into();
    let err = serde_json::from_value::<TrainConfig>(bad)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rl.base_precision") && err.contains("fp8"),
        "{err}"
    );
}
