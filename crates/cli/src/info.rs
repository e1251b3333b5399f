//! `rstar info`: what this binary was built with.

use serde::Serialize;

/// Arguments of `rstar info`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct Info {
    version: &'static str,
    crates: Vec<&'static str>,
    features: Vec<&'static str>,
}

fn info() -> Info {
    Info {
        version: rstar_agent::VERSION,
        // Every workspace crate linked into the binary (all but `rstar-python`, the wheel, and
        // `rstar-testdata`); `cli::basics::info_lists_every_crate_of_the_binary` compares it
        // with `crates/*/Cargo.toml`, so a new crate cannot be left out.
        crates: vec![
            "rstar-cli",
            "rstar-agent",
            "rstar-analysis",
            "rstar-curriculum",
            "rstar-engine",
            "rstar-episode",
            "rstar-grpo",
            "rstar-http",
            "rstar-policy",
            "rstar-roc",
            "rstar-rollout",
            "rstar-scheduler",
            "rstar-serve",
            "rstar-tasks",
            "rstar-toolenv",
            "rstar-toolserver",
            "rstar-train",
            "rstar-verifier",
        ],
        features: [
            (cfg!(feature = "flex"), "flex"),
            (cfg!(feature = "wgpu"), "wgpu"),
            (cfg!(feature = "cuda"), "cuda"),
            (cfg!(feature = "tch"), "tch"),
            (cfg!(feature = "fusion"), "fusion"),
            (cfg!(feature = "autotune"), "autotune"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect(),
    }
}

/// Runs `rstar info`.
pub fn run(args: Args) -> anyhow::Result<()> {
    let info = info();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
    } else {
        println!("rstar {}", info.version);
        println!("crates:   {}", info.crates.join(", "));
        let features = if info.features.is_empty() {
            "(none)".to_string()
        } else {
            info.features.join(", ")
        };
        println!("features: {features}");
    }
    Ok(())
}
