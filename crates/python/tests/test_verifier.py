"""The verifier from Python: agreement with `rstar verify` in every mode, the batch API from
several threads, TRL's and verl's signatures, and bad input."""

import threading
import warnings

import pytest
import rstar_agent as ra

from conftest import ROOT, read_jsonl, rstar_verify, shared_dir

MODES = ["integer", "math", "choice"]


def edge_cases():
    return read_jsonl(ROOT / "crates/verifier/tests/data/edge_cases.jsonl")


def math_styles(answer):
    """Model-like responses to one answer: right ones in several styles, and wrong ones."""
    return [
        f"The answer is $\\boxed{{{answer}}}$.",
        f"<answer>So we get \\boxed{{ {answer} }}</answer>",
        f"\\fbox{{{answer}}}",
        f"so $x = \\boxed{{{answer}}}$ and we are done",
        f"\\boxed{{{answer}}} or \\boxed{{{answer} + 1}}",
        f"The answer is {answer}.",
        "\\boxed{0.3333}",
        "\\boxed{7}",
    ]


def cases():
    """(response, ground truth) pairs: the verifier's edge cases, MATH-500 and AIME answers in
    model-like styles, and multiple-choice rows."""
    rows = [(c["response"], str(c["answer"])) for c in edge_cases()]
    for name in ("math500.jsonl", "aime24.jsonl", "hmmt_feb2025.jsonl"):
        for row in read_jsonl(shared_dir() / "datasets" / name):
            rows += [(r, row["answer"]) for r in math_styles(row["answer"])]
    for letter in "ABCDE":
        rows += [
            (f"Thus the answer is ({letter}).", letter),
            (f"\\boxed{{\\text{{({letter})}}}}", f"({letter})"),
            ("Answer: C", letter),
            ("\\boxed{A, B}", letter),
            ("no letter at all", letter),
        ]
    return rows


@pytest.fixture(scope="module")
def all_cases():
    rows = cases()
    assert len(rows) > 4000
    return rows


@pytest.mark.parametrize("mode", MODES)
def test_agrees_with_rstar_verify_in_every_mode(all_cases, mode):
    scored, skipped = rstar_verify(all_cases, mode)
    assert scored, "rstar verify scored nothing"
    # What the CLI skips (a ground truth the mode cannot score), Python refuses with ValueError.
    for i in sorted(skipped)[:200]:
        response, truth = all_cases[i]
        with pytest.raises(ValueError):
            ra.verify(response, truth, mode)
    rows = sorted(scored)
    got = ra.score([all_cases[i][0] for i in rows], [all_cases[i][1] for i in rows], mode)
    want = [scored[i] for i in rows]
    differ = [(all_cases[i], g, w) for i, g, w in zip(rows, got, want) if g != w]
    assert not differ, f"{len(differ)} disagreements, first {differ[:3]}"
    # The single-item APIs say the same.
    for i in rows[:300]:
        response, truth = all_cases[i]
        assert ra.verify(response, truth, mode).reward == scored[i]
        assert ra.compute_score("src", response, truth, mode=mode) == scored[i]


def test_auto_mode_is_each_truths_own_mode(all_cases):
    got = ra.score([r for r, _ in all_cases], [t for _, t in all_cases])
    by_mode = {m: rstar_verify(all_cases, m)[0] for m in MODES}
    for i, (response, truth) in enumerate(all_cases):
        v = ra.verify(response, truth)
        assert v.reward == got[i]
        assert by_mode[v.mode][i] == got[i], (response, truth, v)


def test_intended_verdicts_of_the_edge_cases():
    for c in edge_cases():
        assert ra.compute_score("edge", c["response"], c["answer"]) == c["intended"], c
        assert ra.score([c["response"]], [c["answer"]], mode="integer") == [c["intended"]]


def test_verdict_fields():
    v = ra.verify("<answer>so $\\boxed{1{,}024}$</answer>", 1024)
    assert (v.reward, v.reason, v.mode, v.extracted, v.normalized) == (
        1.0,
        "right",
        "integer",
        "1{,}024",
        "1024",
    )
    v = ra.verify("\\boxed{2\\sqrt{3}}", "\\sqrt{12}")
    assert (v.reward, v.mode) == (1.0, "math")
    assert ra.verify("\\boxed{4200}", "42").reason == "wrong"
    assert ra.verify("\\boxed{3} or \\boxed{5}", "5").reason == "several_answers"
    assert "Verdict(reward=1" in repr(ra.verify("\\boxed{1}", "1"))


def test_batch_from_four_threads_gives_the_same_scores(all_cases):
    responses = [r for r, _ in all_cases] * 4
    truths = [t for _, t in all_cases] * 4
    want = ra.score(responses, truths, threads=1)
    results = [None] * 4
    errors = []

    def work(k):
        try:
            results[k] = ra.score(responses, truths, threads=[None, 1, 2, 3][k])
        except BaseException as e:  # reported below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(r == want for r in results)


def test_the_batch_releases_the_gil():
    # While one thread scores a big batch on one thread, this thread keeps running Python: it
    # could not if the call held the GIL.
    n = 200_000
    responses = ["so the total is $\\boxed{2^{10}}$"] * n
    truths = ["1024"] * n
    started, done = threading.Event(), threading.Event()
    out = []

    def work():
        started.set()
        out.append(ra.score(responses, truths, threads=1))
        done.set()

    worker = threading.Thread(target=work)
    worker.start()
    started.wait()
    spins = 0
    while not done.is_set():
        spins += 1
    worker.join()
    assert out[0] == [1.0] * n
    assert spins > 10_000, f"only {spins} iterations ran beside the call"


def test_trl_reward_function():
    completions = [
        "It is \\boxed{42}.",
        [{"role": "assistant", "content": "It is \\boxed{41}."}],
        [
            {"role": "assistant", "content": "Let me compute."},
            {"role": "tool", "content": "\\boxed{99}"},
            {"role": "assistant", "content": [{"type": "text", "text": "So \\boxed{42}"}]},
        ],
        [{"role": "assistant", "content": "$\\boxed{\\frac{1}{2}}$"}],
    ]
    solution = ["42", "42", "The answer is \\boxed{42}.", "\\frac{2}{4}"]
    # TRL passes the prompts, the completion ids, the trainer state and every dataset column.
    got = ra.trl_reward(
        prompts=["p"] * 4,
        completions=completions,
        completion_ids=[[1]] * 4,
        solution=solution,
        trainer_state=None,
        level=["1"] * 4,
    )
    assert got == [1.0, 0.0, 1.0, 1.0]
    assert ra.trl_reward.__name__ == "rstar_reward"
    by_answer = ra.TrlReward(mode="integer", truth_key="answer")
    assert by_answer.__name__ == "rstar_reward_integer"
    assert by_answer(completions=completions[:2], answer=[42, 41]) == [1.0, 1.0]
    with pytest.raises(TypeError, match="answer"):
        by_answer(completions=completions[:2], solution=["42", "41"])
    with pytest.raises(TypeError):
        ra.trl_reward(completions=[[42]], solution=["42"])


def test_verl_signatures():
    assert ra.compute_score(
        data_source="openai/gsm8k",
        solution_str="#### \\boxed{72}",
        ground_truth="72",
        extra_info={"index": 3},
    ) == 1.0
    # verl's own keyword arguments (its sandbox's, its reward loop's) are accepted silently;
    # another is ignored with a warning, so a misspelt `reward_kwargs` key shows.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ra.compute_score("d", "\\boxed{1}", "1", None, sandbox_fusion_url=None) == 1.0
        assert (
            ra.compute_score(
                data_source="d",
                solution_str="\\boxed{1}",
                ground_truth="1",
                extra_info={},
                reward_router_address=None,
                reward_model_tokenizer=None,
            )
            == 1.0
        )
    with pytest.warns(UserWarning, match="mdoe"):
        assert ra.compute_score("d", "\\boxed{1}", "1", mdoe="math") == 1.0
    got = ra.compute_score_batch(
        data_sources=["a", "b"],
        solution_strs=["\\boxed{1}", "\\boxed{2}"],
        ground_truths=["1", "3"],
        extra_infos=[{}, {}],
    )
    assert got == [1.0, 0.0]


def test_bad_input_raises_and_never_crashes():
    with pytest.raises(TypeError, match=r"solutions\[1\] must be str, not int"):
        ra.score(["\\boxed{1}", 5], ["1", "1"])
    with pytest.raises(TypeError, match="not a str"):
        ra.score("\\boxed{1}", "1")
    with pytest.raises(TypeError):
        ra.score(None, ["1"])
    with pytest.raises(TypeError, match="str or int"):
        ra.score(["\\boxed{1}"], [1.0])
    with pytest.raises(TypeError):
        ra.score(["\\boxed{1}"], [True])
    with pytest.raises(TypeError):
        ra.compute_score("d", b"\\boxed{1}", "1")
    with pytest.raises(ValueError, match="NUL"):
        ra.score(["\\boxed{1}\x00"], ["1"])
    with pytest.raises(ValueError, match="NUL"):
        ra.compute_score("d", "\\boxed{1}", "1\x00")
    with pytest.raises(ValueError, match="over the limit"):
        ra.score(["9" * (ra.MAX_TEXT_BYTES + 1)], ["1"])
    with pytest.raises(ValueError, match="Unicode"):
        ra.score(["\\boxed{1}\ud800"], ["1"])
    with pytest.raises(ValueError, match="mode `exact`"):
        ra.score(["\\boxed{1}"], ["1"], mode="exact")
    with pytest.raises(ValueError, match="1 responses but 2"):
        ra.score(["\\boxed{1}"], ["1", "2"])
    with pytest.raises(ValueError, match=r"truths\[1\].*not an integer"):
        ra.score(["\\boxed{1}", "\\boxed{1}"], ["1", "1/2"], mode="integer")
    with pytest.raises(ValueError, match="threads"):
        ra.score(["\\boxed{1}"], ["1"], threads=0)
    with pytest.raises(ValueError, match="choice mode"):
        ra.verify("(A)", "seven", mode="choice")
    # Huge but legal input is scored, not refused.
    assert ra.score(["{" * 1_000_000 + "\\boxed{5}"], ["5"]) == [1.0]
    assert ra.score([], []) == []
