"""PQN-VDN: `init(key, hparams) -> PQNVDNState` and the pure `update(state)`.

One `update` steps `num_envs` multi-agent environments `num_steps` times with the shared
on-policy rollout (`jaxrl.rollout`), every agent epsilon-greedy on its own Q-values
(the LayerNorm `jaxrl.nn.qnetwork.QNetwork`, run for all agents by
`jaxrl.nn.multiagent.AgentNetwork`: shared parameters with agent ids, or separate);
computes Peng's Q(lambda) targets of the team reward (`acting.team_reward`: the mean of
the agents' rewards) with the max of `Q_tot = sum_i Q_i` as bootstrap
(`jaxrl.returns.q_lambda_targets`); then runs `num_epochs` epochs of
`num_minibatches` minibatch steps on VDN's TD loss (`losses.py`). No replay buffer,
no target network, as PQN (Gallici et al. 2024). Exploration comes from
`jaxrl/algorithms/qlearning.py`, shared with PQN, DQN and C51.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import acting, envs, prng, rollout
from jaxrl import config as cfg
from jaxrl.algorithms.qlearning import epsilon_greedy, linear_epsilon
from jaxrl.minibatches import run_epochs
from jaxrl.nn.multiagent import AgentNetwork
from jaxrl.nn.qnetwork import QNetwork
from jaxrl.returns import q_lambda_targets
from jaxrl.training.contract import EnvironmentAlgorithm

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


class PQNVDN(EnvironmentAlgorithm):
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
        cfg.check(
            getattr(env, "multi_agent", False),
            "env",
            config.env,
            f"a multi-agent environment ({envs.registered(multi_agent=True)} or jaxmarl:<id>)",
        )
        space = env.agent_action_space(env_params)
        cfg.check(
            isinstance(space, envs.spaces.Discrete),
            "env",
            config.env,
            f"an environment with Discrete agent actions (pqn-vdn), got {space!r}",
        )
        self.num_agents = int(env.num_agents)
        q_network = QNetwork(
            action_dim=int(space.n), hidden_sizes=tuple(config.hidden_sizes), norm=config.norm
        )
        # observations (M, N, F) -> Q-values (M, N, A)
        self.network = AgentNetwork(q_network, self.num_agents, config.parameter_sharing, (1,), 1)

    @property
    def schedule_follows_total(self) -> bool:
        """`anneal_lr` and the epsilon decay (a fraction of the run) follow `total_steps`."""
        c = self.config
        return c.anneal_lr or (c.eps_fraction > 0 and c.eps_end != c.eps_start)

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

    def _optimizer(self, hp: Any, lr_scale: jax.Array | float) -> optax.GradientTransformation:
        """Global-norm clipping, then RAdam or Adam (as PQN's)."""
        c = self.config
        scale_by = optax.scale_by_radam if c.optimizer == "radam" else optax.scale_by_adam
        return optax.flatten(
            optax.chain(
                optax.clip_by_global_norm(hp.max_grad_norm),
                scale_by(eps=c.adam_eps),
                optax.scale(-hp.lr * lr_scale),
            )
        )

    def epsilon(self, state: PQNVDNState) -> jax.Array:
        """The exploration rate of the update `state` is about to run."""
        hp = state.hparams
        return linear_epsilon(
            state.update_step, self.num_updates, hp.eps_start, hp.eps_end, hp.eps_fraction
        )

    def act(self, state: PQNVDNState, obs, carry, reset, key, deterministic: bool = True):
        """Every agent's action `(B, N)`: greedy, or epsilon-greedy with `eps_end`."""
        q_values = self.network.apply(state.params, obs["agents"])
        if deterministic:
            return jnp.argmax(q_values, axis=-1).astype(jnp.int32), carry
        return epsilon_greedy(key, q_values, state.hparams.eps_end), carry

    def update(self, state: PQNVDNState) -> tuple[PQNVDNState, dict[str, jax.Array]]:
        """One iteration: epsilon-greedy rollout, Q(lambda) targets of the team reward on
        max Q_tot, `num_epochs` of minibatch steps on the VDN TD loss."""
        c, hp = self.config, state.hparams
        epsilon = self.epsilon(state)

        def policy(_, obs, reset, key):
            q_values = self.network.apply(state.params, obs["agents"])
            action = epsilon_greedy(key, q_values, epsilon)
            return None, rollout.PolicyStep(action, {"max_q": max_q_total(q_values, obs["alive"])})

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
        max_after = max_q_total(self.network.apply(state.params, after["agents"]), after["alive"])
        next_q = jnp.concatenate([traj.extras["max_q"][1:], max_after[-b:][None]])
        terminated, truncated = traj.terminated, traj.truncated
        if c.bootstrap_truncation:
            final_q = max_after[:-b].reshape(t, b)
            next_q = jnp.where(truncated & ~terminated, final_q, next_q)
        else:  # a time limit as a terminal state
            terminated, truncated = traj.done, jnp.zeros_like(truncated)
        reward = acting.team_reward(traj.reward, traj.done) * hp.reward_scale
        targets = q_lambda_targets(reward, terminated, truncated, next_q, hp.gamma, hp.q_lambda)

        lr_scale = 1.0 - state.update_step / c.num_updates if c.anneal_lr else 1.0
        optimizer = self._optimizer(hp, lr_scale)
        grad_fn = jax.value_and_grad(self._loss, has_aux=True)
        flat = lambda x: x.reshape((c.batch_size,) + x.shape[2:])  # noqa: E731
        data = jax.tree.map(flat, (traj.obs["agents"], traj.obs["alive"], traj.action, targets))

        def minibatch_step(carry, minibatch):
            params, opt_state = carry
            (loss, q_mean), grads = grad_fn(params, *minibatch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), (loss, q_mean)

        key, k_epochs = prng.split(key)
        (params, opt_state), (loss, q_mean) = run_epochs(
            minibatch_step,
            (state.params, state.opt_state),
            data,
            k_epochs,
            num_epochs=c.num_epochs,
            num_minibatches=c.num_minibatches,
        )
        state = PQNVDNState(params, opt_state, loop, key, state.update_step + 1, hp)
        return state, {
            "loss": loss.mean(),
            "q_mean": q_mean.mean(),
            "epsilon": epsilon,
            "lr": hp.lr * lr_scale,
            **acting.episode_metrics(traj.finished),
        }

    def _loss(self, params, obs, alive, action, targets):
        q_values = self.network.apply(params, obs)  # (M, N, A)
        q_taken = jnp.take_along_axis(q_values, action[..., None], axis=-1)[..., 0]
        q_tot = q_total(q_taken, alive)
        return vdn_td_loss(q_tot, targets), q_tot.mean()
