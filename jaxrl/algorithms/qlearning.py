"""What the Q-learning agents (DQN, C51, PQN) share.

* Exploration: `epsilon_greedy` and its `linear_epsilon` schedule; `resolve_torso`,
  the choice of the Q-network's observation encoder. PQN uses these only.
* The action choice of a bootstrap target: `next_action` (Q-learning's max or
  Double-Q's online argmax), `take_action`, `bootstrap_value`.
* `QNetwork`: DQN's and C51's Q-network (an MLP or MinAtar's small CNN torso, a
  linear or dueling head with one output, or one logit per atom, per action).
* `QLearningConfig`, `QLearner` and `QLearningAgent`: the value-based agent on the
  replay base (`jaxrl/algorithms/offpolicy.py`): its fields (optimiser, epsilon
  schedule, Double-Q, dueling, torso), its learner state (target network, Adam), and
  everything but the loss: epsilon-greedy exploration, greedy evaluation, Adam with
  global-norm clipping, the target network's updates. DQN
  (`jaxrl/algorithms/dqn/`) and C51 (`jaxrl/algorithms/c51/`) subclass it and add
  their `learn_step`, so neither depends on the other.

Each piece is checked in tests/algorithms/test_dqn.py, test_c51.py and test_pqn.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import config as cfg
from jaxrl import envs, prng
from jaxrl.algorithms.offpolicy import OffPolicy, OffPolicyConfig, OffPolicyState, update_target
from jaxrl.nn import MLP, Dense, conv, flatten_obs, orthogonal

# Numeric hyperparameters of DQN and C51 that may differ across a vmapped sweep: they
# live in the training state as float32 leaves. Everything else is static structure.
SWEEPABLE = (
    "lr",
    "gamma",
    "tau",
    "max_grad_norm",
    "eps_start",
    "eps_end",
    "eps_fraction",
)

# The MinAtar games DQN's and C51's presets cover.
MINATAR_GAMES = ("Breakout", "Asterix", "Freeway", "SpaceInvaders")

# Observation encoders of the Q-networks (the `network` config field): "auto" picks
# "conv" for (H, W, C) images and "mlp" otherwise.
NETWORKS = ("auto", "mlp", "conv")


def check_epsilon_schedule(config: Any) -> None:
    """Raises `ConfigError` unless `eps_start`, `eps_end` and `eps_fraction` of `config`
    describe a decaying `linear_epsilon` schedule (each in [0, 1], end <= start)."""
    for name in ("eps_start", "eps_end", "eps_fraction"):
        cfg.check_range(config, name, 0.0, 1.0)
    cfg.check(
        config.eps_end <= config.eps_start,
        "eps_end",
        config.eps_end,
        f"<= eps_start={config.eps_start} (epsilon decays)",
    )


def epsilon_greedy(key: jax.Array, q_values: jax.Array, epsilon: jax.Array | float) -> jax.Array:
    """Per row of `q_values (B, A)`: a uniformly random action with probability
    `epsilon`, else `argmax_a Q` (Sutton & Barto 2018, sec. 2.2). Returns int32 (B,)."""
    k_explore, k_action = prng.split(key)
    shape, num_actions = q_values.shape[:-1], q_values.shape[-1]
    greedy = jnp.argmax(q_values, axis=-1).astype(jnp.int32)
    # floor(U[0, A)) is uniform over the A actions; the min guards float rounding.
    uniform = prng.uniform(k_action, shape, maxval=float(num_actions))
    random = jnp.minimum(uniform.astype(jnp.int32), num_actions - 1)
    return jnp.where(prng.uniform(k_explore, shape) < epsilon, random, greedy)


def linear_epsilon(
    update_step: jax.Array,
    num_updates: int,
    eps_start: jax.Array | float,
    eps_end: jax.Array | float,
    eps_fraction: jax.Array | float,
) -> jax.Array:
    """Epsilon at `update_step`: linear from `eps_start` to `eps_end` over the first
    `eps_fraction * num_updates` updates, then constant (Mnih et al. 2015's schedule, by
    updates as purejaxql). `eps_fraction = 0` means `eps_end` from the start."""
    decay_updates = eps_fraction * num_updates
    progress = jnp.where(
        decay_updates > 0, jnp.minimum(update_step / jnp.maximum(decay_updates, 1e-9), 1.0), 1.0
    )
    return eps_start + (eps_end - eps_start) * progress


def resolve_torso(network: str, obs_shape: tuple[int, ...]) -> str:
    """The torso for `network` ("auto", "mlp" or "conv") and observations of `obs_shape`:
    "auto" is "conv" for images `(H, W, C)`, else "mlp"; "conv" needs an image."""
    is_image = len(obs_shape) == 3
    if network == "auto":
        return "conv" if is_image else "mlp"
    cfg.check(
        network != "conv" or is_image,
        "network",
        network,
        f'"mlp" or "auto" for observations of shape {obs_shape} ("conv" needs (H, W, C) images)',
    )
    return network


# ----------------------------------------------------------------------------- bootstrap actions


def next_action(next_q_target: jax.Array, next_q_online: jax.Array | None = None) -> jax.Array:
    """The action to bootstrap from in s', per row of `(B, A)` Q-values: int32 `(B,)`.

    Q-learning (Watkins 1989; DQN, Mnih et al. 2015) takes `argmax_a Q_target(s', a)`.
    Double Q-learning (van Hasselt et al. 2016, eq. 4) passes the online network's
    `next_q_online` and takes `argmax_a Q_online(s', a)`: selecting and evaluating the
    action with different networks removes max-operator overestimation.
    """
    selector = next_q_target if next_q_online is None else next_q_online
    return jnp.argmax(selector, axis=-1).astype(jnp.int32)


def take_action(values: jax.Array, action: jax.Array) -> jax.Array:
    """`values[b, action[b]]` for `values (B, A, ...)`: `(B, ...)`."""
    index = action.reshape(action.shape + (1,) * (values.ndim - 1))
    return jnp.take_along_axis(values, index, axis=1)[:, 0]


def bootstrap_value(next_q_target: jax.Array, next_q_online: jax.Array | None = None) -> jax.Array:
    """`Q_target(s', a*)` with `a* = next_action(...)`: `max_a Q_target(s', a)`, or the
    Double-Q value `Q_target(s', argmax_a Q_online(s', a))`."""
    return take_action(next_q_target, next_action(next_q_target, next_q_online))


# ----------------------------------------------------------------------------- the Q-network

TORSOS = ("mlp", "conv")


def dueling_aggregate(value: jax.Array, advantage: jax.Array) -> jax.Array:
    """`Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')` (Wang et al. 2016, eq. 9).

    `value (B, ...)` and `advantage (B, A, ...)`: the trailing axes (C51's atoms) are
    combined elementwise, as in Rainbow (Hessel et al. 2018, eq. 5 before the softmax).
    Subtracting the mean advantage makes V and A identifiable without changing the
    greedy action.
    """
    return value[:, None] + advantage - advantage.mean(axis=1, keepdims=True)


class ConvTorso(nn.Module):
    """MinAtar's DQN encoder (Young & Tian 2019): one 3x3 'valid' convolution with
    `channels` channels and a ReLU, flattened. Image observations `(B, H, W, C)`
    (MinAtar's booleans are cast to float32)."""

    channels: int = 16

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        x = conv.Conv(
            self.channels,
            kernel_size=(3, 3),
            padding="VALID",
            kernel_init=orthogonal(),
            bias_init=nn.initializers.zeros,
        )(obs.astype(jnp.float32))
        return flatten_obs(nn.relu(x), 1)


class QNetwork(nn.Module):
    """`obs (B, ...) -> Q-values (B, A)`, or C51 logits `(B, A, num_atoms)`.

    The torso ("mlp": the flattened observation; "conv": `ConvTorso` first) feeds the
    `hidden_sizes` MLP of `jaxrl.nn`, then a linear head, or with `dueling` a value
    and an advantage head combined by `dueling_aggregate`. `num_atoms = 1` gives one
    Q-value per action (DQN), more one logit per atom of the return distribution (C51).
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"
    torso: str = "mlp"
    conv_channels: int = 16
    dueling: bool = False
    num_atoms: int = 1

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        if self.torso == "conv":
            x = ConvTorso(self.conv_channels)(obs)
        elif self.torso == "mlp":
            x = flatten_obs(obs, 1)
        else:
            raise ValueError(f"torso must be one of {list(TORSOS)}, got {self.torso!r}")
        x = MLP(self.hidden_sizes, self.activation)(x)
        shape = (x.shape[0], self.action_dim, self.num_atoms)
        # Q-values (or logits) per action; with dueling, the advantages.
        per_action = _linear(self.action_dim * self.num_atoms)(x).reshape(shape)
        if self.dueling:
            per_action = dueling_aggregate(_linear(self.num_atoms)(x), per_action)
        return per_action[..., 0] if self.num_atoms == 1 else per_action


def _linear(features: int) -> Dense:
    """An output layer: orthogonal weights of gain 1, zero biases."""
    return Dense(features, kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros)


# ----------------------------------------------------------------------------- the replay agent


@dataclasses.dataclass(frozen=True)
class QLearningConfig(OffPolicyConfig):
    """Fields shared by DQN and C51 (`QLearningAgent`): optimiser, exploration,
    Double-Q, dueling heads, network torso."""

    lr: float = 2.5e-4
    """Adam learning rate."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    max_grad_norm: float = 10.0
    """Clip gradients to this global L2 norm before Adam (0: no clipping)."""
    eps_start: float = 1.0
    """Epsilon-greedy exploration: epsilon when learning starts (actions are uniformly
    random before learning_starts anyway)."""
    eps_end: float = 0.05
    """Epsilon-greedy exploration: epsilon after the decay (and for `jaxrl eval` sampling)."""
    eps_fraction: float = 0.1
    """Fraction of total_steps over which epsilon decays linearly from eps_start to eps_end.

    SB3's and CleanRL's exploration_fraction: epsilon(t) = eps_start + (eps_end -
    eps_start) * min(t / (eps_fraction * total_steps), 1) at environment step t (counted
    in whole updates). 0 means eps_end from the start.
    """
    double_q: bool = True
    """Double Q-learning targets (van Hasselt et al. 2016): the online network picks the
    next action, the target network values it; False: max of the target network."""
    dueling: bool = False
    """Dueling heads (Wang et al. 2016): Q = V + A - mean_a A."""
    network: str = "auto"
    """Observation encoder: "mlp", "conv" (image observations, as MinAtar's DQN) or
    "auto" ("conv" for (H, W, C) observations, else "mlp")."""
    conv_channels: int = 16
    """Channels of the 3x3 convolution of the "conv" torso (MinAtar's DQN: 16)."""

    def validate(self) -> QLearningConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "lr", "adam_eps", "conv_channels")
        cfg.check(
            cfg.is_finite_number(self.max_grad_norm) and self.max_grad_norm >= 0,
            "max_grad_norm",
            self.max_grad_norm,
            ">= 0 (0: no clipping)",
        )
        check_epsilon_schedule(self)
        cfg.check_choice(self, "network", NETWORKS)
        return self


@struct.dataclass
class QLearner:
    """What a Q-learner keeps besides its online parameters (`OffPolicyState.learner`)."""

    target_params: Any  # the target network, updated by `offpolicy.update_target`
    opt_state: Any  # Adam's moments


class QLearningAgent(OffPolicy):
    """The value-based agent on the replay base, for one environment and one static
    config: everything DQN and C51 share (see the module docstring). A subclass gives
    `name` and `learn_step` (which ends with `apply_gradients`), and, for a network
    with several outputs per action, `num_atoms` and `q_values`.

    Static structure (shapes, network, flags) lives on this object; everything numeric
    that changes or may be swept lives in `OffPolicyState` (`hparams`, the float32
    leaves of `sweepable` that the contract's `hyperparams()` builds).
    """

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
        """Network outputs per action: one Q-value (a distributional agent: one logit
        per atom)."""
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

    def apply_gradients(
        self, params: Any, learner: QLearner, grads: Any, hparams: Any, grad_step: jax.Array
    ) -> tuple[Any, QLearner]:
        """One optimiser step, then the target network's update (every
        `target_update_interval` gradient steps, Polyak with `tau`; 1 is a hard copy)."""
        updates, opt_state = self._optimizer(hparams).update(grads, learner.opt_state, params)
        params = optax.apply_updates(params, updates)
        target_params = update_target(
            learner.target_params,
            params,
            hparams.tau,
            grad_step,
            self.config.target_update_interval,
        )
        return params, QLearner(target_params=target_params, opt_state=opt_state)
