"""Peer of `cargo xtask bench roc`: the reference RoC down-sampling rule written in plain Python
(`re`, `round`, stable `sort`), as microsoft/rStar's `rstar2_agent/down_sample/roc.py` computes it, without
numpy/torch. Reads JSONL rollouts (`uid`, `reward`, `response`) from argv[1], runs the whole pass (parse,
penalties, selection) `reps` times, and prints JSON: the median seconds and the kept row indices.
Usage: python roc_peer.py ROLLOUTS.jsonl REPS KEEP MIN_ZERO MIN_NON_ZERO"""
import json, re, statistics, sys, time

TOOL = re.compile(r"<tool_response>.*?</tool_response>", re.DOTALL)
ANSWER = re.compile(r"<answer>.*?</answer>", re.DOTALL)
TURN = re.compile(r"<\|im_start\|>assistant.*?<\|im_end\|>", re.DOTALL)


def p_err(text):
    blocks = TOOL.findall(text)
    if not blocks:
        return 0.5
    return sum(1 for b in blocks if "error" in b.lower()) / len(blocks)


def p_format(text):
    if "<answer>" not in text or "</answer>" not in text:
        return 1.0
    closed = len(ANSWER.findall(text))
    if text.count("<answer>") != closed or text.count("</answer>") != closed:
        return 1.0
    turns = len(TURN.findall(text))
    if turns == 0:
        return 1.0
    return min((closed - 1) / turns, 1.0)


def select(lines, keep, min_zero, min_non_zero):
    rows = [json.loads(l) for l in lines if l.strip()]
    penalty = [0.0 + p_err(r["response"]) + p_format(r["response"]) for r in rows]
    groups = {}
    for i, r in enumerate(rows):
        groups.setdefault(r["uid"], []).append(i)
    kept = []
    for idx in groups.values():
        if len(idx) < keep:
            continue
        if len(idx) == keep:
            kept += idx
            continue
        neg = [(i, penalty[i]) for i in idx if rows[i]["reward"] <= 0]
        pos = [(i, penalty[i]) for i in idx if rows[i]["reward"] > 0]
        pos.sort(key=lambda x: x[1])
        k_neg = round(len(neg) * keep / len(idx))
        k_pos = round(len(pos) * keep / len(idx))
        if k_neg < min_zero and k_pos < min_non_zero:
            kept += idx
            continue
        if k_neg <= min(min_zero, len(neg)):
            k_neg = min(min_zero, len(neg))
            k_pos = keep - k_neg
        if k_pos <= min(min_non_zero, len(pos)):
            k_pos = min(min_non_zero, len(pos))
            k_neg = keep - k_pos
        kept += [i for i, _ in pos[:k_pos]] + [i for i, _ in neg[:k_neg]]
    return sorted(kept)


def main():
    path, reps, keep, min_zero, min_non_zero = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
    lines = open(path, encoding="utf-8").read().splitlines()
    times, kept = [], None
    for _ in range(reps):
        t = time.perf_counter()
        kept = select(lines, keep, min_zero, min_non_zero)
        times.append(time.perf_counter() - t)
    print(json.dumps({"median_s": statistics.median(times), "kept": kept}))


if __name__ == "__main__":
    main()
