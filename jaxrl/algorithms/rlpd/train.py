"""RLPD: online SAC with offline data, on the shared replay base
(`jaxrl/algorithms/offpolicy.py`, `actor_critic.py`).

What makes it RLPD (Ball et al. 2023): `replay_batch` draws `offline_batch` of every
batch from the offline dataset (a full replay ring, `jaxrl.datasets.to_replay`, kept in
the learner and so in checkpoints: a resumed run samples the same data) and the rest
from the online replay buffer; the critics are a LayerNorm `EnsembleQ`; the target's
minimum is over `critic_subset` critics drawn at random at every gradient step
(`losses.py`); several gradient steps follow each environment step. The soft target,
the actor's and the temperature's steps are the shared SAC backbone's. `load_params`
starts from an offline run (`init_from`: cql, sac-n, iql, td3-bc, rebrac; the mapping is
`warm_start.py`), so `jaxrl train iql ...` then `jaxrl train rlpd --init-from RUN_DIR`
is offline-to-online; the online run is a run like any other (checkpoints, `--resume`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import config as cfg
from jaxrl import datasets, envs, prng
from jaxrl.algorithms import offpolicy
from jaxrl.algorithms.actor_critic import (
    ActorCriticAgent,
    EnsembleQ,
    SoftLearner,
    SquashedGaussianActor,
    adam_update,
    init_actor_critic,
    soft_policy_step,
    soft_td_target,
    twin_critic_loss,
)
from jaxrl.algorithms.offpolicy import OffPolicyState
from jaxrl.replay import buffer, nstep
from jaxrl.replay.nstep import NStepBatch

from . import losses, warm_start
from .config import PRESETS, SWEEPABLE, RLPDConfig

__all__ = ["RLPD", "RLPDLearner"]


@struct.dataclass
class RLPDLearner:
    """SAC's learner state and the offline dataset's ring (None without one)."""

    target_critic: Any
    actor_opt: Any
    critic_opt: Any
    log_alpha: jax.Array
    alpha_opt: Any
    offline: Any  # buffer.ReplayState of the dataset, or None


class RLPD(ActorCriticAgent):
    """RLPD for one environment and static config. `params` is `{"actor", "critic"}`."""

    name = "rlpd"
    Config: ClassVar[type] = RLPDConfig
    presets = PRESETS
    sweepable = SWEEPABLE

    def __init__(self, config: RLPDConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.actor = SquashedGaussianActor(
            self.action_dim, sizes, activation, config.actor_layer_norm
        )
        self.critic = EnsembleQ(sizes, activation, config.num_critics, config.layer_norm)
        # The target's random subset of the critics, as an ensemble of its own size.
        self.target_subset = EnsembleQ(sizes, activation, config.critic_subset, config.layer_norm)
        self.data = None
        if config.dataset:
            self.data = datasets.check(
                datasets.load(config.dataset),
                env.observation_space(env_params),
                self.action_space,
                config.env,
            )
            cfg.check(
                config.offline_batch <= len(self.data),
                "batch_size",
                config.batch_size,
                f"with offline_ratio={config.offline_ratio}: at most the dataset's "
                f"{len(self.data)} transitions from it",
            )

    def hyperparams(self, **overrides: float) -> Any:
        """The sweepable hyperparameters; a `target_entropy` of None becomes -action_dim."""
        if overrides.get("target_entropy", self.config.target_entropy) is None:
            overrides = {**overrides, "target_entropy": -float(self.action_dim)}
        return super().hyperparams(**overrides)

    def load_params(self) -> Any:
        """`{"actor", "critic"}` from agent 0 of the `init_from` run's newest checkpoint,
        mapped onto RLPD's networks (`warm_start.from_run`: cql, sac-n, iql, td3-bc,
        rebrac; a `ConfigError` names what does not match)."""
        if not self.config.init_from:
            return None
        from jaxrl.evaluation import load_run

        source, state, _ = load_run(self.config.init_from)
        return warm_start.from_run(self, source, state, self.config.init_from)

    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, RLPDLearner]:
        """Fresh (or `init_from`'s) networks, SAC's learner state, the dataset's ring."""
        params = init_actor_critic(self, key, params)
        soft = SoftLearner.create(params, hparams.alpha)
        offline = None if self.data is None else datasets.to_replay(self.data, self.action_space)
        return params, RLPDLearner(
            target_critic=soft.target_critic,
            actor_opt=soft.actor_opt,
            critic_opt=soft.critic_opt,
            log_alpha=soft.log_alpha,
            alpha_opt=soft.alpha_opt,
            offline=offline,
        )

    def explore(self, params, learner, hparams, obs, key, update_step) -> jax.Array:
        """`tanh(u)`, u sampled from the policy."""
        return jnp.tanh(self.actor.apply(params["actor"], obs).sample(key))

    def act(self, state: OffPolicyState, obs, carry, reset, key, deterministic: bool = True):
        """`tanh` of the Gaussian's mean (or of a sample), on the environment's bounds."""
        dist = self.actor.apply(state.params["actor"], obs)
        u = dist.mode() if deterministic else dist.sample(key)
        return self.to_env_action(jnp.tanh(u)), carry

    def replay_batch(
        self, learner: RLPDLearner, replay: Any, key: jax.Array, hparams: Any, beta: jax.Array
    ) -> tuple[NStepBatch, Any, jax.Array]:
        """Symmetric sampling (Ball et al. 2023, sec. 3.1): `offline_batch` transitions
        from the dataset and the rest from replay, concatenated."""
        c = self.config
        if learner.offline is None:
            return super().replay_batch(learner, replay, key, hparams, beta)
        k_online, k_offline = prng.split(key)
        online = buffer.sample(replay, k_online, c.batch_size - c.offline_batch)
        offline = buffer.sample(learner.offline, k_offline, c.offline_batch)
        batch = jax.tree.map(
            lambda a, b: jnp.concatenate([a, b]),
            nstep.nstep_batch(replay, online.indices, c.n_step, hparams.gamma),
            nstep.nstep_batch(learner.offline, offline.indices, c.n_step, hparams.gamma),
        )
        return batch, online, jnp.ones((c.batch_size,), jnp.float32)

    def learn_step(
        self,
        params: Any,
        learner: RLPDLearner,
        batch: NStepBatch,
        weights: jax.Array,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, RLPDLearner, None, Mapping[str, jax.Array]]:
        """SAC's step on the mixed batch: critics (towards the minimum over a random
        `critic_subset` of the target critics), targets, actor and temperature."""
        c, hp = self.config, hparams
        alpha = jnp.exp(learner.log_alpha)
        if c.critic_subset < c.num_critics:  # min over a random subset (losses.py)
            k_next, k_actor, k_subset = prng.split(key, 3)
            subset = losses.critic_subset(k_subset, c.num_critics, c.critic_subset)
            target_critic = losses.take_critics(learner.target_critic, subset)
            target_net = self.target_subset
        else:  # the minimum over all: SAC's clipped double Q
            k_next, k_actor = prng.split(key)
            target_critic, target_net = learner.target_critic, self.critic
        next_dist = self.actor.apply(params["actor"], batch.next_observation)
        next_u = next_dist.sample(k_next)
        next_q = target_net.apply(target_critic, batch.next_observation, jnp.tanh(next_u))
        target = soft_td_target(batch, next_q, next_dist.log_prob(next_u), alpha)

        def critic_loss_fn(p):
            q = self.critic.apply(p, batch.observation, batch.action)
            return twin_critic_loss(q, target), q

        (loss, q), grads = jax.value_and_grad(critic_loss_fn, has_aux=True)(params["critic"])
        critic, critic_opt = adam_update(grads, learner.critic_opt, params["critic"], hp.critic_lr)
        target_critic = offpolicy.update_target(
            learner.target_critic, critic, hp.tau, grad_step, self.config.target_update_interval
        )
        actor, actor_opt, log_alpha, alpha_opt, stats = soft_policy_step(
            self.actor,
            self.critic,
            {"actor": params["actor"], "critic": critic},
            learner,
            batch.observation,
            hp,
            self.config.autotune,
            k_actor,
        )
        learner = learner.replace(
            target_critic=target_critic,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            log_alpha=log_alpha,
            alpha_opt=alpha_opt,
        )
        metrics = {"loss": loss, "q_mean": q.mean(), **stats}
        return {"actor": actor, "critic": critic}, learner, None, metrics
