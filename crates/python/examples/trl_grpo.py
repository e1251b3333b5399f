"""A real TRL `GRPOTrainer`, two steps on CPU, with `rstar_agent.trl_reward` as its reward.

    pip install trl datasets            # torch, transformers, accelerate come with them
    python crates/python/examples/trl_grpo.py TOKENIZER_DIR [OUT_DIR]

TOKENIZER_DIR holds a Hugging Face tokenizer (the tests use the real Qwen3 one,
`../shared/fixtures/qwen/tokenizer_qwen3`). The policy is a tiny random Qwen3 (2 layers, width 64)
over that vocabulary, so the completions are noise and the rewards mostly 0: the point is that
TRL calls the reward with its real arguments (conversational completions, the `solution` column,
`prompts`, `completion_ids`, `trainer_state`, ...) and trains on what it returns. One completion
per group is forced to be right by a wrapper, so the logged reward is known (> 0) and a wrong
return value would show.
"""

import os
import sys
import tempfile

import torch
from datasets import Dataset
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
from trl import GRPOConfig, GRPOTrainer

import rstar_agent

calls = []


def reward(completions, solution, **kwargs):
    """`trl_reward`, recording what TRL passed, with the first completion of each call replaced by a
    right answer (a random policy never writes one)."""
    calls.append({"kwargs": sorted(kwargs), "completion": completions[0], "n": len(completions)})
    forced = list(completions)
    forced[0] = [{"role": "assistant", "content": f"So the answer is \\boxed{{{solution[0]}}}."}]
    out = rstar_agent.trl_reward(completions=forced, solution=solution, **kwargs)
    assert out[0] == 1.0, out
    return out


reward.__name__ = "rstar_reward"


def main():
    tok_dir = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix="rstar-trl-")
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    model_dir = os.path.join(out, "tiny-qwen3")
    Qwen3ForCausalLM(config).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)

    problems = [("What is 6 * 7?", "42"), ("What is 2^10?", "1024"), ("Half of 1?", "\\frac{1}{2}"), ("9 + 10?", "19")]
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": q}], "solution": a} for q, a in problems]
    )
    args = GRPOConfig(
        output_dir=os.path.join(out, "grpo"),
        max_steps=2,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=12,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model_dir,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tok,
    )
    trainer.train()
    logged = [h for h in trainer.state.log_history if "reward" in h]
    print("TRL passed:", calls[0]["kwargs"], "completion sample:", repr(calls[0]["completion"])[:120])
    print("steps logged:", [(h.get("step"), h.get("reward"), h.get("rewards/rstar_reward/mean")) for h in logged])
    assert trainer.state.global_step == 2, trainer.state.global_step
    assert len(calls) >= 2 and all(isinstance(c["completion"], list) for c in calls)
    assert all(h["reward"] > 0 for h in logged), logged
    print("ok: two GRPO steps with rstar_agent.trl_reward")


if __name__ == "__main__":
    main()
