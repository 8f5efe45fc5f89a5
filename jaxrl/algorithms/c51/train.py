"""C51: DQN with a categorical return distribution per action (Bellemare et al. 2017).

`C51` is the Q-learning agent DQN also builds on
(`jaxrl.algorithms.qlearning.QLearningAgent`) with two things of its own: the
network outputs `num_atoms` logits per action (the same `QNetwork`, with the same
torsos and dueling option), so Q-values, and with them the epsilon-greedy
exploration and the greedy evaluation policy, are the distributions' means; and
`learn_step` minimises the cross-entropy to the projected distributional target
(`losses.py`). The replay buffer, n-step targets, prioritised replay, the optimiser
and the target network's updates are the shared agent's and replay base's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax

from jaxrl import envs
from jaxrl.algorithms.qlearning import QLearner, QLearningAgent, next_action, take_action
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import C51Config


class C51(QLearningAgent):
    """C51 for one environment and one static config: a fused-step algorithm."""

    name = "c51"
    trains_on = "env"
    headline_metric = "episode_return"

    def __init__(self, config: C51Config, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        self.atoms = losses.support(config.num_atoms, config.v_min, config.v_max)

    @property
    def num_atoms(self) -> int:
        """Network outputs per action: one logit per atom of the support."""
        return self.config.num_atoms

    def q_values(self, params: Any, obs: jax.Array) -> jax.Array:
        """`Q(obs, .) = E[Z(obs, .)]`, the means of the predicted distributions: `(B, A)`."""
        return losses.expected_q(self.network.apply(params, obs), self.atoms)

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
        """One gradient step on the cross-entropy to the projected target distribution of
        `reward + discount * Z_target(s', a*)`; the per-sample cross-entropy as priorities.

        `a*` maximises the target network's mean, or with `double_q` the online
        network's (the Double-Q selection Rainbow uses, Hessel et al. 2018).
        """
        next_logits = self.network.apply(learner.target_params, batch.next_observation)
        next_q_online = (
            self.q_values(params, batch.next_observation) if self.config.double_q else None
        )
        action = next_action(losses.expected_q(next_logits, self.atoms), next_q_online)
        next_probs = jax.nn.softmax(take_action(next_logits, action), axis=-1)
        target = losses.categorical_projection(next_probs, batch.reward, batch.discount, self.atoms)

        def loss_fn(p):
            logits = take_action(self.network.apply(p, batch.observation), batch.action)
            loss, cross_entropy = losses.categorical_loss(logits, target, weights)
            return loss, (cross_entropy, losses.expected_q(logits, self.atoms))

        (loss, (cross_entropy, q_taken)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        params, learner = self.apply_gradients(params, learner, grads, hparams, grad_step)
        return params, learner, cross_entropy, {"loss": loss, "q_mean": q_taken.mean()}


def make(config: C51Config, env: envs.Environment | None = None, env_params: Any = None) -> C51:
    """Builds C51 for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return C51(config, env, env_params if env_params is not None else env.default_params)
