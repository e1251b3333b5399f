"""OpenRLHF's own remote reward-model client against `rstar verify serve`.

    rstar verify serve --port 5000 &
    pip install openrlhf aiohttp      # (`--no-deps` and the few modules `openrlhf.utils.agent` imports suffice)
    python crates/python/examples/openrlhf_remote_rm.py http://127.0.0.1:5000/get_reward

Sends what OpenRLHF's single-turn executor sends for `--remote_rm_url` (the decoded prompt and
response as `query`, the prompt, the `--label_key` label) through its own HTTP code and checks
the rewards it reads back.
"""

import asyncio
import sys

from openrlhf.utils.agent import SingleTurnAgentExecutor


def main():
    url = sys.argv[1]
    executor = SingleTurnAgentExecutor(remote_rm_url=url)
    prompt = "<|im_start|>user\nWhat is 6*7? Put the answer in \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    rows = [
        (prompt + "6*7 = \\boxed{42}<|im_end|>", prompt, "42", 1.0),
        (prompt + "\\boxed{41}<|im_end|>", prompt, "42", 0.0),
        ("<|im_start|>user\nHalf?<|im_end|>\n<|im_start|>assistant\n$\\boxed{0.5}$", "", "\\frac{1}{2}", 1.0),
    ]
    for query, p, label, want in rows:
        info = asyncio.run(executor._fetch_rewards_via_http([query], [p], [label]))[0]
        print(f"label {label!r}: {info}")
        assert info["rewards"] == [want] and info["scores"] == [want], info
    # A batch, as its experience maker sends one.
    infos = asyncio.run(
        executor._fetch_rewards_via_http([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])
    )
    assert infos[0]["rewards"] == [r[3] for r in rows], infos
    print("ok: OpenRLHF's client reads rstar verify serve's rewards")


if __name__ == "__main__":
    main()
