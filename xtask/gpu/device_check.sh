#!/usr/bin/env bash
# Every GPU measurement of issues #22 and #67 in one go (docs/benchmarks.md, "policy-gpu"), from
# the folder `cargo xtask gpu-bundle` builds, on a machine with an NVIDIA GPU and no Rust
# toolchain; at most 8 minutes of commands (BUDGET, default 480 s). Each step has its own time
# limit inside the budget, the most important steps first, and its summary line is written the
# moment it ends (a machine taken back mid-run keeps what finished). Logs go to $WORK (default
# /tmp/gpu-work), one line per step to its summary.txt; everything but checkpoints ends up in
# $OUT/gpu-logs.tgz, and the CubeCL autotune cache in $OUT/cubecl-cache.tgz.
#
#   BUNDLE (from `cargo xtask gpu-bundle`): rstar.xz (wgpu with fusion and autotune; unpacked
#   into $WORK/bin first; its `rstar bench policy` is the bench), policy_peer.py, this script;
#   optionally rstar_tch (built against the machine's torch, whose libtorch is found through the
#   peer Python's torch/lib) and rstar_cuda (CubeCL CUDA: its build downloads LLVM from
#   github.com, which the development machine cannot reach). A step whose binary is missing is
#   skipped with a line saying so.
#
#   usage: OUT=DIR [BUDGET=SECONDS] [SKIP="step names"] [RSTAR_PYTHON=python-with-cuda-torch]
#          device_check.sh [--dry-run] BUNDLE
#   --dry-run: every step on the CPU (flex, the tiny shape, one repetition), within the same
#   limits, on a machine without a GPU: checks the script and the bundle before a GPU is lent.
set -u
DRY=0
if [ "${1:-}" = --dry-run ]; then
    DRY=1
    shift
fi
BIN=$(cd "${1:?usage: device_check.sh [--dry-run] BUNDLE}" && pwd)
mkdir -p "${OUT:-./gpu-out}"
OUT=$(cd "${OUT:-./gpu-out}" && pwd)
WORK=${WORK:-/tmp/gpu-work}
mkdir -p "$WORK"
rm -f "$WORK/summary.txt"
export RSTAR_PYTHON=${RSTAR_PYTHON:-python3}
BUDGET=${BUDGET:-480}
DEADLINE=$(($(date +%s) + BUDGET))

# CubeCL's autotune results persist in the environment directory cubecl.toml names (read from
# the working directory): the second run of a shape reuses them instead of tuning again.
export CUBECL_CACHE=${CUBECL_CACHE:-$WORK/cubecl-cache}
mkdir -p "$CUBECL_CACHE"
printf '[autotune]\nlevel = "balanced"\n\n[environment]\npath = { directory = "%s" }\n' \
    "$CUBECL_CACHE" >"$WORK/cubecl.toml"
cd "$WORK" || exit 1

note() { echo "$*" | tee -a "$WORK/summary.txt"; }

# Runs a step under min(limit, time left); its output goes to $WORK/NAME.log. The binary is
# the first word after the limit: a missing one skips the step.
step() {
    local name=$1 limit=$2
    shift 2
    if [[ " ${SKIP:-} " == *" $name "* ]]; then
        note "== $name: skipped (SKIP)"
        return 0
    fi
    local exe=$1
    if [[ "$exe" == /* ]] && [ ! -x "$exe" ]; then
        note "== $name: skipped, no $exe"
        return 0
    fi
    local left=$((DEADLINE - $(date +%s)))
    if ((left < 10)); then
        note "== $name: skipped, out of time"
        return 1
    fi
    ((limit > left)) && limit=$left
    local t0 rc t1
    t0=$(date +%s%N)
    timeout "$limit" "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    t1=$(date +%s%N)
    note "== $name: rc $rc, $(((t1 - t0) / 1000000)) ms (limit ${limit}s)"
    tail -n 14 "$WORK/$name.log" | tee -a "$WORK/summary.txt"
    return $rc
}

# A bench run: NAME LIMIT BINARY BACKEND PRECISION [more `rstar bench policy` flags]; Qwen3-0.6B's
# shape, median of $REPS (3). A dry run takes flex, the tiny shape and one repetition.
bench() {
    local name=$1 limit=$2 binary=$BIN/$3 backend=$4 precision=$5 shape=qwen3-0.6b
    shift 5
    local reps=${REPS:-3}
    if ((DRY)); then
        backend=flex
        shape=tiny
        reps=1
    fi
    step "$name" "$limit" "$binary" bench policy --backend "$backend" --precision "$precision" \
        --shape "$shape" --reps "$reps" --peer "$BIN/policy_peer.py" "$@"
}

# The bundle's binaries travel compressed: unpack them next to the logs (xz, else Python's lzma).
mkdir -p "$WORK/bin"
for packed in "$BIN"/*.xz; do
    [ -e "$packed" ] || continue
    name=$(basename "$packed" .xz)
    if command -v xz >/dev/null; then
        xz -dc "$packed" >"$WORK/bin/$name"
    else
        "$RSTAR_PYTHON" -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$packed" "$WORK/bin/$name"
    fi
    chmod +x "$WORK/bin/$name"
done
for exe in "$BIN"/*; do
    [ -x "$exe" ] && [ -f "$exe" ] && [[ "$exe" != *.sh ]] && cp "$exe" "$WORK/bin/"
done
cp "$BIN/policy_peer.py" "$WORK/bin/"
BIN=$WORK/bin

if ((DRY)); then
    note "dry run: every step on the CPU (flex, tiny shape, 1 repetition), budget ${BUDGET}s"
else
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$WORK/gpu.txt"
    for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
        if [ -f "$icd" ]; then
            export VK_DRIVER_FILES=$icd
            break
        fi
    done
    echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}" | tee -a "$WORK/gpu.txt"
fi
# burn-tch loads the libtorch of the peer's torch wheel (found without importing torch).
TORCH_LIB=$("$RSTAR_PYTHON" -c 'import importlib.util, os; s = importlib.util.find_spec("torch"); print(os.path.join(s.submodule_search_locations[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=${TORCH_LIB:+$TORCH_LIB:}${LD_LIBRARY_PATH:-}
"$BIN/rstar" --version | tee -a "$WORK/summary.txt"
"$RSTAR_PYTHON" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$WORK/summary.txt"

# 1. Each backend at Qwen3-0.6B's shape, f32, against PyTorch eager on CUDA: prefill, decode,
#    the training step (fwd+bwd through sequence_nll) and peak memory, each after the
#    same-weights check. wgpu first (the bundle always has it); the first run tunes into the
#    cache, the rerun must not tune again (compare the wall times and the cache's size).
bench wgpu_f32 120 rstar wgpu f32
du -sh "$CUBECL_CACHE" | sed 's/^/== cubecl cache after wgpu_f32: /' | tee -a "$WORK/summary.txt"
REPS=1 bench wgpu_f32_rerun 60 rstar wgpu f32
bench tch_f32 45 rstar_tch tch f32
bench cuda_f32 90 rstar_cuda cuda f32

# 2. bf16 compute over f32 master weights, each backend (the peer under torch.autocast).
bench wgpu_bf16 60 rstar wgpu bf16
bench tch_bf16 30 rstar_tch tch bf16
bench cuda_bf16 45 rstar_cuda cuda bf16

# 3. Memory does not grow with the vocabulary: the training step at batch 8 x 1024 on wgpu,
#    Qwen3's 151 936-token vocabulary against 32 768 (the fused loss holds no
#    [batch, seq, vocab] tensor: the difference should be about the head's weights and
#    gradients, not 8 x 1023 x 119 168 x 4 bytes ~ 3.9 GB). A dry run keeps the tiny shape.
train_shape=8x1024
((DRY)) && train_shape=4x64
REPS=1 bench train_v151936 40 rstar wgpu f32 --train "$train_shape"
REPS=1 bench train_v32768 40 rstar wgpu f32 --train "$train_shape" --vocab 32768

tar czf "$OUT/gpu-logs.tgz" --exclude=checkpoints --exclude=cubecl-cache -C "$WORK" .
tar czf "$OUT/cubecl-cache.tgz" -C "$CUBECL_CACHE" .
note "== done: $(($(date +%s) - DEADLINE + BUDGET)) s of ${BUDGET} s"
