#!/usr/bin/env bash
# Every GPU measurement of issue #22 in one go (docs/benchmarks.md, "policy-gpu"), from prebuilt
# release binaries, on a machine with an NVIDIA GPU and no Rust toolchain; sized to finish
# within ten minutes on an H200 (BUDGET, default 560 s). Each step has its own time limit inside
# the budget; the most important steps run first. Logs go to /tmp/gpu-work, one summary line per
# step to its summary.txt; everything but checkpoints and weights ends up in $OUT/gpu-logs.tgz,
# and the CubeCL autotune cache in $OUT/cubecl-cache.tgz (unpack it into $CUBECL_CACHE on the
# next machine and the CubeCL backends do not tune again).
#
#   Building the `cuda` binaries needs github.com once: CubeCL's CUDA runtime (cubecl-llvm) has
#   a build script that downloads tracel-llvm 23.1.0-4 from tracel-ai/tracel-llvm's releases into
#   ~/.local/share/tracel/ (copy that folder from a machine that has it where there is no access;
#   the development machine here reaches only crates.io, PyPI, npm and Debian, so it builds none).
#   BIN: a folder with
#     rstar                    cargo build --release -p rstar-cli --bin rstar --features wgpu,cuda,fusion,autotune
#     random_hf_model          cargo build --release -p rstar-agent --example random_hf_model --features flex
#     policy_bench             cargo bench -p rstar-policy --bench policy
#                                --features flex,wgpu,cuda,fusion,autotune --no-run (copy the binary)
#     policy_bench_tch         optional: the same with --features flex,tch, built against
#                                PyPI's torch 2.9.0 exactly (burn-tch 0.22's torch-sys checks the
#                                version and compiles C++17, which newer torch headers refuse):
#                                LIBTORCH=<site-packages>/torch LIBTORCH_CXX11_ABI=1 (or
#                                LIBTORCH_USE_PYTORCH=1 with that torch importable); at run time
#                                its libtorch is found through the peer's torch/lib
#     policy_tests             cargo test --release -p rstar-policy --features flex,wgpu --tests --no-run
#     tokenizer.json           Qwen3's tokenizer
#     data.jsonl               a few lines of a dataset
#     hf-sft.json              the smoke preset's config with `init` /tmp/qwen3-0.6b-random,
#                                `data` BIN/data.jsonl and `sft.batch_size` 8
#   usage: OUT=DIR [BUDGET=SECONDS] [SKIP="step names"] [RSTAR_PYTHON=python-with-cuda-torch]
#          xtask/gpu/device_check.sh BIN
set -u
BIN=$(cd "${1:?usage: device_check.sh BIN}" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "${OUT:-./gpu-out}"
OUT=$(cd "${OUT:-./gpu-out}" && pwd)
WORK=/tmp/gpu-work
mkdir -p "$WORK"
export RSTAR_PYTHON=${RSTAR_PYTHON:-python3}
export RSTAR_BENCH_PEER=$ROOT/xtask/bench/policy_peer.py
DEADLINE=$(($(date +%s) + ${BUDGET:-560}))

# CubeCL's autotune results persist in the environment directory cubecl.toml names (read from
# the working directory): the second run of a shape reuses them instead of tuning again.
export CUBECL_CACHE=${CUBECL_CACHE:-$WORK/cubecl-cache}
mkdir -p "$CUBECL_CACHE"
printf '[autotune]\nlevel = "balanced"\n\n[environment]\npath = { directory = "%s" }\n' \
    "$CUBECL_CACHE" >"$WORK/cubecl.toml"
cd "$WORK" || exit 1

# Runs a step under min(limit, time left); its output goes to $WORK/NAME.log.
step() {
    local name=$1 limit=$2
    shift 2
    if [[ " ${SKIP:-} " == *" $name "* ]]; then
        echo "== $name: skipped (SKIP)" | tee -a "$WORK/summary.txt"
        return 0
    fi
    local left=$((DEADLINE - $(date +%s)))
    if ((left < 10)); then
        echo "== $name: skipped, out of time" | tee -a "$WORK/summary.txt"
        return 1
    fi
    ((limit > left)) && limit=$left
    local t0 rc t1
    t0=$(date +%s%N)
    timeout "$limit" "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    t1=$(date +%s%N)
    echo "== $name: rc $rc, $(((t1 - t0) / 1000000)) ms (limit ${limit}s)" | tee -a "$WORK/summary.txt"
    tail -n 14 "$WORK/$name.log"
    return $rc
}

# A bench run: NAME LIMIT BACKEND PRECISION [more env assignments]; Qwen3-0.6B's shape, median
# of $REPS (3).
bench() {
    local name=$1 limit=$2 backend=$3 precision=$4
    shift 4
    local binary=$BIN/policy_bench
    [ "$backend" = tch ] && binary=$BIN/policy_bench_tch
    if [ ! -x "$binary" ]; then
        echo "== $name: skipped, no $binary" | tee -a "$WORK/summary.txt"
        return 0
    fi
    step "$name" "$limit" env RSTAR_BENCH_BACKEND="$backend" RSTAR_BENCH_PRECISION="$precision" \
        RSTAR_BENCH_SHAPE=qwen3-0.6b RSTAR_BENCH_REPS="${REPS:-3}" "$@" "$binary" --bench
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$WORK/gpu.txt"
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
    if [ -f "$icd" ]; then
        export VK_DRIVER_FILES=$icd
        break
    fi
done
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}" | tee -a "$WORK/gpu.txt"
# burn-tch loads the libtorch of the peer's torch wheel.
TORCH_LIB=$("$RSTAR_PYTHON" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=${TORCH_LIB:+$TORCH_LIB:}${LD_LIBRARY_PATH:-}
"$RSTAR_PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$WORK/gpu.txt"

# 1. The three backends at Qwen3-0.6B's shape, f32, against PyTorch eager: prefill, decode, the
#    training step (fwd+bwd through sequence_nll) and peak memory. The first cuda run tunes
#    (cold cache); the rerun must not tune again: compare the two wall times in the summary and
#    the cache's size after each.
bench cuda_f32 150 cuda f32
du -sh "$CUBECL_CACHE" | sed 's/^/== cubecl cache after cuda_f32: /' | tee -a "$WORK/summary.txt"
bench cuda_f32_rerun 90 cuda f32 RSTAR_BENCH_REPS=1
du -sh "$CUBECL_CACHE" | sed 's/^/== cubecl cache after the rerun: /' | tee -a "$WORK/summary.txt"
bench wgpu_f32 120 wgpu f32
bench tch_f32 60 tch f32

# 2. bf16 compute over f32 master weights, each backend (the peer under torch.autocast).
bench cuda_bf16 90 cuda bf16
bench wgpu_bf16 90 wgpu bf16
bench tch_bf16 45 tch bf16

# 3. Memory does not grow with the vocabulary: the training step at batch 8 x 1024 on cuda,
#    Qwen3's 151 936-token vocabulary against 32 768. Above LOGIT_CHUNK_ELEMENTS logits the
#    fused loss holds no [batch, seq, vocab] tensor, so the difference should be about the
#    embedding's weights and gradients (a few x 1024 x 119 168 x 4 bytes), not
#    8 x 1023 x 119 168 x 4 bytes ~ 3.9 GB per logits-sized tensor.
bench train_8x1024_v151936 60 cuda f32 RSTAR_BENCH_TRAIN=8x1024 RSTAR_BENCH_REPS=1
bench train_8x1024_v32768 60 cuda f32 RSTAR_BENCH_TRAIN=8x1024 RSTAR_BENCH_REPS=1 RSTAR_BENCH_VOCAB=32768

# 4. SFT of a random Qwen3-0.6B-shaped model with the real Qwen3 tokenizer on cuda, 3 steps.
step random_model 60 "$BIN/random_hf_model" /tmp/qwen3-0.6b-random "$BIN/tokenizer.json" --shape qwen3-0.6b
step hf_0_6b_sft_cuda 120 "$BIN/rstar" train --config "$BIN/hf-sft.json" --backend cuda \
    --python "$RSTAR_PYTHON" --stop-after-sft-steps 3 --out "$WORK/hf-0.6b-sft"

# 5. The policy's wgpu-vs-flex parity test (the qwen3_tiny fixture), last: it has passed before.
step policy_wgpu_test 90 "$BIN/policy_tests" wgpu --test-threads 1

tar czf "$OUT/gpu-logs.tgz" --exclude=checkpoints --exclude=cubecl-cache -C "$WORK" .
tar czf "$OUT/cubecl-cache.tgz" -C "$CUBECL_CACHE" .
cat "$WORK/summary.txt"
