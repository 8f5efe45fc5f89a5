"""DQN: the value-based agent on the shared replay base (`jaxrl/algorithms/offpolicy.py`).

The base steps the environments into the replay buffer, samples batches (uniformly
or by priority) with their n-step targets' inputs and counts gradient steps; this
module adds what makes it DQN (Mnih et al. 2015):

* `explore`: epsilon-greedy on the online Q-network, epsilon decaying linearly over
  the first `eps_fraction` of the run;
* `learn_step`: the (Double-)Q target from the target network, the Huber or squared
  TD loss weighted by the importance weights, one Adam step (optionally after global
  norm clipping), the target network's Polyak or hard update, and |TD error| as the
  new priorities;
* `act`: the greedy policy for evaluation.

C51 (`jaxrl/algorithms/c51/train.py`) subclasses `DQN` and replaces the network's
output (a distribution per action) and `learn_step`. The losses are in `losses.py`,
the network in `networks.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import config as cfg
from jaxrl import envs
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.offpolicy import OffPolicy, OffPolicyState
from jaxrl.algorithms.qlearning import epsilon_greedy, linear_epsilon, resolve_torso
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import SWEEPABLE, DQNConfig, QLearningConfig
from .networks import QNetwork


@struct.dataclass
class QLearner:
    """What a Q-learner keeps besides its online parameters (`OffPolicyState.learner`)."""

    target_params: Any  # the target network, updated by `offpolicy.update_target`
    opt_state: Any  # Adam's moments


class DQN(OffPolicy):
    """DQN for one environment and one static config: a fused-step algorithm.

    Static structure (shapes, network, flags) lives on this object; everything numeric
    that changes or may be swept lives in `OffPolicyState` (`hparams`: `DQNHyperParams`).
    """

    name = "dqn"
    trains_on = "env"
    headline_metric = "episode_return"
    sweepable = SWEEPABLE
    action_kind = "discrete"

    def __init__(self, config: QLearningConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        self.network = QNetwork(
            action_dim=self.action_dim,
            hidden_sizes=tuple(config.hidden_sizes),
            activation=config.activation,
            torso=resolve_torso(config.network, self.obs_shape),
            conv_channels=config.conv_channels,
            dueling=config.dueling,
            num_atoms=self.num_atoms,
        )

    @property
    def num_atoms(self) -> int:
        """Network outputs per action: one Q-value (C51: one logit per atom)."""
        return 1

    @property
    def schedule_follows_total(self) -> bool:
        """The epsilon decay (a fraction of total_steps) and prioritised replay's beta
        (annealed to 1 at the last update) are defined by `total_steps`."""
        c = self.config
        decays = c.eps_fraction > 0 and c.eps_end != c.eps_start
        return decays or (c.prioritised and c.importance_exponent < 1.0)

    # ------------------------------------------------------------------ construction
    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, QLearner]:
        """Fresh parameters (or the given ones), the target network as their copy, and
        Adam's state."""
        dummy = jnp.zeros((1, *self.obs_shape), jnp.float32)
        fresh = lambda: self.network.init(key, dummy)  # noqa: E731
        if params is None:
            params = fresh()
        else:
            cfg.check_same_tree("params", jax.eval_shape(fresh), params)
            params = jax.tree.map(jnp.asarray, params)
        opt_state = self._optimizer(hparams).init(params)
        return params, QLearner(target_params=params, opt_state=opt_state)

    def _optimizer(self, hp: Any) -> optax.GradientTransformation:
        """Global-norm clipping (Pascanu et al. 2013; off when max_grad_norm is 0), then
        Adam (Kingma & Ba 2015). Built from the (possibly swept) hyperparameters at every
        step; its state's structure does not depend on their values."""
        max_norm = jnp.where(hp.max_grad_norm > 0, hp.max_grad_norm, jnp.inf)
        return optax.chain(
            optax.clip_by_global_norm(max_norm),
            optax.scale_by_adam(eps=self.config.adam_eps),
            optax.scale(-hp.lr),
        )

    # ------------------------------------------------------------------ acting
    def q_values(self, params: Any, obs: jax.Array) -> jax.Array:
        """`Q(obs, .)`: `(B, A)`."""
        return self.network.apply(params, obs)

    def epsilon(self, hparams: Any, update_step: jax.Array) -> jax.Array:
        """The exploration rate of update `update_step`: linear from eps_start to eps_end
        over the first `eps_fraction` of the updates, then eps_end (Mnih et al. 2015's
        schedule, in SB3's and CleanRL's exploration_fraction form)."""
        return linear_epsilon(
            update_step, self.num_updates, hparams.eps_start, hparams.eps_end, hparams.eps_fraction
        )

    def explore(
        self,
        params: Any,
        learner: QLearner,
        hparams: Any,
        obs: jax.Array,
        key: jax.Array,
        update_step: jax.Array,
    ) -> jax.Array:
        """Epsilon-greedy actions on the online network (after learning_starts; the base
        takes uniformly random ones before)."""
        epsilon = self.epsilon(hparams, update_step)
        return epsilon_greedy(key, self.q_values(params, obs), epsilon)

    def act(
        self,
        state: OffPolicyState,
        obs: jax.Array,
        carry: Any,
        reset: jax.Array,
        key: jax.Array,
        deterministic: bool = True,
    ) -> tuple[jax.Array, Any]:
        """Evaluation policy: `(action, carry)`; greedy, or epsilon-greedy with eps_end
        when not `deterministic`. DQN is feed-forward: `carry` passes through."""
        q_values = self.q_values(state.params, obs)
        if deterministic:
            return jnp.argmax(q_values, axis=-1).astype(jnp.int32), carry
        return epsilon_greedy(key, q_values, state.hparams.eps_end), carry

    def update(self, state: OffPolicyState) -> tuple[OffPolicyState, dict[str, jax.Array]]:
        """The base's update (environment steps, then gradient steps), plus the `epsilon`
        this update explored with."""
        epsilon = self.epsilon(state.hparams, state.update_step)
        state, metrics = super().update(state)
        return state, {**metrics, "epsilon": epsilon}

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
        target = offpolicy.td_target(batch, losses.bootstrap_value(next_q_target, next_q_online))

        def loss_fn(p):
            q_taken = losses.take_action(self.q_values(p, batch.observation), batch.action)
            loss, td_error = losses.td_loss(q_taken, target, weights, self.config.loss)
            return loss, (td_error, q_taken)

        (loss, (td_error, q_taken)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        params, learner = self.apply_gradients(params, learner, grads, hparams, grad_step)
        return params, learner, td_error, {"loss": loss, "q_mean": q_taken.mean()}

    def apply_gradients(
        self, params: Any, learner: QLearner, grads: Any, hparams: Any, grad_step: jax.Array
    ) -> tuple[Any, QLearner]:
        """One optimiser step, then the target network's update (every
        `target_update_interval` gradient steps, Polyak with `tau`; 1 is a hard copy)."""
        updates, opt_state = self._optimizer(hparams).update(grads, learner.opt_state, params)
        params = optax.apply_updates(params, updates)
        target_params = offpolicy.update_target(
            learner.target_params,
            params,
            hparams.tau,
            grad_step,
            self.config.target_update_interval,
        )
        return params, QLearner(target_params=target_params, opt_state=opt_state)


def make(config: DQNConfig, env: envs.Environment | None = None, env_params: Any = None) -> DQN:
    """Builds DQN for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return DQN(config, env, env_params if env_params is not None else env.default_params)
