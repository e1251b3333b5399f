//! `cargo xtask gpu-bundle [DIR]`: what travels to a lent GPU machine, in one folder (issue #67).
//!
//! A GPU machine is lent only sometimes, for about 15 minutes, with no Rust toolchain and at most
//! 64 MiB of files carried to it. The bundle is built here, in the `gpu-bundle` profile (release
//! code, no debug info, stripped), with every GPU backend that builds on this machine: `wgpu`
//! with CubeCL's `fusion` and `autotune` (`cuda` needs github.com for CubeCL's LLVM, `tch` a
//! LibTorch; see docs/benchmarks.md, "policy-gpu"). Stripped, such a binary is about 100 MB
//! (78 MB of code: Burn's ops for flex, wgpu, fusion and autodiff), so the two binaries travel
//! compressed with xz (about a fifth of that) and `device_check.sh` unpacks them (with `xz`, or
//! Python's `lzma` where there is no `xz`). It holds:
//!
//! - `rstar.xz`, the binary (`--backend wgpu|flex`), whose `rstar bench policy` is the policy
//!   bench against PyTorch (same weights checked first);
//! - `rstar_tch.xz`, the same binary on burn-tch too (`--backend tch`), when `LIBTORCH` names a
//!   LibTorch (PyPI's torch 2.11.0 wheel's `torch` folder: the GPU machine's version);
//! - `device_check.sh` and `policy_peer.py`, the script the lent machine runs and the bench's
//!   PyTorch side;
//! - `SIZES`, what each file weighs.
//!
//! It fails when the folder reaches 60 MiB, or when the bundled `rstar`, unpacked, does not run
//! `--version` with an empty environment.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{cargo, root, step};

/// The cargo profile the bundle is built in (`Cargo.toml`).
const PROFILE: &str = "gpu-bundle";
/// The GPU features that build on this machine.
const FEATURES: &str = "wgpu,fusion,autotune";
/// What may travel with a run is 64 MiB; the bundle leaves room for a run's own files.
pub const LIMIT_BYTES: u64 = 60 << 20;

pub fn run(args: &[String]) -> Result<()> {
    let out = match args {
        [] => target_dir().join(PROFILE).join("bundle"),
        [dir] => PathBuf::from(dir),
        _ => bail!("usage: cargo xtask gpu-bundle [DIR]"),
    };
    // With a LibTorch (`LIBTORCH`, e.g. the `torch` folder of PyPI's torch 2.11.0 wheel, the
    // GPU machine's version), an `rstar` on burn-tch too, built first: both builds write
    // target/gpu-bundle/rstar. torch-sys expects 2.9.0: its check is bypassed (its C++
    // wrapper compiles against 2.11.0). The CUDA libraries libtorch_cuda needs are on the GPU
    // machine, not here: the link leaves them to the loader.
    let built = target_dir().join(PROFILE).join("rstar");
    let tch = match std::env::var_os("LIBTORCH") {
        Some(_) => {
            build_rstar("tch")?;
            let to = target_dir().join(PROFILE).join("rstar_tch");
            std::fs::copy(&built, &to)
                .with_context(|| format!("copying {} to {}", built.display(), to.display()))?;
            Some(to)
        }
        None => {
            eprintln!("==> no LIBTORCH: the bundle has no rstar_tch");
            None
        }
    };
    build_rstar(FEATURES)?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    // What an earlier layout or run left (the bench used to travel as its own binaries).
    for stale in ["rstar_tch.xz", "policy_bench.xz", "policy_bench_tch.xz"] {
        let _ = std::fs::remove_file(out.join(stale));
    }
    let binaries = [Some((built, "rstar.xz")), tch.map(|t| (t, "rstar_tch.xz"))];
    for (from, name) in binaries.into_iter().flatten() {
        xz(&from, &out.join(name))?;
    }
    for (from, name) in [
        (root().join("xtask/gpu/device_check.sh"), "device_check.sh"),
        (root().join("xtask/bench/policy_peer.py"), "policy_peer.py"),
    ] {
        let to = out.join(name);
        std::fs::copy(&from, &to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    let sizes = sizes(&out)?;
    std::fs::write(out.join("SIZES"), &sizes.0)?;
    eprint!("{}", sizes.0);
    check_size(sizes.1)?;
    // Unpacked as device_check.sh unpacks it, the binary starts with nothing from this
    // machine's environment.
    let unpacked = target_dir().join(PROFILE).join("unpacked-rstar");
    let text = Command::new("xz")
        .args(["-dc"])
        .arg(out.join("rstar.xz"))
        .output()
        .context("could not run xz")?;
    if !text.status.success() {
        bail!("xz -d failed: {}", String::from_utf8_lossy(&text.stderr));
    }
    std::fs::write(&unpacked, &text.stdout)?;
    make_executable(&unpacked)?;
    step(
        "the bundled rstar, unpacked, runs with an empty environment",
        Command::new(&unpacked).arg("--version").env_clear(),
    )?;
    eprintln!("==> gpu-bundle: {} ({})", out.display(), mib(sizes.1));
    Ok(())
}

/// Builds `rstar` (flex, the policy bench among its subcommands, and `features`) in the bundle's
/// profile. With `tch`: against the LibTorch `LIBTORCH` names, its version check bypassed, its
/// CUDA libraries left to the loader.
fn build_rstar(features: &str) -> Result<()> {
    let mut command = cargo();
    command.args([
        "rustc",
        "--profile",
        PROFILE,
        "-p",
        "rstar-cli",
        "--bin",
        "rstar",
        "--features",
        features,
    ]);
    if features.split(',').any(|f| f == "tch") {
        command
            .env("LIBTORCH_BYPASS_VERSION_CHECK", "1")
            .env("LIBTORCH_CXX11_ABI", "1")
            .args(["--", "-C", "link-arg=-Wl,--allow-shlib-undefined"]);
    }
    step(
        &format!("build rstar for the GPU bundle (profile {PROFILE}, features flex,{features})"),
        &mut command,
    )
}

/// `from` compressed with xz (preset 6, both cores) into `to`.
fn xz(from: &Path, to: &Path) -> Result<()> {
    let file = std::fs::File::create(to).with_context(|| format!("creating {}", to.display()))?;
    step(
        &format!("xz {}", from.display()),
        Command::new("xz")
            .args(["-6", "-T2", "-c"])
            .arg(from)
            .stdout(file),
    )
}

fn make_executable(path: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// A line per file (`bytes  MiB  name`) and the total.
fn sizes(dir: &Path) -> Result<(String, u64)> {
    let mut entries: Vec<(String, u64)> = std::fs::read_dir(dir)?
        .map(|e| {
            let e = e?;
            Ok((
                e.file_name().to_string_lossy().into_owned(),
                e.metadata()?.len(),
            ))
        })
        .collect::<Result<_>>()?;
    entries.retain(|(name, _)| name != "SIZES");
    entries.sort();
    let total: u64 = entries.iter().map(|e| e.1).sum();
    let mut text = String::new();
    for (name, bytes) in &entries {
        text.push_str(&format!("{bytes:>12}  {:>10}  {name}\n", mib(*bytes)));
    }
    text.push_str(&format!("{total:>12}  {:>10}  total\n", mib(total)));
    Ok((text, total))
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
}

fn check_size(total: u64) -> Result<()> {
    if total >= LIMIT_BYTES {
        bail!(
            "the GPU bundle is {}, over its {} (at most 64 MiB travel with a run)",
            mib(total),
            mib(LIMIT_BYTES)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_at_the_limit_is_refused() {
        assert!(check_size(LIMIT_BYTES - 1).is_ok());
        let err = check_size(LIMIT_BYTES).unwrap_err().to_string();
        assert!(err.contains("60.0 MiB"), "{err}");
    }

    #[test]
    fn sizes_list_each_file_and_the_total() {
        let dir = std::env::temp_dir().join(format!("gpu-bundle-sizes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b"), vec![0u8; 3 << 20]).unwrap();
        std::fs::write(dir.join("a"), b"12").unwrap();
        std::fs::write(dir.join("SIZES"), b"old").unwrap();
        let (text, total) = sizes(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(total, (3 << 20) + 2);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].ends_with("  a") && lines[1].ends_with("3.0 MiB  b"),
            "{text}"
        );
        assert!(lines[2].ends_with("3.0 MiB  total"), "{text}");
    }
}
