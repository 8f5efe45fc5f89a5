"""What the continuous-control actor-critics on the replay base (SAC, TD3) share.

* `ActorCriticConfig`: the fields both add to `OffPolicyConfig` (an Adam learning
  rate for the actor and one for the critics, actor-critic defaults for the replay
  fields); SAC's and TD3's configs subclass it.
* `EnsembleQ` / `TwinQ`: N (two) Q(s, a) critics run as one vmapped ensemble,
  `(obs, action) -> (N, B)`, optionally with LayerNorm (RLPD, ReBRAC).
* The actors: `SquashedGaussianActor` (SAC, RLPD; the offline learners that need a
  stochastic policy with a tractable log-probability of its own samples),
  `DeterministicActor` (TD3, TD3+BC, ReBRAC) and `GaussianActor` (IQL: unsquashed, a
  state-independent standard deviation).
* `clipped_double_q`, `twin_critic_loss` and `smoothed_target_action`: the clipped
  double-Q estimate (Fujimoto et al. 2018), the critics' regression on one target,
  and TD3's target policy smoothing.
* The update plumbing: `adam` / `adam_update` (Adam with a traced learning rate),
  `critic_update` (one step of the twin critics), `where_due` (delayed updates),
  `init_actor_critic` (the `{"actor", "critic"}` parameters).
* `ActorCriticAgent`: the `OffPolicy` base for agents that act in the normalised box
  [-1, 1]^d (`to_env_action` maps it onto the environment's bounds).

SAC (`jaxrl/algorithms/sac/`), TD3 (`jaxrl/algorithms/td3/`) and the offline learners
(`jaxrl/algorithms/offline.py`: IQL, TD3+BC) build on these, not on each other; their
losses stay in their own packages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import config as cfg
from jaxrl.acting import to_box
from jaxrl.algorithms.offpolicy import OffPolicy, OffPolicyConfig, td_target, update_target
from jaxrl.nn import MLP, Dense, DiagGaussian, TanhGaussian, flatten_obs, orthogonal
from jaxrl.nn.layers import activation_fn
from jaxrl.replay.nstep import NStepBatch


@dataclasses.dataclass(frozen=True)
class ActorCriticConfig(OffPolicyConfig):
    """Fields shared by SAC and TD3: the two learning rates, and actor-critic defaults
    for the replay fields of `OffPolicyConfig` (SB3's batch size, tau and learning
    rates for SAC and TD3, CleanRL's learning_starts; the base's 100k buffer)."""

    env: str = "Pendulum-v1"
    """Environment id (see `jaxrl envs`); needs a 1-D Box action space."""
    batch_size: int = 256
    """Transitions per gradient step."""
    learning_starts: int = 5_000
    """Environment steps (per agent) of uniformly random actions before learning starts."""
    tau: float = 0.005
    """Target network update: target <- tau * online + (1 - tau) * target (1.0: hard copy)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the twin critics."""

    def validate(self) -> ActorCriticConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "actor_lr", "critic_lr")
        # Prioritised replay is not part of SAC or TD3 as published or as SB3, CleanRL
        # and rejax implement them (its benefit for continuous control is unclear, e.g.
        # Fujimoto et al. 2020, "An Equivalence between Loss Functions and Non-Uniform
        # Sampling in Experience Replay"), so these agents sample uniformly.
        cfg.check(
            not self.prioritised,
            "prioritised",
            self.prioritised,
            "False (SAC and TD3 sample replay uniformly; prioritised replay is for dqn/c51)",
        )
        return self


class ActorCriticAgent(OffPolicy):
    """An `OffPolicy` agent with continuous actions in the normalised box [-1, 1]^d
    (a tanh output layer is the bound). A subclass sets `actor` and `critic` in its
    `__init__` and provides the rest of `OffPolicy`'s hooks."""

    action_kind = "continuous"

    def to_env_action(self, action: jax.Array) -> jax.Array:
        """Maps an action of [-1, 1]^d onto the environment's Box bounds."""
        return to_box(action, self.action_space)


# ----------------------------------------------------------------------------- twin critics

NUM_CRITICS = 2


def dense(features: int, scale: float) -> Dense:
    """A linear layer with orthogonal weights of gain `scale` and zero biases."""
    return Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


class QValue(nn.Module):
    """One critic: `Q(s, a)` from the concatenated flat observation and action, `(B,)`.

    With `layer_norm`, each hidden layer is Dense -> LayerNorm -> activation, which
    keeps Q-values of actions outside the data bounded (Ball et al. 2023, "Efficient
    Online Reinforcement Learning with Offline Data", sec. 3.2; Tarasov et al. 2023's
    ReBRAC uses it too)."""

    hidden_sizes: Sequence[int]
    activation: str
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([flatten_obs(obs, 1), action.astype(jnp.float32)], axis=-1)
        if self.layer_norm:
            x = normed_mlp(x, self.hidden_sizes, self.activation)
        else:
            x = MLP(self.hidden_sizes, self.activation)(x)
        return dense(1, 1.0)(x)[..., 0]


def normed_mlp(x: jax.Array, hidden_sizes: Sequence[int], activation: str) -> jax.Array:
    """Dense -> LayerNorm -> activation per hidden layer (called inside a compact module)."""
    act = activation_fn(activation)
    for size in hidden_sizes:
        x = act(nn.LayerNorm()(dense(size, float(np.sqrt(2.0)))(x)))
    return x


class EnsembleQ(nn.Module):
    """`num_critics` critics with their own parameters run as a vmapped ensemble: one
    batched matrix product per layer. `(obs (B, ...), action (B, d)) -> Q (N, B)`.
    SAC-N and EDAC (An et al. 2021) use large ensembles; `TwinQ` is N = 2.

    Each critic gets its own copy of the inputs (broadcast to `(N, B, ...)`), so every
    layer, the first included, is a product batched over the critics. With the inputs
    shared, XLA computes the first layer of all as one `[B, in] x [in, N * H]`
    product, whose activations and gradients are laid out `[B, N, H]`, and on CPU
    transposes them to and from the other layers' `[N, B, H]` at every gradient step,
    a cost measured by benchmarks/README.md's "Off-policy throughput". Same parameters
    and values either way.
    """

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    num_critics: int = NUM_CRITICS
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        n = self.num_critics
        ensemble = nn.vmap(
            QValue,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            axis_size=n,
        )
        obs, action = (jnp.broadcast_to(x, (n, *x.shape)) for x in (obs, action))
        critics = ensemble(self.hidden_sizes, self.activation, self.layer_norm, name="critics")
        return critics(obs, action)


class TwinQ(EnsembleQ):
    """Two critics (Fujimoto et al. 2018's clipped double Q): `EnsembleQ` with N = 2,
    `(obs (B, ...), action (B, d)) -> Q-values (2, B)`."""


# ----------------------------------------------------------------------------- actors

# Bounds of the squashed Gaussian's log standard deviation (CleanRL's SAC; SB3 clips to
# [-20, 2]): a tanh maps the raw output smoothly into them, so the gradient never
# vanishes at a clip.
LOG_STD_MIN = -5.0
LOG_STD_MAX = 2.0


def squash_log_std(raw: jax.Array) -> jax.Array:
    """Maps an unbounded output into [LOG_STD_MIN, LOG_STD_MAX] with a tanh."""
    return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (jnp.tanh(raw) + 1.0)


class SquashedGaussianActor(nn.Module):
    """SAC's policy (Haarnoja et al. 2018): `obs (B, ...) -> TanhGaussian` whose mean
    and log standard deviation are two heads on one MLP. Actions are `tanh(u)` of a
    sample `u`; `TanhGaussian.log_prob(u)` includes the change of variables. With
    `layer_norm`, LayerNorm after each hidden layer (RLPD starting from a ReBRAC actor)."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> TanhGaussian:
        x = flatten_obs(obs, 1)
        if self.layer_norm:
            x = normed_mlp(x, self.hidden_sizes, self.activation)
        else:
            x = MLP(self.hidden_sizes, self.activation)(x)
        mean = dense(self.action_dim, 0.01)(x)
        log_std = squash_log_std(dense(self.action_dim, 0.01)(x))
        return TanhGaussian(mean, log_std)


class DeterministicActor(nn.Module):
    """TD3's policy (Fujimoto et al. 2018): `obs (B, ...) -> tanh(MLP(obs)) (B, d)`;
    with `layer_norm`, LayerNorm after each hidden layer (ReBRAC, Tarasov et al. 2023)."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    layer_norm: bool = False

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = flatten_obs(obs, 1)
        if self.layer_norm:
            x = normed_mlp(x, self.hidden_sizes, self.activation)
        else:
            x = MLP(self.hidden_sizes, self.activation)(x)
        return jnp.tanh(dense(self.action_dim, 0.01)(x))


class GaussianActor(nn.Module):
    """IQL's policy (Kostrikov et al. 2021, the authors' code): `obs (B, ...) ->
    DiagGaussian(tanh(MLP(obs)), log_std)` with a state-independent, learned log standard
    deviation in [LOG_STD_MIN, LOG_STD_MAX]. Unsquashed, so the log-probability of a
    dataset action on the box's edge (|a| = 1) stays finite, which advantage-weighted
    regression needs; the mean is inside the box."""

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array) -> DiagGaussian:
        x = MLP(self.hidden_sizes, self.activation)(flatten_obs(obs, 1))
        mean = jnp.tanh(dense(self.action_dim, 0.01)(x))
        log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
        return DiagGaussian(mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX))


# ----------------------------------------------------------------------------- targets


def smoothed_target_action(
    next_action: jax.Array, noise: jax.Array, policy_noise: jax.Array, noise_clip: jax.Array
) -> jax.Array:
    """`clip(mu'(s') + clip(policy_noise * eps, -c, c), -1, 1)`, eps ~ N(0, 1).

    Target policy smoothing (Fujimoto et al. 2018, eq. 14): valuing a small clipped
    neighbourhood of the target action keeps the critic from exploiting narrow peaks
    of its own error. `next_action` is the target actor's, `noise` standard normal.
    TD3 and TD3+BC use it.
    """
    smoothing = jnp.clip(policy_noise * noise, -noise_clip, noise_clip)
    return jnp.clip(next_action + smoothing, -1.0, 1.0)


def clipped_double_q(q: jax.Array) -> jax.Array:
    """`min(Q_1, Q_2)` over the critic axis (Fujimoto et al. 2018, eq. 10): the smaller
    estimate counters the overestimation bias of maximising a learned Q."""
    return jnp.min(q, axis=0)


def twin_critic_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """`sum_i mean_b (Q_i(s, a) - y)^2`: both critics regress on the same target
    (Haarnoja et al. 2018, eq. 5; Fujimoto et al. 2018's TD3, as in their code); with
    `q (N, B)`, all N critics of an ensemble do (SAC-N, An et al. 2021)."""
    return jnp.sum(jnp.mean((q - target[None]) ** 2, axis=-1))


# ----------------------------------------------------------------------------- soft actor-critic


def soft_td_target(
    batch: NStepBatch, next_q: jax.Array, next_log_prob: jax.Array, alpha: jax.Array
) -> jax.Array:
    """`y = r + discount * (min_i Q'_i(s', a') - alpha * log pi(a'|s'))`, a' ~ pi(s').

    The soft Bellman backup (Haarnoja et al. 2018, eqs. 2-3) with the clipped double-Q
    of the target critics `next_q (N, B)` (the minimum over all N: SAC-N, An et al.
    2021, eq. 3); `next_log_prob (B,)` is the current policy's log-probability of its
    sampled next action. SAC, SAC-N/EDAC and CQL use it.
    """
    return td_target(batch, clipped_double_q(next_q) - alpha * next_log_prob)


def soft_actor_loss(q: jax.Array, log_prob: jax.Array, alpha: jax.Array) -> jax.Array:
    """`mean(alpha * log pi(a|s) - min_i Q_i(s, a))`, a = tanh(mean + std * eps)
    reparameterised (Haarnoja et al. 2018, eqs. 7 and 11): maximise the soft value."""
    return jnp.mean(alpha * log_prob - clipped_double_q(q))


def temperature_loss(
    log_alpha: jax.Array, log_prob: jax.Array, target_entropy: jax.Array
) -> jax.Array:
    """`-mean(log_alpha * (log pi(a|s) + target_entropy))`, the policy term held fixed.

    Haarnoja et al. 2018, eq. 18, in the logarithm of alpha as their softlearning
    code (and SB3) optimise it: its gradient lowers alpha when the policy's entropy
    `-log pi` exceeds the target and raises it when it falls below.
    """
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + target_entropy))


def soft_actor_update(
    actor: nn.Module,
    critic: nn.Module,
    actor_params: Any,
    actor_opt: Any,
    critic_params: Any,
    obs: jax.Array,
    alpha: jax.Array,
    lr: jax.Array,
    key: jax.Array,
) -> tuple[Any, Any, jax.Array, jax.Array]:
    """One Adam step of a squashed-Gaussian actor on `soft_actor_loss` against the
    critics `critic_params`: `(actor_params, actor_opt, loss, log_prob)` (log-probs of
    the sampled actions, without gradient, for the temperature's step)."""

    def loss_fn(p):
        dist = actor.apply(p, obs)
        u = dist.sample(key)  # reparameterised: the gradient flows through the sample
        log_prob = dist.log_prob(u)
        q = critic.apply(critic_params, obs, jnp.tanh(u))
        return soft_actor_loss(q, log_prob, alpha), log_prob

    (loss, log_prob), grads = jax.value_and_grad(loss_fn, has_aux=True)(actor_params)
    actor_params, actor_opt = adam_update(grads, actor_opt, actor_params, lr)
    return actor_params, actor_opt, loss, jax.lax.stop_gradient(log_prob)


@struct.dataclass
class SoftLearner:
    """What a squashed-Gaussian actor-critic with a learned temperature keeps besides its
    online parameters (the offline learners on the SAC backbone: SAC-N/EDAC, CQL)."""

    target_critic: Any  # Polyak average of params["critic"]
    actor_opt: Any  # Adam's moments, per network
    critic_opt: Any
    log_alpha: jax.Array  # log of the entropy temperature (fixed without autotune)
    alpha_opt: Any

    @classmethod
    def create(cls, params: Any, alpha: jax.Array) -> SoftLearner:
        """Targets as copies of the critics, fresh Adam states, log(alpha) at `alpha`."""
        log_alpha = jnp.log(alpha)
        return cls(
            target_critic=params["critic"],
            actor_opt=adam(1.0).init(params["actor"]),
            critic_opt=adam(1.0).init(params["critic"]),
            log_alpha=log_alpha,
            alpha_opt=adam(1.0).init(log_alpha),
        )


def soft_policy_step(
    actor: nn.Module,
    critic: nn.Module,
    params: Any,
    learner: SoftLearner,
    obs: jax.Array,
    hparams: Any,
    autotune: bool,
    key: jax.Array,
) -> tuple[Any, Any, jax.Array, Any, dict[str, jax.Array]]:
    """The actor's step against `params["critic"]`, then (with `autotune`) the
    temperature's on `temperature_loss` (Haarnoja et al. 2018, sec. 5):
    `(actor, actor_opt, log_alpha, alpha_opt, metrics)` (hparams: `actor_lr`,
    `alpha_lr`, `target_entropy`)."""
    alpha = jnp.exp(learner.log_alpha)
    actor_params, actor_opt, loss, log_prob = soft_actor_update(
        actor, critic, params["actor"], learner.actor_opt, params["critic"], obs, alpha,
        hparams.actor_lr, key,
    )  # fmt: skip
    log_alpha, alpha_opt = learner.log_alpha, learner.alpha_opt
    if autotune:
        grad = jax.grad(temperature_loss)(log_alpha, log_prob, hparams.target_entropy)
        log_alpha, alpha_opt = adam_update(grad, alpha_opt, log_alpha, hparams.alpha_lr)
    metrics = {"actor_loss": loss, "entropy": -jnp.mean(log_prob), "alpha": alpha}
    return actor_params, actor_opt, log_alpha, alpha_opt, metrics


@struct.dataclass
class DelayedLearner:
    """What a deterministic actor-critic with delayed policy updates keeps besides its
    online parameters (TD3's family: TD3, TD3+BC, ReBRAC)."""

    target_actor: Any  # Polyak averages of params["actor"] and params["critic"]
    target_critic: Any
    actor_opt: Any  # Adam's moments, per network
    critic_opt: Any

    @classmethod
    def create(cls, params: Any) -> DelayedLearner:
        """Targets as copies of the online networks, fresh Adam states."""
        return cls(
            target_actor=params["actor"],
            target_critic=params["critic"],
            actor_opt=adam(1.0).init(params["actor"]),
            critic_opt=adam(1.0).init(params["critic"]),
        )


def delayed_policy_step(
    actor_loss_fn: Callable[[Any], jax.Array],
    actor_params: Any,
    critic_params: Any,
    learner: DelayedLearner,
    critic_opt: Any,
    hparams: Any,
    grad_step: jax.Array,
    policy_delay: int,
) -> tuple[dict[str, Any], DelayedLearner, jax.Array]:
    """The actor's Adam step on `actor_loss_fn` and the targets' Polyak step, both
    applied only on every `policy_delay`-th gradient step (Fujimoto et al. 2018, alg. 1:
    the targets move with the actor), after the critics' step that produced
    `critic_params` and `critic_opt`. Returns `({"actor", "critic"}, learner, actor loss)`
    (hparams: `actor_lr`, `tau`)."""
    actor_loss, grads = jax.value_and_grad(actor_loss_fn)(actor_params)
    updated = adam_update(grads, learner.actor_opt, actor_params, hparams.actor_lr)
    actor, actor_opt = where_due(
        grad_step, policy_delay, updated, (actor_params, learner.actor_opt)
    )
    target_actor, target_critic = update_target(
        (learner.target_actor, learner.target_critic),
        (actor, critic_params),
        hparams.tau,
        grad_step,
        policy_delay,
    )
    learner = DelayedLearner(
        target_actor=target_actor,
        target_critic=target_critic,
        actor_opt=actor_opt,
        critic_opt=critic_opt,
    )
    return {"actor": actor, "critic": critic_params}, learner, actor_loss


# ----------------------------------------------------------------------------- update plumbing


def adam(lr: jax.Array | float) -> optax.GradientTransformation:
    """Adam (Kingma & Ba 2015) with a learning rate that may be a traced, per-agent
    hyperparameter; its state's structure does not depend on the value.

    On one flat vector (`optax.flatten`, as PPO and PQN): per parameter leaf, Adam's
    moment and parameter updates would be many small XLA kernels per gradient step,
    each costing dispatch time rather than arithmetic on CPU."""
    return optax.flatten(optax.chain(optax.scale_by_adam(), optax.scale(-lr)))


def adam_update(grads: Any, opt_state: Any, params: Any, lr: jax.Array) -> tuple[Any, Any]:
    """One Adam step: `(params, opt_state)`."""
    updates, opt_state = adam(lr).update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def critic_update(
    critic: nn.Module,
    params: Any,
    opt_state: Any,
    batch: NStepBatch,
    target: jax.Array,
    lr: jax.Array,
) -> tuple[Any, Any, jax.Array, jax.Array]:
    """One Adam step of the twin critics on `losses.twin_critic_loss` towards `target`:
    `(params, opt_state, loss, Q (2, B) before the step)`."""

    def loss_fn(p):
        q = critic.apply(p, batch.observation, batch.action)
        return twin_critic_loss(q, target), q

    (loss, q), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    params, opt_state = adam_update(grads, opt_state, params, lr)
    return params, opt_state, loss, q


def where_due(grad_step: jax.Array, every: int, new: Any, old: Any) -> Any:
    """`new` on every `every`-th gradient step (`grad_step` 0-based), else `old`.

    A select rather than a `lax.cond`: the driver vmaps agents by default, which turns
    a cond on their (batched) step counters into a select of both branches anyway, and
    this way the skipped update's metrics stay defined.
    """
    if every == 1:
        return new
    due = (grad_step + 1) % every == 0
    return jax.tree.map(lambda n, o: jnp.where(due, n, o), new, old)


def init_actor_critic(agent: ActorCriticAgent, key: jax.Array, params: Any) -> dict[str, Any]:
    """`{"actor": ..., "critic": ...}` for `agent.actor` and `agent.critic`: fresh, or
    the given warm-start `params` after checking they have the same tree."""
    k_actor, k_critic = jax.random.split(key)
    obs = jnp.zeros((1, *agent.obs_shape), jnp.float32)
    action = jnp.zeros((1, agent.action_dim), jnp.float32)

    def fresh():
        return {
            "actor": agent.actor.init(k_actor, obs),
            "critic": agent.critic.init(k_critic, obs, action),
        }

    if params is None:
        return fresh()
    cfg.check_same_tree("params", jax.eval_shape(fresh), params)
    return jax.tree.map(jnp.asarray, params)
