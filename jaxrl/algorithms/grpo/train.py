"""GRPO and its family as a staged algorithm (`jaxrl/training/contract.py`).

One update is the four phases every token-rollout algorithm shares
(`jaxrl/algorithms/lm_rollout.py`): host prompts (`prepare`), jitted sampling of
`group_size` completions per prompt and their re-scoring (`collect`), host rewards with
DAPO's overlong penalty and dynamic sampling (`process`), then GRPO's own jitted
`learn` (`learning.py`): group advantages from the outcome rewards and `num_epochs` x
`num_minibatches` AdamW steps of the policy loss (`jaxrl/objectives/`).

On a multi-turn task (`jaxrl/tasks/multiturn.py`), `make` returns `MultiTurnGRPO`
(`multiturn.py`): `collect` samples one model turn, a host `respond` answers it with the
task's feedback, for several rounds per update; each episode is one row whose
environment tokens are out of the loss mask.

After training, `finish` measures pass@k on held-out prompts (unbiased estimator from
`eval_samples` completions at `temperature`) for the starting model and the trained one,
and exports agent 0's model like SFT.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl import tasks
from jaxrl.algorithms.lm_rollout import RolloutAlgorithm
from jaxrl.objectives import outcome_token_rewards

from . import learning
from .config import SWEEPABLE, GRPOConfig
from .learning import GRPOState
from .multiturn import MultiTurnGRPO


class GRPO(RolloutAlgorithm):
    """Token-rollout RL of a causal LM on a single-turn task (see the module docstring)."""

    name = "grpo"
    trains_on = "task"
    headline_metric = "accuracy"
    eval_metric = "pass@1"
    sweepable = SWEEPABLE

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> GRPOState:
        """The policy from `params` (a warm start, normally an SFT run) or from `key`;
        with a KL term and no LoRA, a frozen copy of it as the reference."""
        return learning.init_state(self, key, hparams, params)

    def learn(self, state: GRPOState, batch: dict[str, jax.Array]) -> tuple[GRPOState, dict]:
        """GRPO's update (`learning.learn`), the outcome reward on each row's last
        completion token."""
        cmask = batch["completion_mask"].astype(jnp.float32)
        return learning.learn(self, state, batch, outcome_token_rewards(batch["rewards"], cmask))


def make(config: GRPOConfig) -> GRPO | MultiTurnGRPO:
    """The GRPO-family algorithm for `config` (validated; bad input raises `ConfigError`);
    a multi-turn task (`jaxrl/tasks/multiturn.py`) gets `MultiTurnGRPO`."""
    if tasks.is_multi_turn(config.task):
        return MultiTurnGRPO(config)
    return GRPO(config)
