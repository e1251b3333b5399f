//! `--backend`: the Burn device every model-running subcommand (`train`, `eval`, `serve`) runs
//! on. The backend is chosen here, at the binary's edge; the libraries enable none.

use anyhow::bail;
use burn::tensor::Device;

/// The `--backend` help text shared by the subcommands.
pub const HELP: &str =
    "The Burn backend: `flex` (CPU), `wgpu` or `cuda` (each needs a build with its feature)";

/// The Burn device of `--backend`.
///
/// # Errors
/// An unknown name, or a backend whose feature this build lacks (naming the rebuild command).
pub fn device_of(backend: &str) -> anyhow::Result<Device> {
    match backend {
        "flex" => flex_device(),
        "wgpu" => wgpu_device(),
        "cuda" => cuda_device(),
        other => bail!("--backend is `{other}`, expected `flex`, `wgpu` or `cuda`"),
    }
}

fn missing(name: &str) -> anyhow::Result<Device> {
    bail!(
        "--backend {name}: this rstar was built without the `{name}` feature (rebuild with `cargo build --release -p rstar-cli --features {name}`)"
    )
}

#[cfg(feature = "flex")]
fn flex_device() -> anyhow::Result<Device> {
    Ok(Device::flex())
}

#[cfg(not(feature = "flex"))]
fn flex_device() -> anyhow::Result<Device> {
    missing("flex")
}

#[cfg(feature = "wgpu")]
fn wgpu_device() -> anyhow::Result<Device> {
    Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice))
}

#[cfg(not(feature = "wgpu"))]
fn wgpu_device() -> anyhow::Result<Device> {
    missing("wgpu")
}

#[cfg(feature = "cuda")]
fn cuda_device() -> anyhow::Result<Device> {
    Ok(Device::cuda(0))
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> anyhow::Result<Device> {
    missing("cuda")
}
