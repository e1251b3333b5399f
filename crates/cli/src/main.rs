//! The `rstar` binary: a thin shell over [`rstar_cli`].

fn main() -> std::process::ExitCode {
    rstar_cli::main()
}
