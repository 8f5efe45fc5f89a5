"""Q-networks of DQN and C51: a torso (an MLP, or a small CNN for image observations)
and a linear or dueling head with one output, or one logit per atom, per action."""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.nn import MLP, Dense, conv, flatten_obs, orthogonal

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
