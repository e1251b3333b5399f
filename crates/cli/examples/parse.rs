//! Parses `rstar` command lines without running them: the clap definitions are the library's
//! `rstar_cli::Cli`, so a wrapper (a launcher, a test) can check a command line first.
//!
//! Run with `cargo run -p rstar-cli --example parse -- eval --model runs/tiny/final --data d.jsonl --backend wgpu`.

use clap::Parser;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let argv = std::iter::once("rstar".to_string()).chain(if args.is_empty() {
        vec![
            "serve".into(),
            "--model".into(),
            "m".into(),
            "--backend".into(),
            "wgpu".into(),
        ]
    } else {
        args
    });
    match rstar_cli::Cli::try_parse_from(argv) {
        Ok(cli) => println!("{cli:#?}"),
        Err(err) => {
            eprintln!("{err}");
            std::process::exit(2);
        }
    }
}
