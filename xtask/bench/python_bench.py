"""`cargo xtask bench python`: `rstar_agent.score` (the wheel, from Python) against HF math-verify
on the same inputs in one run: MATH-500's ground truths with model-like answers.

Prints the medians (answers per second) single-threaded and on every CPU, their ratio, and the
agreement of both with the verdict each case was written to get. math-verify is run as
`verifier_peer.py` runs it (`parse("$gt$")`, `parse(response)`, `verify`), one process for one
thread and a process pool for all CPUs (its timeouts use SIGALRM, so threads cannot share it).

Usage: python_bench.py MATH500_JSONL [RUNS]
"""

import json
import multiprocessing
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rstar_agent  # noqa: E402
from verifier_peer import score as math_verify_score  # noqa: E402


def styles(answer):
    """(response, intended reward) pairs for one ground truth, written as models write."""
    return [
        (f"The final answer is $\\boxed{{{answer}}}$.", 1),
        (f"<answer>Therefore \\boxed{{ {answer} }}.</answer>", 1),
        (f"So we get $x = \\boxed{{{answer}}}$ and we are done.", 1),
        (f"\\fbox{{{answer}}}", 1),
        ("Thus the answer is $\\boxed{0.3333}$.", 0),
        (f"The answer is $\\boxed{{{answer} + 1}}$.", 0),
    ]


def cases(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                a = json.loads(line)["answer"]
                rows += [(r, a, want) for r, want in styles(a)]
    return rows


def median_rate(n, fn, runs):
    secs = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t)
    return n / statistics.median(secs)


def peer_row(pair):
    return math_verify_score({"response": pair[0], "answer": pair[1]})


def main():
    path = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    rows = cases(path)
    responses = [r for r, _, _ in rows]
    truths = [a for _, a, _ in rows]
    pairs = list(zip(responses, truths))
    n = len(rows)
    cpus = os.cpu_count() or 1

    ours_1 = median_rate(n, lambda: rstar_agent.score(responses, truths, threads=1), 21)
    ours_all = median_rate(n, lambda: rstar_agent.score(responses, truths), 21)

    def four_python_threads():
        # What a trainer with several reward workers in one process does: 4 Python threads,
        # each scoring a quarter on its own thread (the GIL is released while each scores).
        q = (n + 3) // 4
        workers = [
            threading.Thread(
                target=rstar_agent.score,
                args=(responses[k * q : (k + 1) * q], truths[k * q : (k + 1) * q]),
                kwargs={"threads": 1},
            )
            for k in range(4)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()

    ours_py4 = median_rate(n, four_python_threads, 21)

    peer_row(pairs[0])  # import and warm up outside the timed runs
    peer_1 = median_rate(n, lambda: [peer_row(p) for p in pairs], max(1, runs // 2))
    with multiprocessing.Pool(cpus) as pool:
        pool.map(peer_row, pairs[: cpus * 4])  # warm every worker up
        peer_all = median_rate(n, lambda: pool.map(peer_row, pairs, chunksize=64), runs)
        theirs = pool.map(peer_row, pairs, chunksize=64)

    ours = rstar_agent.score(responses, truths)
    intended = [w for _, _, w in rows]
    agree = sum(1 for a, b in zip(ours, theirs) if a == b)
    ours_ok = sum(1 for a, w in zip(ours, intended) if a == w)
    theirs_ok = sum(1 for a, w in zip(theirs, intended) if a == w)

    print(f"rstar_agent {rstar_agent.__version__} vs math-verify, {n} MATH-500 cases, {cpus} CPUs")
    print()
    print("| answers/s (median) | rstar_agent.score | math-verify | ratio |")
    print("|---|---|---|---|")
    print(f"| 1 thread | {ours_1:,.0f} | {peer_1:,.0f} | {ours_1 / peer_1:,.0f}x |")
    print(
        f"| all {cpus} CPUs (rayon; math-verify: a process pool) | {ours_all:,.0f} | {peer_all:,.0f} | {ours_all / peer_all:,.0f}x |"
    )
    print(f"| 4 Python threads, `score(threads=1)` each | {ours_py4:,.0f} | | |")
    print()
    print(
        f"Agreement with math-verify {100 * agree / n:.2f}%; intended verdict: rstar_agent "
        f"{ours_ok}/{n} ({100 * ours_ok / n:.2f}%), math-verify {theirs_ok}/{n} ({100 * theirs_ok / n:.2f}%)."
    )


if __name__ == "__main__":
    main()
