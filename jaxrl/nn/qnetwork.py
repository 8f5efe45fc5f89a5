"""The LayerNorm Q-network of PQN and PQN-VDN: an MLP (or a small CNN for image
observations) with LayerNorm after every hidden layer and a linear Q head, as in Gallici
et al. 2024 and purejaxql. (It lived in `jaxrl/algorithms/pqn/networks.py`, which
re-exports it; shared here so PQN-VDN uses it without importing PQN.)"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from . import conv
from .layers import Dense, flatten_obs


def normalization(kind: str) -> Callable[[jax.Array], jax.Array]:
    """The layer applied after every hidden layer, before the activation.

    "layer_norm" (Ba et al. 2016) is what lets PQN bootstrap without a target network
    or replay buffer (Gallici et al. 2024, sec. 3: it keeps TD stable under off-policy
    data); "none" is the ablation.
    """
    if kind == "layer_norm":
        return lambda x: nn.LayerNorm()(x)
    if kind == "none":
        return lambda x: x
    raise ValueError(f"norm must be 'layer_norm' or 'none', got {kind!r}")


class QNetwork(nn.Module):
    """`obs (B, ...) -> Q-values (B, action_dim)`.

    torso "mlp": the flattened observation through Dense -> norm -> ReLU per hidden
    layer. torso "conv" (image observations, `(B, H, W, C)`, as purejaxql's MinAtar
    network): a 3x3 valid convolution with `conv_channels` channels -> norm -> ReLU,
    flattened, then the same hidden layers. A linear head gives one Q-value per action.
    Hidden kernels start LeCun normal (flax's default) in the MLP torso and He normal
    in the conv torso, as purejaxql's two networks do.
    """

    action_dim: int
    hidden_sizes: Sequence[int] = (256, 256)
    norm: str = "layer_norm"
    torso: str = "mlp"
    conv_channels: int = 16

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        normalize = normalization(self.norm)
        use_conv = self.torso == "conv"
        init = nn.initializers.he_normal() if use_conv else nn.initializers.lecun_normal()
        if use_conv:
            x = conv.Conv(
                self.conv_channels,
                kernel_size=(3, 3),
                padding="VALID",
                kernel_init=init,
            )(obs.astype(jnp.float32))
            x = nn.relu(normalize(x))
            x = flatten_obs(x, 1)
        else:
            x = flatten_obs(obs, 1)
        for size in self.hidden_sizes:
            x = nn.relu(normalize(Dense(size, kernel_init=init)(x)))
        return Dense(self.action_dim, name="q_head")(x)
