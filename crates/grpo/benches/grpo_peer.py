"""Peers for `cargo xtask bench grpo`: verl's formulas (compute_grpo_outcome_advantage,
compute_policy_loss_vanilla + agg_loss token-mean) written in PyTorch as verl runs them (autograd
for the backward pass) and ported to vectorised numpy, timed on the inputs the Rust side wrote.
Prints one JSON line with medians (ms) and writes the outputs to compare."""
import json
import sys
import time

import numpy as np

d, B, T, REPS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
f32 = lambda n: np.fromfile(f"{d}/{n}.f32", dtype="<f4")
scores, groups = f32("scores"), np.fromfile(f"{d}/groups.u32", dtype="<u4")
lp, old, adv, mask = (f32(n).reshape(B, T) for n in ("log_prob", "old_log_prob", "advantages", "mask"))
LO, HI, C = 0.2, 0.28, 3.0


def advantages(scores, groups):
    _, inv, counts = np.unique(groups, return_inverse=True, return_counts=True)
    s = scores.astype(np.float64)
    mean = np.bincount(inv, s) / counts
    var = np.bincount(inv, (s - mean[inv]) ** 2) / np.maximum(counts - 1, 1)
    a = (s - mean[inv]) / (np.sqrt(var)[inv] + 1e-6)
    a[counts[inv] == 1] = 0.0  # groups of one: zero, as rstar-grpo's default
    return a.astype(np.float32)


def forward(lp, old, adv, mask):
    nk = np.clip(lp - old, -20.0, 20.0)
    r = np.exp(nk)
    l1 = -adv * r
    l2 = -adv * np.clip(r, 1 - LO, 1 + HI)
    c1 = np.maximum(l1, l2)
    l3 = -adv * C
    loss_mat = np.where(adv < 0, np.minimum(l3, c1), c1)
    m = mask != 0
    n = m.sum()
    loss = np.where(m, loss_mat, 0).sum() / n
    metrics = (((l2 > l1) & m).sum() / n, ((c1 > l3) & (adv < 0) & m).sum() / n, np.where(m, -nk, 0).sum() / n)
    return loss, metrics, (r, l1, l2, c1, l3, m, n, nk)


def forward_backward(lp, old, adv, mask):
    loss, metrics, (r, l1, l2, c1, l3, m, n, nk) = forward(lp, old, adv, mask)
    # d loss / d logp = −A·r where the unclipped branch is active and dual clip does not cap.
    live = m & (l1 >= l2) & ~((adv < 0) & (c1 > l3)) & (np.abs(nk) < 20.0)
    return loss, np.where(live, -adv * r, 0.0) / n


def median_ms(fn):
    fn()  # warm-up
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), out


def torch_peer(out):
    import torch

    # One thread, like the flex backend: on a shared machine torch's spinning worker threads
    # otherwise measure the load more than the code.
    torch.set_num_threads(1)

    s, g = torch.from_numpy(scores), torch.from_numpy(groups.astype(np.int64))
    tlp, told, tadv, tmask = (torch.from_numpy(x) for x in (lp, old, adv, mask))

    def advantages_torch():
        # verl's compute_grpo_outcome_advantage: a Python loop over groups of torch scalars.
        id2score = {}
        for i in range(len(s)):
            id2score.setdefault(int(g[i]), []).append(s[i])
        stats = {}
        for k, v in id2score.items():
            if len(v) == 1:
                stats[k] = None
            else:
                t = torch.stack(v)
                stats[k] = (torch.mean(t), torch.std(t))
        a = torch.zeros_like(s)
        for i in range(len(s)):
            st = stats[int(g[i])]
            if st is not None:
                a[i] = (s[i] - st[0]) / (st[1] + 1e-6)
        return a

    def loss_torch(backward):
        x = tlp.clone().requires_grad_(backward)
        nk = torch.clamp(x - told, min=-20.0, max=20.0)
        r = torch.exp(nk)
        l1 = -tadv * r
        l2 = -tadv * torch.clamp(r, 1 - LO, 1 + HI)
        c1 = torch.maximum(l1, l2)
        clipfrac = (torch.gt(l2, l1).float() * tmask).sum() / tmask.sum()
        l3 = -tadv * C
        c2 = torch.min(l3, c1)
        lower = (torch.gt(c1, l3) * (tadv < 0).float() * tmask).sum() / tmask.sum()
        pg = torch.where(tadv < 0, c2, c1)
        m = tmask.bool()
        loss = torch.where(m, pg, 0.0).sum() / tmask.sum()
        kl = (torch.where(m, -nk, 0.0).sum() / tmask.sum()).item()
        metrics = (clipfrac.item(), lower.item(), kl)
        if backward:
            loss.backward()
            return loss.item(), x.grad
        return loss.item(), metrics

    out["torch_adv_ms"], _ = median_ms(advantages_torch)
    out["torch_fwd_ms"], _ = median_ms(lambda: loss_torch(False))
    out["torch_fwd_bwd_ms"], (_, grad) = median_ms(lambda: loss_torch(True))
    out["torch"] = torch.__version__
    out["torch_threads"] = torch.get_num_threads()
    grad.numpy().astype("<f4").tofile(f"{d}/torch_grad.f32")


adv_ms, a = median_ms(lambda: advantages(scores, groups))
fwd_ms, (loss, _, _) = median_ms(lambda: forward(lp, old, adv, mask))
bwd_ms, (_, grad) = median_ms(lambda: forward_backward(lp, old, adv, mask))
a.tofile(f"{d}/peer_adv.f32")
grad.astype("<f4").tofile(f"{d}/peer_grad.f32")
out = {"adv_ms": adv_ms, "fwd_ms": fwd_ms, "fwd_bwd_ms": bwd_ms, "loss": float(loss), "numpy": np.__version__}
try:
    torch_peer(out)
except ImportError:
    pass  # numpy alone; `cargo xtask bench` installs torch with the bench requirements
print(json.dumps(out))
