"""Partial rollouts on the host (Kimi k1.5, Kimi Team 2025, sec. 2.6.2): which groups
wait, and what an update carries to the next.

With `--partial-rollouts` (GRPO, its variants and PPO-LM, with continuous batching) a
completion samples at most `rollout_token_budget` tokens per update
(`jaxrl.lm.continuous.generate_continuous`'s `token_budget`). Each update's sampler queue
is `num_prompts` groups: first the groups still going from earlier updates, with their
completions so far and the behaviour log-probabilities those tokens were sampled with
(the sampler continues each cut completion from its last token and copies the ended
ones), then new prompts for the rest. A group whose completions have all ended (EOS, a
stop sequence, or the whole `max_new_tokens`) is learned from; the rows of the others
are in the batch with no loss, and the groups are carried to the next update. So group
advantages only ever see whole groups, and the learner's batch keeps its shape.

The carry lives in the host state (`carry`: per agent, a list of groups, each
`{"example": [prompt, answer], "tokens": [[...] per row], "logprobs": [[...] per row],
"finished": [... per row]}`, the completion tokens and log-probs so far), plain JSON, so
a checkpoint holds the unfinished rows and a resumed run continues them exactly as the
uninterrupted run does (float32 log-probs survive JSON's float64 unchanged).

What does not live here: the sampler (jaxrl/lm/continuous.py) and the update's phases
(jaxrl/algorithms/lm_rollout.py calls these).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxrl import tasks


def carried_examples(groups: Sequence[dict[str, Any]]) -> list[tasks.Example]:
    """The examples of carried `groups`, in order: the first groups of the next queue."""
    return [tasks.Example(*group["example"]) for group in groups]


def prefix_arrays(
    groups: Sequence[dict[str, Any]],
    num_prompts: int,
    group_size: int,
    max_new_tokens: int,
    pad_id: int,
) -> dict[str, np.ndarray]:
    """The sampler's `prefix` for a queue of `num_prompts` groups whose first are the
    carried `groups` and the rest new: `prefix_tokens` (rows, max_new_tokens) int32
    (`pad_id` after each row's tokens), `prefix_logprobs` float32 (0 there),
    `prefix_lengths` int32 (0 for new rows) and `prefix_finished` bool."""
    rows = num_prompts * group_size
    tokens = np.full((rows, max_new_tokens), pad_id, np.int32)
    logprobs = np.zeros((rows, max_new_tokens), np.float32)
    lengths = np.zeros((rows,), np.int32)
    finished = np.zeros((rows,), bool)
    for i, group in enumerate(groups):
        for j in range(group_size):
            r, seq = i * group_size + j, group["tokens"][j]
            tokens[r, : len(seq)] = seq
            logprobs[r, : len(seq)] = group["logprobs"][j]
            lengths[r] = len(seq)
            finished[r] = group["finished"][j]
    return {
        "prefix_tokens": tokens,
        "prefix_logprobs": logprobs,
        "prefix_lengths": lengths,
        "prefix_finished": finished,
    }


def ended_groups(
    lengths: np.ndarray, finished: np.ndarray, group_size: int, max_new_tokens: int
) -> np.ndarray:
    """Per group (rows `[i * group_size, (i + 1) * group_size)`), whether every completion
    has ended: emitted EOS or a stop sequence (`finished`), or used the whole budget."""
    ended = np.asarray(finished, bool) | (np.asarray(lengths) >= max_new_tokens)
    return ended.reshape(-1, group_size).all(axis=1)


def carry(
    examples: Sequence[tasks.Example],
    completion: np.ndarray,
    logprobs: np.ndarray,
    lengths: np.ndarray,
    finished: np.ndarray,
    ended: np.ndarray,
) -> list[dict[str, Any]]:
    """The groups that have not ended (`ended` False), as the host state keeps them:
    each row's completion tokens and behaviour log-probs so far, and its `finished`."""
    group_size = len(lengths) // len(examples)
    out = []
    for i in np.flatnonzero(~np.asarray(ended)):
        rows = range(i * group_size, (i + 1) * group_size)
        out.append(
            {
                "example": list(examples[i]),
                "tokens": [completion[r, : lengths[r]].tolist() for r in rows],
                "logprobs": [[float(x) for x in logprobs[r, : lengths[r]]] for r in rows],
                "finished": [bool(finished[r]) for r in rows],
            }
        )
    return out
