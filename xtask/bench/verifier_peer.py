"""The math-verify side of `cargo xtask bench verifier` (HuggingFace `math-verify`, PyPI).

Modes (each reads JSONL lines with "response" and "answer"):
  throughput FILE RUNS  time parse+verify over every line, RUNS times, in this one thread;
                        prints {"n": N, "seconds": [...]} as JSON
  process FILE          the whole-process peer of `rstar verify`: reads FILE, writes one
                        JSON verdict a line on stdout
  agree FILE            one line "0" or "1" per input line (a process pool; order kept)

The ground truth is parsed as `$gt$`; the response with math-verify's default
extraction (LaTeX and plain expressions), as rStar2's reward does.
"""

import json
import sys
import time


def load(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def score(row):
    from math_verify import parse, verify

    try:
        gold = parse("$" + str(row["answer"]) + "$")
        pred = parse(row["response"])
        return 1 if verify(gold, pred) else 0
    except Exception:  # math-verify raises on some inputs; that is a 0
        return 0


def main():
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "throughput":
        rows = load(path)
        runs = int(sys.argv[3])
        score(rows[0])  # import and warm up outside the timed runs
        secs = []
        for _ in range(runs):
            t = time.perf_counter()
            for row in rows:
                score(row)
            secs.append(time.perf_counter() - t)
        print(json.dumps({"n": len(rows), "seconds": secs}))
    elif mode == "process":
        out = sys.stdout
        for i, row in enumerate(load(path)):
            r = score(row)
            out.write(json.dumps({"line": i + 1, "reward": r}) + "\n")
    elif mode == "agree":
        import multiprocessing

        rows = load(path)
        with multiprocessing.Pool() as pool:
            for r in pool.imap(score, rows, chunksize=64):
                sys.stdout.write(f"{r}\n")
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
