"""PyTorch peer for `cargo xtask bench policy`.

Builds the same Qwen2/Qwen3 decoder by hand in PyTorch (RMSNorm, rotate-half
RoPE, grouped-query attention, q/k norm or q/k/v bias, SwiGLU, tied
embeddings) from a checkpoint directory written by `rstar_policy::save_dir`
(HF config.json + model.safetensors), then times the same workloads as the
Rust side and prints one JSON object on stdout.

usage: policy_peer.py MODEL_DIR SPEC_JSON
SPEC_JSON: {"threads", "reps", "prefill": [b, t], "decode": [b, prompt, steps],
            "train": [b, t], "check_ids": [...], "device": "cpu" | "cuda",
            "precision": "f32" | "bf16"}

With "precision": "bf16" every workload and the check run under `torch.autocast` to bf16 over
the f32 weights (mixed precision as training uses it). On CUDA each workload's peak memory
(`torch.cuda.max_memory_reserved`, what the caching allocator held, in MiB above the level
before it) is reported as `<workload>_peak_mib`.

With "device": "cuda" the model and every workload run on the GPU (f32, TF32 off), timed
with a synchronisation before each clock read, once rather than per thread count. The
same-weights check sends every position's logits, or only the last position's when that
would be more than a million values.

Each workload runs with 1 thread and with `threads` threads and reports the
faster: on a loaded machine PyTorch's OpenMP pool can be many times slower with
more threads than cores are free, and the peer should not lose by that.
"""

import json
import math
import struct
import sys
import time

import torch


def load_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", f"{name}: peer reads f32 only"
        start, end = info["data_offsets"]
        t = torch.frombuffer(bytearray(raw[base + start : base + end]), dtype=torch.float32)
        out[name] = t.reshape(info["shape"]).clone()
    return out


class Qwen(torch.nn.Module):
    def __init__(self, cfg, w):
        super().__init__()
        self.cfg = cfg
        self.w = torch.nn.ParameterDict({k.replace(".", "_"): torch.nn.Parameter(v) for k, v in w.items()})
        self.h = cfg["num_attention_heads"]
        self.kvh = cfg["num_key_value_heads"]
        self.hd = cfg["head_dim"]
        self.eps = cfg["rms_norm_eps"]
        self.layers = cfg["num_hidden_layers"]
        self.qk_norm = cfg["model_type"] == "qwen3"
        half = self.hd // 2
        theta = cfg["rope_theta"]
        inv_freq = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float64) * 2 / self.hd)).float()
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def p(self, name):
        return self.w[name.replace(".", "_")]

    def rms(self, x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, x, pos):
        ang = pos[:, None].float() * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], -1)
        cos, sin = ang.cos()[None, None], ang.sin()[None, None]
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def forward(self, ids, cache=None):
        b, t = ids.shape
        past = 0 if cache is None or cache[0] is None else cache[0][0].shape[2]
        pos = torch.arange(past, past + t, device=ids.device)
        x = self.p("model.embed_tokens.weight")[ids]
        g = self.h // self.kvh
        mask = None
        if t > 1:
            mask = torch.full((t, past + t), float("-inf"), device=ids.device).triu(past + 1)
        for l in range(self.layers):
            pre = f"model.layers.{l}."
            hs = self.rms(x, self.p(pre + "input_layernorm.weight"))

            def proj(name, heads):
                y = hs @ self.p(pre + f"self_attn.{name}.weight").T
                bias = pre + f"self_attn.{name}.bias"
                if bias.replace(".", "_") in self.w:
                    y = y + self.p(bias)
                return y.view(b, t, heads, self.hd)

            q, k, v = proj("q_proj", self.h), proj("k_proj", self.kvh), proj("v_proj", self.kvh)
            if self.qk_norm:
                q = self.rms(q, self.p(pre + "self_attn.q_norm.weight"))
                k = self.rms(k, self.p(pre + "self_attn.k_norm.weight"))
            q = self.rope(q.transpose(1, 2), pos)
            k = self.rope(k.transpose(1, 2), pos)
            v = v.transpose(1, 2)
            if cache is not None:
                if cache[l] is not None:
                    k = torch.cat([cache[l][0], k], 2)
                    v = torch.cat([cache[l][1], v], 2)
                cache[l] = (k, v)
            k = k.repeat_interleave(g, 1)
            v = v.repeat_interleave(g, 1)
            s = (q @ k.transpose(2, 3)) / math.sqrt(self.hd)
            if mask is not None:
                s = s + mask
            o = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, self.h * self.hd)
            x = x + o @ self.p(pre + "self_attn.o_proj.weight").T
            hs = self.rms(x, self.p(pre + "post_attention_layernorm.weight"))
            gate = torch.nn.functional.silu(hs @ self.p(pre + "mlp.gate_proj.weight").T)
            up = hs @ self.p(pre + "mlp.up_proj.weight").T
            x = x + (gate * up) @ self.p(pre + "mlp.down_proj.weight").T
        x = self.rms(x, self.p("model.norm.weight"))
        head = self.p("lm_head.weight") if "lm_head_weight" in self.w else self.p("model.embed_tokens.weight")
        return x @ head.T


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def median_time(fn, reps):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def autocast(spec, device):
    """bf16 autocast for "precision": "bf16", else nothing."""
    return torch.autocast(
        device_type=device, dtype=torch.bfloat16, enabled=spec.get("precision", "f32") == "bf16"
    )


def reset_peak(device):
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        return torch.cuda.memory_reserved()
    return 0


def peak_mib(device, base):
    if device == "cuda":
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_reserved() - base) / 2**20
    return None


def run(model, cfg, spec, threads, device):
    with autocast(spec, device):
        return run_workloads(model, cfg, spec, threads, device)


def run_workloads(model, cfg, spec, threads, device):
    torch.set_num_threads(threads)
    vocab = cfg["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    reps = spec["reps"]
    out = {}
    with torch.no_grad():
        b, t = spec["prefill"]
        ids = torch.randint(0, vocab, (b, t), generator=gen).to(device)
        base = reset_peak(device)
        out["prefill_s"] = median_time(lambda: model(ids), reps)
        out["prefill_peak_mib"] = peak_mib(device, base)

        b, p, steps = spec["decode"]
        prompt = torch.randint(0, vocab, (b, p), generator=gen).to(device)

        def decode():
            cache = [None] * cfg["num_hidden_layers"]
            logits = model(prompt, cache)[:, -1]
            sync()
            start = time.perf_counter()
            for _ in range(steps):
                nxt = logits.argmax(-1, keepdim=True)
                logits = model(nxt, cache)[:, -1]
                # The host round trip sampling needs (a copy to host memory on CUDA, as
                # the Rust side reads its logits back).
                logits.cpu() if logits.is_cuda else logits.tolist()
            decode.elapsed = time.perf_counter() - start

        times = []
        base = reset_peak(device)
        decode()
        for _ in range(reps):
            decode()
            times.append(decode.elapsed)
        times.sort()
        out["decode_s"] = times[len(times) // 2]
        out["decode_peak_mib"] = peak_mib(device, base)

    b, t = spec["train"]
    ids = torch.randint(0, vocab, (b, t), generator=gen).to(device)
    mask = torch.ones(b, t - 1, device=device)

    def train_step():
        model.zero_grad(set_to_none=True)
        logits = model(ids[:, :-1])
        logp = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        loss = -(logp * mask).sum() / mask.sum()
        loss.backward()
        return loss.item()

    base = reset_peak(device)
    out["train_s"] = median_time(train_step, reps)
    out["train_peak_mib"] = peak_mib(device, base)
    return out


def main():
    model_dir, spec = sys.argv[1], json.loads(sys.argv[2])
    cfg = json.load(open(f"{model_dir}/config.json"))
    device = spec.get("device", "cpu")
    if device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("torch sees no CUDA device")
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = Qwen(cfg, load_safetensors(f"{model_dir}/model.safetensors")).to(device)
    out = {"torch": torch.__version__, "device": device}
    if device == "cpu" and hasattr(torch.backends.cpu, "get_cpu_capability"):
        # The instruction set ATen's CPU kernels dispatch to (AVX512, AVX2, ...; capped by
        # ATEN_CPU_CAPABILITY): the bench's header names it beside our kernels' level.
        out["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    with torch.no_grad(), autocast(spec, device):
        ids = torch.tensor([spec["check_ids"]], device=device)
        logits = model(ids)[0].float()
        if logits.numel() > 1_000_000:
            logits = logits[-1]
        out["check_logits"] = logits.flatten().tolist()
    thread_counts = [1] if device == "cuda" else sorted({1, spec["threads"]})
    for threads in thread_counts:
        res = run(model, cfg, spec, threads, device)
        for key, value in res.items():
            if key.endswith("_peak_mib"):
                out[key] = value
            elif key not in out or value < out[key]:
                out[key] = value
                out[key.replace("_s", "_threads")] = threads
    print(json.dumps(out))


if __name__ == "__main__":
    main()
