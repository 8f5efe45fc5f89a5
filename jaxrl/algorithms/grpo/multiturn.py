"""GRPO on multi-turn episodes: the model and a Python environment take turns.

The episodes' rollout (rounds of one model turn and the environment's answer, the KV
cache kept between turns, one token row per episode with only the model's tokens in the
loss mask, each turn's reward on its last token) is `MultiTurnRollout`
(`jaxrl/algorithms/lm_multiturn.py`, shared with multi-turn PPO-LM). Here: GRPO's state
and learning step (`learning.py`) on those rows, and GiGPO's step groups.

Rewards: the group estimators (grpo, dr_grpo, rloo) sum a row's token rewards, so they
see the episode's return, the sum of its turn rewards; `reinforce_pp` takes the
reward-to-go over model tokens, so a turn's tokens are credited with the rewards of
that turn and the turns after it, not those before (Hu 2025;
`jaxrl.objectives.masked_gae` steps over the environment's tokens). With
`step_advantage_weight`, GiGPO's step-level advantages (Feng et al. 2025) are added:
turns grouped by the context they start from (`step_groups`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algorithms.lm_multiturn import EpisodeRow, MultiTurnRollout

from . import learning
from .config import SWEEPABLE
from .learning import GRPOState


def step_groups(
    rows: Sequence[EpisodeRow], group_size: int, width: int, max_turns: int
) -> dict[str, np.ndarray]:
    """What GiGPO's step-level advantages need (`objectives.step_group_advantages`), for
    rows in prompt-major groups of `group_size`: `step_returns` (rows, max_turns), each
    turn's return to the episode's end; `step_groups`, ids equal for turns that start
    from the same context (anchor state) within one prompt's group; `step_mask`, the
    turns played; and `turn_of_token` (rows, width), aligned with the completion part of
    `episode_batch`'s rows (-1 off the model's tokens)."""
    n = len(rows)
    returns = np.zeros((n, max_turns), np.float32)
    groups = np.zeros((n, max_turns), np.int32)
    mask = np.zeros((n, max_turns), np.float32)
    turn_of_token = np.full((n, width), -1, np.int32)
    ids: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        turns = len(row.rewards)
        returns[i, :turns] = np.cumsum(row.rewards[::-1])[::-1]
        mask[i, :turns] = 1.0
        after = row.turn_of_token[row.prompt_len :]
        turn_of_token[i, : len(after)] = after
        for k in range(turns):
            start = row.turn_of_token.index(k) if k in row.turn_of_token else len(row.tokens)
            anchor = (i // group_size, tuple(row.tokens[:start]))
            groups[i, k] = ids.setdefault(anchor, len(ids))
    return {
        "step_returns": returns,
        "step_groups": groups,
        "step_mask": mask,
        "turn_of_token": turn_of_token,
    }


class MultiTurnGRPO(MultiTurnRollout):
    """GRPO whose completions are multi-turn episodes (see the module docstring): the
    episodes' rollout from `MultiTurnRollout`, GRPO's state and update from
    `learning.py`."""

    name = "grpo"
    trains_on = "task"
    headline_metric = "accuracy"
    eval_metric = "pass@1"
    sweepable = SWEEPABLE

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> GRPOState:
        """GRPO's policy (and reference), as single-turn GRPO's `init`, and the episode
        KV cache."""
        return self.with_episode_cache(learning.init_state(self, key, hparams, params))

    def episode_fields(self, kept: Sequence[EpisodeRow]) -> dict[str, np.ndarray]:
        """The episode rows, and with `step_advantage_weight` GiGPO's step groups."""
        batch = super().episode_fields(kept)
        if self.config.step_advantage_weight:
            g, width = self.config.group_size, self.max_new_tokens
            batch.update(step_groups(kept, g, width, self.task.max_turns))
        return batch

    def learn(self, state: GRPOState, batch: dict[str, jax.Array]) -> tuple[GRPOState, dict]:
        """GRPO's update (`learning.learn`) on the episode rows, after re-scoring them
        whole with the parameters that sampled them (`rescored`); each turn's reward sits
        on the turn's last token (made by `episode_batch`)."""
        batch = self.rescored(state, batch)
        cmask = batch["completion_mask"].astype(jnp.float32)
        return learning.learn(self, state, batch, batch["token_rewards"] * cmask)
