"""Rewards for LM RL, computed on the host: reward blocks and a code-execution sandbox.

`blocks.py`: named scorers `(completion, example) -> float` (exact match, final number
and `\\boxed{}`, format regex, length penalty, the task's `is_correct`, user callables),
`compose`, the name registry `make_reward("correct+0.1*format", task)` and `score`, which
counts and logs failing blocks instead of raising. `sandbox/`: runs model-written
Python against tests in a sandbox, judging the tests in the trainer (`code_reward`). `base.py`: the
`Block` type both build.
"""

from .blocks import (
    Block,
    Composite,
    Scores,
    compose,
    exact_match,
    final_number,
    final_number_reward,
    format_reward,
    length_penalty,
    make_reward,
    names,
    python_reward,
    score,
    task_reward,
)

__all__ = [
    "Block",
    "Composite",
    "Scores",
    "compose",
    "exact_match",
    "final_number",
    "final_number_reward",
    "format_reward",
    "length_penalty",
    "make_reward",
    "names",
    "python_reward",
    "score",
    "task_reward",
]
