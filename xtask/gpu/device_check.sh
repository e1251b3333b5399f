#!/usr/bin/env bash
# GPU checks from prebuilt release binaries, for a machine with an NVIDIA GPU and no Rust
# toolchain (docs/policy.md, "GPU"). Each step has its own time limit inside one overall
# budget; logs go to /tmp/gpu-work, a summary line per step to its summary.txt.
#
#   BIN: a folder with `rstar` and `random_hf_model` (built with `--features wgpu`), `policy_bench`
#        (cargo bench -p rstar-policy --bench policy --features flex,wgpu --no-run),
#        `policy_tests` (cargo test --release -p rstar-policy --features flex,wgpu --tests
#        --no-run), a Qwen3 `tokenizer.json`, a few lines of a dataset as `data.jsonl` and
#        `hf-smoke.json`: the smoke preset's config with `init` /tmp/qwen3-0.6b-random,
#        `data` BIN/data.jsonl and `eval.max_response_tokens` 256.
#   usage: OUT=DIR BUDGET=SECONDS [SKIP="step names"] xtask/gpu/device_check.sh BIN
# Everything but checkpoints and model weights ends up in $OUT/gpu-logs.tgz.
set -u
BIN=${1:?usage: device_check.sh BIN}
OUT=${OUT:-./gpu-out}
WORK=/tmp/gpu-work
mkdir -p "$OUT" "$WORK"
export RSTAR_PYTHON=${RSTAR_PYTHON:-python3}
DEADLINE=$(($(date +%s) + ${BUDGET:-500}))

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
    tail -n 12 "$WORK/$name.log"
    return $rc
}

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$WORK/gpu.txt"
for icd in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json; do
    if [ -f "$icd" ]; then
        export VK_DRIVER_FILES=$icd
        break
    fi
done
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-unset}" | tee -a "$WORK/gpu.txt"

# 1. The policy's wgpu-vs-flex parity test (the qwen3_tiny fixture).
step policy_wgpu_test 120 "$BIN/policy_tests" wgpu --test-threads 1

# 2. The smoke preset end to end on flex (this machine's CPUs) and on wgpu (the GPU).
for backend in flex wgpu; do
    step "smoke_$backend" 90 "$BIN/rstar" train --preset smoke --seed 3 --backend "$backend" \
        --out "$WORK/smoke-$backend"
done
python3 - "$WORK" <<'EOF' | tee -a "$WORK/summary.txt"
import json, sys
out = sys.argv[1]
try:
    first = [json.loads(open(f"{out}/smoke-{b}/sft_metrics.jsonl").readline())["loss"] for b in ("flex", "wgpu")]
    print(f"== smoke first SFT loss: flex {first[0]:.6f}, wgpu {first[1]:.6f}, |diff| {abs(first[0] - first[1]):.2e}")
except Exception as e:  # a failed run above already says why
    print(f"== smoke first SFT loss: not compared ({e})")
EOF

# 3. rstar-policy on wgpu against PyTorch on CUDA, same weights, Qwen3-0.6B's shape.
RSTAR_BENCH_BACKEND=wgpu RSTAR_BENCH_SHAPE=qwen3-0.6b RSTAR_BENCH_REPS=3 \
    step bench_qwen3_0_6b 150 "$BIN/policy_bench" --bench

# 4. `rstar train --model DIR --data FILE --backend wgpu` on a random Qwen3-0.6B-shaped model
#    with the real Qwen3 tokenizer: the smoke preset, evaluations capped at 256 tokens.
step random_model 90 "$BIN/random_hf_model" /tmp/qwen3-0.6b-random "$BIN/tokenizer.json" --shape qwen3-0.6b
step hf_0_6b_wgpu 200 "$BIN/rstar" train --config "$BIN/hf-smoke.json" --backend wgpu --python "$RSTAR_PYTHON" \
    --out "$WORK/hf-0.6b"

# 5. The embedded-default model's workloads on wgpu against PyTorch on CUDA.
RSTAR_BENCH_BACKEND=wgpu RSTAR_BENCH_SHAPE=tiny step bench_tiny 60 "$BIN/policy_bench" --bench
tar czf "$OUT/gpu-logs.tgz" --exclude=checkpoints -C "$WORK" .
cat "$WORK/summary.txt"
