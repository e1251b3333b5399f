"""Resample-on-Correct from Python against rstar-roc's fixture (microsoft/rStar's own outputs,
crates/roc/tests/data/cases.json) and the paper rule's invariants."""

import json

import pytest
import rstar_agent as ra

from conftest import ROOT


@pytest.fixture(scope="module")
def cases():
    with open(ROOT / "crates/roc/tests/data/cases.json", encoding="utf-8") as f:
        return json.load(f)


def test_penalties_match_the_reference_exactly(cases):
    penalties = ra.roc_penalties([r["response"] for r in cases["rows"]], mode="reference")
    assert [p[0] for p in penalties] == cases["p_err"]
    assert [p[1] for p in penalties] == cases["p_format"]


def test_reference_rule_keeps_the_same_rows(cases):
    rows, cfg = cases["rows"], cases["config"]
    kept = ra.roc_select(
        [r["reward"] for r in rows],
        [r["response"] for r in rows],
        mode="reference",
        uids=[r["uid"] for r in rows],
        keep=cfg["down_sample_to_n"],
        min_failures=cfg["min_zero_reward_trace_num"],
        min_successes=cfg["min_non_zero_reward_trace_num"],
    )
    assert kept == cases["kept_resample_on_correct"]


def test_count_dicts_and_the_crate_example():
    # rstar-roc's doctest: 8 traces, 5 successes, i % 3 failed calls; the reference keeps the two
    # successes without a tool error and the first two failures.
    traces = [
        {
            "tool_calls": 2 + i % 3,
            "failed_calls": i % 3,
            "error_mentions": i % 3,
            "answer_open_tags": 1,
            "answer_close_tags": 1,
            "closed_answers": 1,
            "assistant_turns": 3,
            "marked_turns": 2,
        }
        for i in range(8)
    ]
    rewards = [1.0 if i < 5 else 0.0 for i in range(8)]
    assert ra.roc_select(rewards, traces, mode="reference", keep=4) == [0, 3, 5, 6]


def test_paper_rule_is_seeded_and_halves_each_side():
    rewards = [1.0 if i % 3 else 0.0 for i in range(32)]
    texts = [
        "<tool_response>\nTool call failure\nreason: \nstderr: Error\n</tool_response>" * (i % 4)
        + "<answer>\\boxed{1}</answer>"
        for i in range(32)
    ]
    a = ra.roc_select(rewards, texts, seed=7)
    assert a == ra.roc_select(rewards, texts, seed=7)
    assert len(a) == 16 and a == sorted(set(a))
    failures = sum(1 for i in a if rewards[i] == 0.0)
    assert failures == rewards.count(0.0) // 2
    assert {tuple(ra.roc_select(rewards, texts, seed=s)) for s in range(20)} != {tuple(a)}
    # A group no larger than `keep` is kept whole.
    assert ra.roc_select([1.0, 0.0], keep=4) == [0, 1]


def test_bad_input():
    with pytest.raises(ValueError, match="mode `greedy`"):
        ra.roc_select([1.0, 0.0], mode="greedy")
    with pytest.raises(ValueError, match="2 rewards but 1 traces"):
        ra.roc_select([1.0, 0.0], ["x"])
    with pytest.raises(ValueError, match="finite"):
        ra.roc_select([float("nan"), 0.0])
    with pytest.raises(ValueError, match="unknown count `tools`"):
        ra.roc_select([1.0], [{"tools": 1}])
    with pytest.raises(TypeError):
        ra.roc_select([1.0], [3])
    with pytest.raises(ValueError, match="exceed keep"):
        ra.roc_select([1.0] * 8, mode="reference", keep=2, min_failures=2, min_successes=2)
    with pytest.raises(ValueError, match="NUL"):
        ra.roc_select([1.0], ["a\x00"])
