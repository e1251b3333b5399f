"""Type stubs of `rstar_agent`, the Python module of rstar-agent (crates/python, built by
`cargo xtask wheel`): the exact verifier, Resample-on-Correct, GRPO advantages and the sandbox.

Bad input raises `TypeError` (a non-string where a string is expected, a non-sequence) or
`ValueError` (a NUL byte, a string over `MAX_TEXT_BYTES`, an unknown mode, a ground truth the
mode cannot score, lengths that differ), with the Rust error's message. A bug that panics in Rust
raises `RuntimeError`; it never aborts the interpreter.
"""

from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, TypedDict, Union

__version__: str
MAX_TEXT_BYTES: int
"""The largest string accepted, in bytes (16 MiB)."""

Mode = Literal["auto", "integer", "math", "choice"]
Truth = Union[str, int]
Message = Mapping[str, Any]
Completion = Union[str, Sequence[Message]]

# --- the verifier -----------------------------------------------------------------------------

def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Truth,
    extra_info: Optional[Any] = None,
    *,
    mode: Mode = "auto",
    **kwargs: Any,
) -> float:
    """verl's `custom_reward_function`: 1.0 when the response's final answer is the ground truth,
    else 0.0.

    `mode="auto"` picks integer, choice or math from the ground truth. `data_source` and
    `extra_info` are not read; verl's other keyword arguments (`sandbox_fusion_url`,
    `concurrent_semaphore`, `memory_limit_mb`, `reward_router_address`, `reward_model_tokenizer`,
    ...) are accepted and ignored, and any other is ignored with a `UserWarning`.
    """

def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Truth],
    extra_infos: Optional[Sequence[Any]] = None,
    *,
    mode: Mode = "auto",
    threads: Optional[int] = None,
    **kwargs: Any,
) -> list[float]:
    """verl's batch reward manager (`reward_model.reward_manager=batch`): one reward per response."""

def score(
    solutions: Sequence[str],
    truths: Sequence[Truth],
    mode: Mode = "auto",
    threads: Optional[int] = None,
) -> list[float]:
    """The rewards (0.0 or 1.0) of many responses, in order, on `threads` threads (None: one per
    CPU) with the GIL released."""

class Verdict:
    """One response's verdict."""

    reward: float
    reason: Literal[
        "right", "wrong", "no_box", "empty_box", "several_answers", "not_an_integer", "too_large"
    ]
    mode: Literal["integer", "math", "choice"]
    extracted: Optional[str]
    normalized: Optional[str]
    canonical: Optional[str]

def verify(solution: str, truth: Truth, mode: Mode = "auto") -> Verdict:
    """Scores one response and says why."""

class TrlReward:
    """A TRL reward function: `GRPOTrainer(reward_funcs=[TrlReward()])`.

    Called as `reward(completions, solution, **kwargs)` with standard (str) or conversational
    (lists of message dicts; assistant turns are scored) completions; the ground truths are the
    dataset column `truth_key`.
    """

    __name__: str
    def __init__(
        self, mode: Mode = "auto", truth_key: str = "solution", threads: Optional[int] = None
    ) -> None: ...
    def __call__(
        self,
        completions: Sequence[Completion],
        solution: Optional[Sequence[Truth]] = None,
        **kwargs: Any,
    ) -> list[float]: ...

trl_reward: TrlReward
"""`TrlReward()`: auto mode, ground truths from the `solution` column."""

# --- Resample-on-Correct ----------------------------------------------------------------------

Trace = Union[str, Mapping[str, int], None]

def roc_select(
    rewards: Sequence[float],
    traces: Optional[Sequence[Trace]] = None,
    *,
    mode: Literal["paper", "reference"] = "paper",
    keep: Optional[int] = None,
    seed: int = 0,
    uids: Optional[Sequence[Union[str, int]]] = None,
    min_failures: Optional[int] = None,
    min_successes: Optional[int] = None,
    reject_equal_reward: bool = False,
) -> list[int]:
    """The indices (ascending) of the rollouts Resample-on-Correct keeps.

    `traces[i]` is rollout i's response text, a dict of counts (`tool_calls`, `failed_calls`,
    `timed_out_calls`, `parse_failures`, `error_mentions`, `answer_open_tags`,
    `answer_close_tags`, `closed_answers`, `assistant_turns`, `marked_turns`) or None. `keep`
    defaults to half the largest group; `uids` groups a batch by prompt.
    """

def roc_penalties(
    traces: Sequence[Trace], mode: Literal["paper", "reference"] = "paper"
) -> list[Tuple[float, float, float]]:
    """Each trace's `(p_err, p_format, p_total)`."""

# --- advantages -------------------------------------------------------------------------------

def advantages(
    rewards: Sequence[float],
    groups: Optional[Sequence[Union[str, int]]] = None,
    *,
    group_size: Optional[int] = None,
    estimator: Literal["grpo", "dr_grpo", "rloo"] = "grpo",
    epsilon: float = 1e-6,
    singleton: Literal["zero", "verl"] = "zero",
) -> list[float]:
    """One advantage per rollout: GRPO, Dr. GRPO or RLOO within each group (by `groups`, by
    consecutive runs of `group_size`, or one group)."""

class RolloutCorrection(TypedDict):
    weights: Optional[list[list[float]]]
    response_mask: list[list[float]]
    metrics: dict[str, float]

def rollout_correction(
    old_log_prob: Sequence[Sequence[float]],
    rollout_log_prob: Sequence[Sequence[float]],
    response_mask: Sequence[Sequence[float]],
    *,
    rollout_is: Optional[Literal["token", "sequence"]] = None,
    rollout_is_threshold: Optional[Union[float, str]] = None,
    rollout_is_batch_normalize: bool = False,
    rollout_rs: Optional[str] = None,
    rollout_rs_threshold: Optional[Union[float, str]] = None,
) -> RolloutCorrection:
    """verl 0.9.1's rollout correction (decoupled mode) on [batch][response_len] matrices:
    importance weights from old_log_prob - rollout_log_prob (truncated at a number, or masked
    outside "lower_upper"), the rejection mask (e.g. rollout_rs="token_k1,seq_mean_k3",
    rollout_rs_threshold="0.5_2.0,0.3") and verl's `rollout_corr/...` metrics."""

# --- the sandbox ------------------------------------------------------------------------------

Outcome = Literal["output", "no_output", "error", "timeout", "internal"]
Call = Union[str, Tuple[str, str]]

class ToolResult:
    """How one call ended."""

    outcome: Outcome
    stdout: str
    stderr: str
    exit_code: Optional[int]
    cost: float
    success: bool
    text: str
    """The tool-response text the model sees (code-judge's format)."""

class Sandbox:
    """A pool of sandboxed Python workers (fork per call, rlimits, no network, a wall-clock limit)."""

    def __init__(
        self,
        workers: Optional[int] = None,
        *,
        python: Optional[str] = None,
        timeout: float = 10.0,
        memory_mb: int = 4096,
        preload: Optional[Sequence[str]] = None,
        backend: Literal["zygote", "spawn"] = "zygote",
    ) -> None: ...
    @property
    def workers(self) -> int: ...
    def run(
        self, code: str, stdin: Optional[str] = None, timeout: Optional[float] = None
    ) -> ToolResult: ...
    def run_batch(self, calls: Sequence[Call], timeout: Optional[float] = None) -> list[ToolResult]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Sandbox": ...
    def __exit__(self, *args: Any) -> bool: ...

class ToolClient:
    """The batching client of `rstar tools serve` (or code-judge) servers."""

    def __init__(
        self,
        endpoints: Union[str, Sequence[str]],
        *,
        token: Optional[str] = None,
        batch_size: int = 64,
        concurrency: int = 8,
        max_retries: int = 4,
    ) -> None: ...
    def run(
        self, code: str, stdin: Optional[str] = None, expected_output: Optional[str] = None
    ) -> ToolResult: ...
    def run_batch(self, calls: Sequence[Call]) -> list[ToolResult]: ...
