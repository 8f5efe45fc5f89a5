"""DQN: the value-based agent on the shared replay base (`jaxrl/algorithms/offpolicy.py`).

The base steps the environments into the replay buffer, samples batches (uniformly
or by priority) with their n-step targets' inputs and counts gradient steps; the
Q-learning agent (`jaxrl.algorithms.qlearning.QLearningAgent`, shared with C51) adds
epsilon-greedy exploration decaying linearly over the first `eps_fraction` of the run,
the greedy evaluation policy, Adam (optionally after global-norm clipping) and the
target network's Polyak or hard updates. This module adds what makes it DQN (Mnih et
al. 2015): `learn_step`, the (Double-)Q target from the target network, the Huber or
squared TD loss weighted by the importance weights, and |TD error| as the new
priorities. The loss is in `losses.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from jaxrl import envs
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.qlearning import (
    QLearner,
    QLearningAgent,
    bootstrap_value,
    take_action,
)
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import DQNConfig

__all__ = ["DQN", "QLearner", "make"]


class DQN(QLearningAgent):
    """DQN for one environment and one static config: a fused-step algorithm.

    Static structure (shapes, network, flags) lives on this object; everything numeric
    that changes or may be swept lives in `OffPolicyState` (`hparams`: `DQNHyperParams`).
    """

    name = "dqn"
    trains_on = "env"
    headline_metric = "episode_return"

    # ------------------------------------------------------------------ learning
    def learn_step(
        self,
        params: Any,
        learner: QLearner,
        batch: NStepBatch,
        weights: jax.Array,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, QLearner, jax.Array, Mapping[str, jax.Array]]:
        """One gradient step on the (Double-)Q TD loss; |TD error| as priorities."""
        next_q_target = self.q_values(learner.target_params, batch.next_observation)
        next_q_online = (
            self.q_values(params, batch.next_observation) if self.config.double_q else None
        )
        target = offpolicy.td_target(batch, bootstrap_value(next_q_target, next_q_online))

        def loss_fn(p):
            q_taken = take_action(self.q_values(p, batch.observation), batch.action)
            loss, td_error = losses.td_loss(q_taken, target, weights, self.config.loss)
            return loss, (td_error, q_taken)

        (loss, (td_error, q_taken)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        params, learner = self.apply_gradients(params, learner, grads, hparams, grad_step)
        return params, learner, td_error, {"loss": loss, "q_mean": q_taken.mean()}


def make(config: DQNConfig, env: envs.Environment | None = None, env_params: Any = None) -> DQN:
    """Builds DQN for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return DQN(config, env, env_params if env_params is not None else env.default_params)
