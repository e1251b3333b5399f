"""verl's rollout correction from Python (issue #61) against rstar-grpo's fixture (verl 0.9.1's
own outputs, crates/grpo/tests/data/rollout_correction.json): weights and metrics within 1e-5
(relative above 1), the rejection mask exactly, and bad settings refused by name."""

import json

import pytest
import rstar_agent as ra

from conftest import ROOT


@pytest.fixture(scope="module")
def cases():
    path = ROOT / "crates/grpo/tests/data/rollout_correction.json"
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def close(what, got, want):
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), (what, got, want)


def test_every_correction_matches_verl(cases):
    inputs = {i["name"]: i for i in cases["inputs"]}
    assert len(cases["corrections"]) == 135
    for case in cases["corrections"]:
        inp = inputs[case["input"]]
        got = ra.rollout_correction(
            inp["old_log_prob"],
            inp["rollout_log_prob"],
            inp["response_mask"],
            **case["config"],
        )
        want = case["rollout_is_weights"]
        assert (got["weights"] is None) == (want is None), case["id"]
        if want is not None:
            for gr, wr in zip(got["weights"], want):
                for g, w in zip(gr, wr):
                    close(case["id"], g, w)
        assert got["response_mask"] == case["modified_response_mask"], case["id"]
        assert sorted(got["metrics"]) == sorted(case["metrics"]), case["id"]
        for k, v in case["metrics"].items():
            close((case["id"], k), got["metrics"][k], v)


def test_bad_settings_are_refused_by_name():
    lp = [[-1.0, -2.0]]
    mask = [[1.0, 1.0]]
    with pytest.raises(ValueError, match="rollout_is_threshold"):
        ra.rollout_correction(lp, lp, mask, rollout_is="token", rollout_is_threshold=1.0)
    with pytest.raises(ValueError, match="rollout_is `tokens`"):
        ra.rollout_correction(lp, lp, mask, rollout_is="tokens")
    with pytest.raises(ValueError, match="seq_max_k1"):
        ra.rollout_correction(lp, lp, mask, rollout_rs="seq_max_k1", rollout_rs_threshold=2.0)
    with pytest.raises(ValueError, match="rollout_rs_threshold"):
        ra.rollout_correction(lp, lp, mask, rollout_rs="token_k1")
    with pytest.raises(ValueError, match="rows must be the same length"):
        ra.rollout_correction([[-1.0], [-1.0, -2.0]], lp, mask)
    with pytest.raises(ValueError, match="selects no tokens"):
        ra.rollout_correction(lp, lp, [[0.0, 0.0]], rollout_is="token")
