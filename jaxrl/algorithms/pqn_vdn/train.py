"""PQN-VDN: `init(key, hparams) -> PQNVDNState` and the pure `update(state)`.

One `update` steps `num_envs` multi-agent environments `num_steps` times with the shared
on-policy rollout (`jaxrl.rollout`), every agent epsilon-greedy on its own Q-values
(the LayerNorm `jaxrl.nn.qnetwork.QNetwork`, run for all agents by
`jaxrl.nn.multiagent.AgentNetwork`: shared parameters with agent ids, or separate);
computes Peng's Q(lambda) targets of the team reward (`acting.team_reward`: the mean of
the agents' rewards) with the max of `Q_tot = sum_i Q_i` as bootstrap
(`jaxrl.returns.q_lambda_targets`); then runs `num_epochs` epochs of
`num_minibatches` minibatch steps on VDN's TD loss (`losses.py`). No replay buffer,
no target network, as PQN (Gallici et al. 2024). The fields, optimiser, epsilon
schedule, Q(lambda) bootstrap and TD epochs are PQN's (`jaxrl/algorithms/pqn_common.py`);
exploration is `qlearning.py`'s epsilon-greedy, within the legal actions where the
environment has an action mask (`multiagent_common.legal_epsilon_greedy`; the greedy
action and the bootstrap's max too).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import acting, prng, rollout
from jaxrl import config as cfg
from jaxrl.algorithms.multiagent_common import (
    action_mask,
    discrete_agents,
    legal_epsilon_greedy,
    legal_q_values,
)
from jaxrl.algorithms.pqn_common import (
    ParallelQLearner,
    next_max_q,
    td_epochs,
    time_limits_as_terminal,
)
from jaxrl.nn.multiagent import AgentNetwork
from jaxrl.nn.qnetwork import QNetwork
from jaxrl.returns import q_lambda_targets
from jaxrl.training.contract import EnvironmentAlgorithm
from jaxrl.updates import annealed_lr_scale

from .config import PRESETS, SWEEPABLE, PQNVDNConfig
from .losses import max_q_total, q_total, vdn_td_loss


@struct.dataclass
class PQNVDNState:
    """Everything a PQN-VDN run needs to continue exactly where it stopped."""

    params: Any
    opt_state: Any
    envs: rollout.EnvLoop  # the environments, their next observations, running episodes
    key: jax.Array
    update_step: jax.Array
    hparams: Any


class PQNVDN(ParallelQLearner, EnvironmentAlgorithm):
    """PQN with value decomposition for N agents (see the module docstring)."""

    name = "pqn-vdn"
    Config = PQNVDNConfig
    presets = PRESETS
    sweepable = SWEEPABLE
    multi_agent = True
    progress_unit = "env_steps"
    ENV_FIELDS = ("envs",)

    def __init__(self, config: PQNVDNConfig, env: Any, env_params: Any):
        self.config, self.env, self.env_params = config.validate(), env, env_params
        self.steps_per_update = config.batch_size
        self.num_updates = config.num_updates
        self.num_agents, num_actions = discrete_agents("pqn-vdn", config, env, env_params)
        q_network = QNetwork(
            action_dim=num_actions, hidden_sizes=tuple(config.hidden_sizes), norm=config.norm
        )
        # observations (M, N, F) -> Q-values (M, N, A)
        self.network = AgentNetwork(q_network, self.num_agents, config.parameter_sharing, (1,), 1)

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> PQNVDNState:
        c = self.config
        key, k_params, k_env = jax.random.split(key, 3)
        loop = rollout.EnvLoop.reset(self.env, self.env_params, k_env, c.num_envs)
        fresh = lambda: self.network.init(k_params, loop.obs["agents"])  # noqa: E731
        if params is None:
            params = fresh()
        else:
            cfg.check_same_tree("params", jax.eval_shape(fresh), params)
            params = jax.tree.map(jnp.asarray, params)
        return PQNVDNState(
            params=params,
            opt_state=self._optimizer(hparams, 1.0).init(params),
            envs=loop,
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def act(self, state: PQNVDNState, obs, carry, reset, key, deterministic: bool = True):
        """Every agent's action `(B, N)`: greedy, or epsilon-greedy with `eps_end`."""
        q_values, mask = self.network.apply(state.params, obs["agents"]), action_mask(obs)
        if deterministic:
            return jnp.argmax(legal_q_values(q_values, mask), axis=-1).astype(jnp.int32), carry
        return legal_epsilon_greedy(key, q_values, state.hparams.eps_end, mask), carry

    def update(self, state: PQNVDNState) -> tuple[PQNVDNState, dict[str, jax.Array]]:
        """One iteration: epsilon-greedy rollout, Q(lambda) targets of the team reward on
        max Q_tot, `num_epochs` of minibatch steps on the VDN TD loss."""
        c, hp = self.config, state.hparams
        epsilon = self.epsilon(state)

        def policy(_, obs, reset, key):
            q_values, mask = self.network.apply(state.params, obs["agents"]), action_mask(obs)
            action = legal_epsilon_greedy(key, q_values, epsilon, mask)
            max_q = max_q_total(legal_q_values(q_values, mask), obs["alive"])
            return None, rollout.PolicyStep(action, {"max_q": max_q})

        keep_final = (lambda _, final: final) if c.bootstrap_truncation else None
        loop, _, key, traj = rollout.rollout(
            self.env,
            self.env_params,
            policy,
            state.envs,
            None,
            state.key,
            c.num_steps,
            record_final=keep_final,
        )
        # One Q pass over [final observations (with the bootstrap); last observation].
        t, b = c.num_steps, c.num_envs
        parts = [] if traj.final is None else [traj.final]
        after = jax.tree.map(
            lambda *xs: jnp.concatenate([x.reshape((-1,) + x.shape[2:]) for x in xs]),
            *parts,
            jax.tree.map(lambda x: x[None], loop.obs),
        )
        q_after = legal_q_values(
            self.network.apply(state.params, after["agents"]), action_mask(after)
        )
        max_after = max_q_total(q_after, after["alive"])
        terminated, truncated = time_limits_as_terminal(
            traj.terminated, traj.truncated, c.bootstrap_truncation
        )
        final_q = max_after[:-b].reshape(t, b) if c.bootstrap_truncation else None
        next_q = next_max_q(traj.extras["max_q"], max_after[-b:], final_q, terminated, truncated)
        reward = acting.team_reward(traj.reward, traj.done) * hp.reward_scale
        targets = q_lambda_targets(reward, terminated, truncated, next_q, hp.gamma, hp.q_lambda)

        lr_scale = annealed_lr_scale(state.update_step, c.num_updates, c.anneal_lr)
        flat = lambda x: x.reshape((c.batch_size,) + x.shape[2:])  # noqa: E731
        key, k_epochs = prng.split(key)
        params, opt_state, metrics = td_epochs(
            self._loss,
            self._optimizer(hp, lr_scale),
            state.params,
            state.opt_state,
            jax.tree.map(flat, (traj.obs["agents"], traj.obs["alive"], traj.action, targets)),
            k_epochs,
            num_epochs=c.num_epochs,
            num_minibatches=c.num_minibatches,
        )
        state = PQNVDNState(params, opt_state, loop, key, state.update_step + 1, hp)
        return state, {
            **metrics,
            "epsilon": epsilon,
            "lr": hp.lr * lr_scale,
            **acting.episode_metrics(traj.finished),
        }

    def _loss(self, params, obs, alive, action, targets):
        q_values = self.network.apply(params, obs)  # (M, N, A)
        q_taken = jnp.take_along_axis(q_values, action[..., None], axis=-1)[..., 0]
        q_tot = q_total(q_taken, alive)
        return vdn_td_loss(q_tot, targets), q_tot.mean()
