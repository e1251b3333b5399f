"""A verl custom reward function file: point `custom_reward_function.path` here.

    custom_reward_function:
      path: /path/to/rstar-agent/crates/python/examples/verl_reward.py
      name: compute_score            # or compute_score_batch with reward_model.reward_manager=batch
      reward_kwargs:
        mode: auto                   # integer | math | choice

verl calls `compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)`;
the rewards are rstar-verifier's exact 0/1 (see docs/python.md).
"""

from rstar_agent import compute_score, compute_score_batch

__all__ = ["compute_score", "compute_score_batch"]
