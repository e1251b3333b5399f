"""A tour of `rstar_agent` (build and install it first: `cargo xtask wheel`).

    target/venv/bin/python crates/python/examples/rewards.py

Scores a few responses in each mode, a TRL conversational batch, down-samples one group with
Resample-on-Correct, computes its advantages, and runs two calls in the sandbox.
"""

import rstar_agent as ra

pairs = [
    ("so the answer is $\\boxed{1{,}024}$", "1024"),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}"),
    ("Thus the answer is (B).", "B"),
    ("\\boxed{4200}", "42"),
    ("\\boxed{3} or \\boxed{5}", "5"),
]
for response, truth in pairs:
    v = ra.verify(response, truth)
    print(f"{response:<40} vs {truth:<10} reward {v.reward} ({v.mode}: {v.reason})")

completions = [[{"role": "assistant", "content": f"It is \\boxed{{{n}}}."}] for n in (42, 41)]
print("TRL:", ra.trl_reward(completions=completions, solution=["42", "42"]))

rewards = [1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0]
error = "<tool_response>\nTool call failure\nreason: \nstderr: NameError\n</tool_response>"
traces = [error * (i % 3) + "<answer>\\boxed{1}</answer>" for i in range(8)]
kept = ra.roc_select(rewards, traces, mode="reference", keep=4)
print("RoC keeps", kept, "penalties", [round(p[2], 3) for p in ra.roc_penalties(traces)])
print("GRPO advantages of the kept:", [round(a, 3) for a in ra.advantages([rewards[i] for i in kept])])

with ra.Sandbox(workers=1, timeout=2.0, preload=[]) as sandbox:
    for code in ("print(sum(range(10**6)))", "1 / 0"):
        r = sandbox.run(code)
        print(f"sandbox: {code!r} -> {r.outcome}: {r.text!r}")
