//! The `rstar` binary: a thin shell over [`rstar_agent::cli`].

fn main() -> std::process::ExitCode {
    rstar_agent::cli::main()
}
