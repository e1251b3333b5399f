//! A run config, as `rstar train --config FILE` reads it: the `smoke` preset edited in code,
//! checked (a bad field is named), written as JSON and read back. Nothing is trained.
//!
//! ```sh
//! cargo run -p rstar-train --example config [OUT.json]
//! ```

use rstar_train::TrainConfig;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::env::args()
        .nth(1)
        .map_or_else(|| std::env::temp_dir().join("rstar-smoke.json"), Into::into);

    let mut config = TrainConfig::smoke();
    config.seed = 11;
    config.rl.group_size = 8;
    config.validate()?;

    // A group of one cannot be compared within: the check names the field.
    let mut bad = config.clone();
    bad.rl.group_size = 1;
    let err = bad.validate().unwrap_err();
    println!("refused: {err}");
    assert!(err.to_string().contains("rl.group_size"));

    std::fs::write(&out, serde_json::to_string_pretty(&config)? + "\n")?;
    let back = TrainConfig::from_json_file(&out)?;
    assert_eq!(back, config);
    println!(
        "{}: preset {}, {} RL stages, group size {}, SFT batch {}",
        out.display(),
        back.preset,
        back.curriculum.stages.len(),
        back.rl.group_size,
        back.sft.batch_size
    );
    Ok(())
}
