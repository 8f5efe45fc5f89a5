"""Phase 2 of a token-rollout update: the rewards (`process`, host).

`RolloutRewards` is a mixin of `RolloutAlgorithm` (`lm_rollout.py`), which provides what
it reads: `config`, `task`, `tokenizer`, `reward` (the reward blocks), `step_rewards`,
`implicit_prm`, `prompt_len`, `max_new_tokens`, `clock` and, with partial rollouts,
`wait_for_groups` (`partial_rollouts.PartialRollouts`).

`process(collected, host_state)` decodes every agent's completions, scores them with
the reward blocks (`jaxrl/rewards`; failures count and score 0), applies DAPO's
overlong penalty and dynamic sampling (`select_groups`), adds step rewards when there
is a process reward, and returns the learning batch with the sampling metrics (means
over agents). The pure helpers: `select_groups` (dynamic sampling), `stall_counters`
(the warning when every group's rewards have been equal for `STALL_UPDATES` updates).

What does not live here: the reward blocks (`jaxrl/rewards/`), the step rewards
(`process_rewards.py`) and the advantages, which `learn` computes
(`jaxrl/objectives/advantages.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxrl import tasks
from jaxrl.lm import decode_completions
from jaxrl.objectives import GROUP_ADVANTAGES, overlong_penalty
from jaxrl.rewards import blocks as reward_blocks

logger = logging.getLogger(__name__)

STALL_UPDATES = 20
"""Updates in a row with all-equal rewards in every group before a stall is reported."""


class RolloutRewards:
    """The rewards phase of a token-rollout algorithm (see the module docstring)."""

    def process(self, collected: dict[str, np.ndarray], host_state: dict[str, Any]):
        """Rewards, DAPO's overlong penalty and dynamic sampling for every agent; the
        sampling metrics (means over agents)."""
        host_state = dict(host_state)
        rollout = host_state.pop("rollout")
        rows, stats, carried = [], [], []
        for i, agent_examples in enumerate(rollout["examples"]):
            one = {name: value[i] for name, value in collected.items()}
            learned = None
            if self.config.partial_rollouts:  # groups still going wait, carried on
                learned, groups = self.wait_for_groups(one, agent_examples)
                carried.append(groups)
            batch, row_stats = self._score_agent(one, agent_examples, learned)
            rows.append(batch)
            stats.append(row_stats)
        batch = {name: np.stack([r[name] for r in rows]) for name in rows[0]}
        metrics = {name: [s[name] for s in stats] for name in stats[0]}
        sampled = np.sum(collected["lengths"]) - rollout.get("carried_tokens", 0)
        metrics.update(self.clock.metrics(float(sampled)))
        host_state = self.count_stalls(host_state, metrics["zero_advantage_groups"])
        if self.config.partial_rollouts:
            host_state["carry"] = carried
        return batch, host_state, metrics

    def count_stalls(
        self, host_state: dict[str, Any], zero_advantage_groups: Sequence[float]
    ) -> dict[str, Any]:
        """The host state with this update's stall counters (`stall_counters`); a host
        state saved before the counters existed starts them at 0."""
        stalled = host_state.get("stalled") or [0] * len(zero_advantage_groups)
        if self.config.advantage in GROUP_ADVANTAGES:
            stalled = stall_counters(stalled, zero_advantage_groups)
        return {**host_state, "stalled": stalled}

    def _score_agent(
        self,
        collected: dict[str, np.ndarray],
        examples: Sequence[tasks.Example],
        learned: np.ndarray | None = None,
    ) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """One agent's learning batch and sampling statistics. `learned` (partial
        rollouts): which rows belong to groups that have ended; the others wait, with no
        loss (completion mask cleared, reward 0), and stay out of the statistics."""
        c, g = self.config, self.config.group_size
        texts = decode_completions(
            self.tokenizer, collected["tokens"][:, self.prompt_len :], collected["completion_mask"]
        )
        grouped_examples = [e for e in examples for _ in range(g)]
        scores = reward_blocks.score(self.reward, texts, grouped_examples)
        rewards = scores.rewards.astype(np.float32)
        correct = np.array(
            [
                self.task.is_correct(t, e.answer)
                for t, e in zip(texts, grouped_examples, strict=True)
            ],
            np.float32,
        )
        if c.overlong_cache:
            rewards = rewards + np.asarray(
                overlong_penalty(
                    jnp.asarray(collected["lengths"]), self.max_new_tokens, c.overlong_cache
                )
            )
        keep = select_groups(rewards, g, c.num_prompts)
        rows = (keep[:, None] * g + np.arange(g)).reshape(-1)
        scored = ("sampler_logp", "old_logp", "old_entropy", "ref_logp")
        batch = {
            name: collected[name][rows]
            for name in ("tokens", "mask", "completion_mask", *scored)
            if name in collected
        }
        batch["rewards"] = rewards[rows]
        if self.step_rewards is not None:
            batch.update(
                self.step_rewards.token_rewards(
                    [grouped_examples[r] for r in rows],
                    [texts[r] for r in rows],
                    collected["tokens"][rows, self.prompt_len :],
                    collected["completion_mask"][rows],
                )
            )
        if self.implicit_prm:
            batch["outcome_labels"] = correct[rows]
        if learned is not None:  # partial rollouts: the rows of groups still going wait
            batch["completion_mask"] = batch["completion_mask"] & learned[rows, None]
            batch["rewards"] = np.where(learned[rows], batch["rewards"], np.float32(0))
            rows = rows[learned[rows]]  # the statistics: of the groups learned from
        lengths = collected["lengths"][rows]
        kept_rewards = rewards[rows].reshape(-1, g)
        stats = {
            "reward_mean": _mean(rewards[rows]),
            "reward_std": _mean(rewards[rows], np.std),
            "accuracy": _mean(correct[rows]),
            "response_length_mean": _mean(lengths),
            "response_length_max": _mean(lengths, np.max),
            "clipped_fraction": 1.0 - _mean(collected["finished"][rows]),
            "zero_advantage_groups": _mean(kept_rewards.max(1) == kept_rewards.min(1)),
            "reward_failures": float(sum(scores.failures.values())),
            "sampled_accuracy": float(correct.mean()),
        }
        if learned is not None:
            stats["waiting_groups"] = float(1.0 - len(rows) / len(learned))
        if self.step_rewards is not None:
            ends = batch["step_ends"] > 0
            stats["process_reward_mean"] = float(batch["process_rewards"][ends].mean())
        return batch, stats


def stall_counters(stalled: Sequence[int], zero_advantage_groups: Sequence[float]) -> list[int]:
    """Each agent's updates in a row in which every group had equal rewards (`stalled`,
    advanced by this update's `zero_advantage_groups` fractions); logs a warning, naming
    the agent, when a count reaches `STALL_UPDATES`.

    Under a group estimator all advantages are then zero, so the policy no longer
    changes (collapsed or saturated). Too high a learning rate drives the policy there on
    addition (reward 0, most completions running to the length budget), and it does not
    recover (benchmarks/notes, "GRPO learning-rate sensitivity").
    The counters live in the host state, so a resumed run warns when the uninterrupted
    one would.
    """
    counts = []
    for i, (count, fraction) in enumerate(zip(stalled, zero_advantage_groups, strict=True)):
        count = count + 1 if fraction >= 1.0 else 0
        if count == STALL_UPDATES:
            logger.warning(
                "agent %d: every group has had equal rewards for %d updates in a row, so "
                "all advantages are zero and the policy no longer changes (collapsed or "
                "saturated); if the reward is stuck at its minimum, a lower lr or "
                "--dynamic-sampling may help",
                i,
                STALL_UPDATES,
            )
        counts.append(count)
    return counts


def select_groups(rewards: np.ndarray, group_size: int, num_prompts: int) -> np.ndarray:
    """Indices of the `num_prompts` groups to train on, out of `len(rewards) // group_size`.

    Without spares (as many groups as `num_prompts`) all of them, in order. With spares
    (DAPO's dynamic sampling, Yu et al. 2025, sec. 3.2), groups whose rewards are not all
    equal come first, in sampling order, then all-equal ones to fill the batch when the
    spares ran out (they have zero advantage under the group estimators, so they change
    nothing but the count: the `zero_advantage_groups` metric shows how often).
    """
    grouped = np.asarray(rewards).reshape(-1, group_size)
    if len(grouped) == num_prompts:
        return np.arange(num_prompts)
    informative = grouped.max(1) != grouped.min(1)
    order = np.concatenate([np.flatnonzero(informative), np.flatnonzero(~informative)])
    return np.sort(order[:num_prompts])


def _mean(x: np.ndarray, reduce: Callable[[np.ndarray], Any] = np.mean) -> float:
    """`reduce(x)` as a float; NaN for no values (partial rollouts: no group ended yet)."""
    return float(reduce(x)) if np.size(x) else float("nan")
