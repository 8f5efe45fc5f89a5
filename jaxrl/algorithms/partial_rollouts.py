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

`PartialRollouts` is the algorithm's side, a mixin of `RolloutAlgorithm`
(`lm_rollout.py`): `prepare_partial` (the queue and the sampler's prefix of the carried
rows), `continuation` (the sampler's arguments) and `wait_for_groups` (which rows are
learned from, which groups are carried); `prepare`, `collect` and `process` call them
with `--partial-rollouts`.

What does not live here: the sampler (jaxrl/lm/continuous.py) and the update's phases
(`lm_rollout_sampling.py`, `lm_rollout_rewards.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxrl import tasks
from jaxrl.lm.continuous import Prefix


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


class PartialRollouts:
    """The partial-rollout hooks of a token-rollout algorithm (see the module docstring).
    `RolloutAlgorithm` provides what they read: `config`, `tokenizer`, `prompt_len`,
    `max_new_tokens`, `draw_examples` and `prompt_tokens`."""

    def prepare_partial(self, host_state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict]:
        """`prepare` with partial rollouts: each agent's queue is its carried groups, then
        as many new prompts as make `num_prompts` (drawn as `draw_examples` draws), with
        the sampler's prefix of the carried rows (`prefix_arrays`)."""
        c = self.config
        carried = host_state["carry"]
        drawn, host_state = self.draw_examples(
            host_state, [c.num_prompts - len(groups) for groups in carried]
        )
        examples = [
            carried_examples(groups) + new for groups, new in zip(carried, drawn, strict=True)
        ]
        padded = [
            self.prompt_tokens(agent_examples, self.prompt_len) for agent_examples in examples
        ]
        prefixes = [
            prefix_arrays(
                groups, c.num_prompts, c.group_size, self.max_new_tokens, self.tokenizer.pad_id
            )
            for groups in carried
        ]
        inputs = {
            "tokens": np.stack([t for t, _ in padded]),
            "mask": np.stack([m for _, m in padded]),
            **{name: np.stack([p[name] for p in prefixes]) for name in prefixes[0]},
        }
        carried_tokens = int(sum(p["prefix_lengths"].sum() for p in prefixes))
        rollout = {"examples": examples, "carried_tokens": carried_tokens}
        return inputs, {**host_state, "rollout": rollout}

    def continuation(self, prompts: dict[str, jax.Array]) -> dict[str, Any]:
        """The sampler's partial-rollout arguments: `token_budget` and the `prefix` of the
        carried rows (`prepare_partial`'s); none without partial rollouts."""
        if not self.config.partial_rollouts:
            return {}
        prefix = Prefix(
            tokens=prompts["prefix_tokens"],
            logprobs=prompts["prefix_logprobs"],
            lengths=prompts["prefix_lengths"],
            finished=prompts["prefix_finished"],
        )
        return {"token_budget": self.config.rollout_token_budget, "prefix": prefix}

    def wait_for_groups(
        self, collected: dict[str, np.ndarray], examples: Sequence[tasks.Example]
    ) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """Partial rollouts, one agent: which rows to learn from (those of groups whose
        completions have all ended) and the other groups, to carry to the next update
        with their tokens and behaviour log-probs so far (`carry`)."""
        g = self.config.group_size
        ended = ended_groups(collected["lengths"], collected["finished"], g, self.max_new_tokens)
        groups = carry(
            examples,
            collected["tokens"][:, self.prompt_len :],
            collected["sampler_logp"],
            collected["lengths"],
            collected["finished"],
            ended,
        )
        return np.repeat(ended, g), groups
