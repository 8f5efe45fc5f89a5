"""On-policy actor-critic networks: a policy head, a value head, and the feed-forward and
recurrent actor-critics that PPO and A2C (and any on-policy algorithm) build on.

The parameter names (`actor_torso`, `actor_head`, `critic_torso`, `critic_head`, and
`embed` / `gru` for the recurrent one) are part of the checkpoint format: PPO's
saved runs and `params_fingerprint`s depend on them, so `tests/nn/test_actor_critic.py`
pins the parameter tree. The off-policy actors and critics (SAC, TD3) are in their
own packages and `jaxrl/algorithms/actor_critic.py`.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from .distributions import Categorical, DiagGaussian, TanhGaussian
from .layers import MLP, Dense, ScannedGRU, flatten_obs, orthogonal

__all__ = ["ActorCritic", "Distribution", "PolicyHead", "RecurrentActorCritic", "ValueHead"]

Distribution = Categorical | DiagGaussian | TanhGaussian


class PolicyHead(nn.Module):
    """Maps features to an action distribution (small-scale init: Andrychowicz et al. 2021)."""

    action_dim: int
    discrete: bool
    tanh_squash: bool = False
    init_log_std: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array) -> Distribution:
        out = Dense(self.action_dim, kernel_init=orthogonal(0.01), bias_init=nn.initializers.zeros)(
            x
        )
        if self.discrete:
            return Categorical(out)
        # State-independent log standard deviation, a learned parameter.
        log_std = self.param(
            "log_std", nn.initializers.constant(self.init_log_std), (self.action_dim,)
        )
        log_std = jnp.broadcast_to(log_std, out.shape)
        return TanhGaussian(out, log_std) if self.tanh_squash else DiagGaussian(out, log_std)


class ValueHead(nn.Module):
    """Maps features to a scalar state value `V(s)` (unit-scale orthogonal init)."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return Dense(1, kernel_init=orthogonal(1.0), bias_init=nn.initializers.zeros)(x)[..., 0]


class ActorCritic(nn.Module):
    """Feed-forward actor-critic: `obs (B, ...) -> (distribution, value (B,))`.

    Separate actor and critic MLPs (no shared torso), orthogonally initialised as in
    Engstrom et al. 2020. `policy` and `value` run one half alone
    (`apply(..., method="policy")`): a rollout needs only the actor at each step and
    can evaluate the critic afterwards on the whole trajectory in one large batch.
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    tanh_squash: bool = False
    init_log_std: float = 0.0

    def setup(self) -> None:
        self.actor_torso = MLP(self.hidden_sizes, self.activation)
        self.actor_head = PolicyHead(
            self.action_dim, self.discrete, self.tanh_squash, self.init_log_std
        )
        self.critic_torso = MLP(self.hidden_sizes, self.activation)
        self.critic_head = ValueHead()

    def policy(self, obs: jax.Array) -> Distribution:
        return self.actor_head(self.actor_torso(flatten_obs(obs, 1)))

    def value(self, obs: jax.Array) -> jax.Array:
        return self.critic_head(self.critic_torso(flatten_obs(obs, 1)))

    def __call__(self, obs: jax.Array) -> tuple[Distribution, jax.Array]:
        return self.policy(obs), self.value(obs)


class RecurrentActorCritic(nn.Module):
    """GRU actor-critic over time-major sequences.

    `(carry (B, H), obs (T, B, ...), resets (T, B)) -> (carry, distribution, value (T, B))`.
    An MLP embeds each observation, a shared GRU integrates them (its carry is
    zeroed where `resets` marks an episode start), and separate actor and
    critic heads read the GRU output. The embedding's layers are `hidden_sizes`;
    each head's are `head_sizes` (None: `hidden_sizes` too).
    """

    action_dim: int
    discrete: bool
    hidden_sizes: Sequence[int] = (64,)
    activation: str = "tanh"
    rnn_hidden_size: int = 128
    head_sizes: Sequence[int] | None = None
    tanh_squash: bool = False
    init_log_std: float = 0.0

    @nn.compact
    def __call__(
        self, carry: jax.Array, obs: jax.Array, resets: jax.Array
    ) -> tuple[jax.Array, Distribution, jax.Array]:
        x = flatten_obs(obs, 2)
        x = MLP(self.hidden_sizes, self.activation, name="embed")(x)
        carry, h = ScannedGRU(self.rnn_hidden_size, name="gru")(carry, x, resets)
        head_sizes = self.hidden_sizes if self.head_sizes is None else self.head_sizes
        actor = MLP(head_sizes, self.activation, name="actor_torso")(h)
        dist = PolicyHead(
            self.action_dim, self.discrete, self.tanh_squash, self.init_log_std, name="actor_head"
        )(actor)
        critic = MLP(head_sizes, self.activation, name="critic_torso")(h)
        return carry, dist, ValueHead(name="critic_head")(critic)
