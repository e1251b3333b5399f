//! End-to-end tests of `rstar simulate` (on the small preset, to stay fast).

use super::common::output as rstar;

#[test]
fn prints_three_policies_and_the_check() {
    let out = rstar(&["simulate", "--preset", "small"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "static",
        "least-requests",
        "kv-aware",
        "GPU idle",
        "evictions",
        "check:",
    ] {
        assert!(text.contains(needle), "missing {needle}: {text}");
    }
    assert!(text.contains("at least 30%: yes"), "{text}");
}

#[test]
fn json_and_plot_files_are_written() {
    let dir = std::env::temp_dir().join(format!("rstar-simulate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("sim.json");
    let svg = dir.join("sim.svg");
    let out = rstar(&[
        "simulate",
        "--preset",
        "small",
        "--seed",
        "3",
        "--json",
        json.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["config"]["seed"], 3);
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 3);
    assert_eq!(policies[2]["policy"], "kv-aware");
    assert_eq!(policies[2]["evictions"], 0);
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains("kv-aware"));
    // `--json` alone prints the same numbers on stdout, and the config round-trips.
    let out = rstar(&["simulate", "--preset", "small", "--seed", "3", "--json"]);
    let stdout: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stdout, v);
    let config = dir.join("config.json");
    std::fs::write(&config, v["config"].to_string()).unwrap();
    let out = rstar(&["simulate", "--config", config.to_str().unwrap(), "--json"]);
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(again, v);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unknown_preset_fails_with_the_known_ones() {
    let out = rstar(&["simulate", "--preset", "huge"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("unknown preset `huge`") && err.contains("small"),
        "{err}"
    );
}
