//! `--backend`: the Burn device every model-running subcommand (`train`, `eval`, `serve`) runs
//! on. The backend is chosen here, at the binary's edge; the libraries enable none.

use anyhow::bail;
use burn::tensor::Device;

/// The `--backend` help text shared by the subcommands.
pub const HELP: &str = "The Burn backend: `flex` (CPU), `wgpu`, `cuda`, `tch` (LibTorch on CUDA; each needs a build with its feature) or `gpu` (the GPU backend docs/benchmarks.md measured fastest; `wgpu` until measured)";

/// The backend `--backend` names: `gpu` resolved to the one it stands for, the others as given.
pub fn resolved(backend: &str) -> &str {
    match backend {
        // The fastest GPU backend measured (docs/benchmarks.md, "policy-gpu"). The comparison of
        // wgpu, cuda and tch on an H200 has not run yet, so this is wgpu, the one measured.
        "gpu" => "wgpu",
        other => other,
    }
}

/// The Burn device of `--backend`.
///
/// # Errors
/// An unknown name, or a backend whose feature this build lacks (naming the rebuild command).
pub fn device_of(backend: &str) -> anyhow::Result<Device> {
    match resolved(backend) {
        "flex" => flex_device(),
        "wgpu" => wgpu_device(),
        "cuda" => cuda_device(),
        "tch" => tch_device(),
        other => bail!(
            "--backend is `{other}`, expected `flex`, `wgpu`, `cuda`, `tch` or `gpu` (= `wgpu` until measured)"
        ),
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

#[cfg(feature = "tch")]
#[allow(
    deprecated,
    reason = "burn-tch is deprecated in Burn 0.22; kept for the GPU comparison (issue #22)"
)]
fn tch_device() -> anyhow::Result<Device> {
    Ok(Device::libtorch_cuda(0))
}

#[cfg(not(feature = "tch"))]
fn tch_device() -> anyhow::Result<Device> {
    bail!(
        "--backend tch: this rstar was built without the `tch` feature (rebuild with `LIBTORCH=<site-packages>/torch LIBTORCH_CXX11_ABI=1 cargo build --release -p rstar-cli --features tch`, against PyPI's torch 2.9.0)"
    )
}
