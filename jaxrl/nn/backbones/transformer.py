"""The `transformer` backbone: causal sliding-window self-attention with a KV cache.

A GPT-style decoder (pre-LayerNorm blocks: h <- h + Attn(LN(h)); h <- h + MLP(LN(h)),
Radford et al. 2019) over the sequence of inputs, as in the transformer world
models STORM (Zhang et al. 2023, "STORM: Efficient Stochastic Transformer based
World Models for Reinforcement Learning") and TWM (Robine et al. 2023,
"Transformer-based World Models Are Happy With 100k Interactions"), with a fixed
attention window (Beltagy et al. 2020, Longformer's sliding window): position t
attends to itself and up to `window - 1` earlier positions of the same episode,
never across a reset.

Positions: ALiBi (Press et al. 2022, "Train Short, Test Long"): no position
embedding; head k adds -m_k * (distance to the key) to its attention logits,
with slopes m_k = 2^(-8k / num_heads). The distance of a cache slot is fixed
by its place in the window, so both forms see the same biases and no position
counter is carried.

Step form: the carry is a shift buffer of the last `window` keys and values of
every layer (the newest in the last slot, including the current step's own
key/value) plus a validity mask; a step shifts in the new entry, and a reset
first empties the buffer. Slots that are not valid hold zeros.

Parallel form: the incoming carry's cache is prepended to the sequence's keys
and values, and attention runs in blocks of `window` queries, each over its own
block and the previous one (2 * window keys), masked to the band of its window,
to valid entries and to its own episode: O(T * window) time and memory, with
full matrix products. The carries (the KV cache after every step) are gathered
from the same keys and values with sliding-window indices.

Carry: {"keys": [B, window, num_layers, num_heads, head_dim], "values": same,
"mask": [B, window]}, all float32 (mask 1 = valid), slot window-1 the newest;
head_dim = hidden_size / num_heads. Zeros = empty history.

Receptive field: a layer attends to the cached outputs of the layer below, so
with L layers h_t depends on inputs up to L * (window - 1) steps back (as in
any sliding-window transformer, e.g. Mistral 7B, Jiang et al. 2023); one layer
sees exactly the last `window` steps. Never across a reset.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import config as cfg
from jaxrl.nn.layers import Dense

Params = dict
Carry = dict

_NEG = -1e30


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi's per-head slopes 2^(-8k/num_heads), k = 1..num_heads (Press et al. 2022)."""
    return 2.0 ** (-8.0 * np.arange(1, num_heads + 1) / num_heads)


class _TransformerNet(nn.Module):
    hidden_size: int
    num_layers: int
    num_heads: int
    window: int

    def setup(self) -> None:
        h, n = self.hidden_size, self.num_layers
        self.inp = Dense(h)
        self.attn_norms = [nn.LayerNorm() for _ in range(n)]
        self.qkv = [Dense(3 * h) for _ in range(n)]
        self.proj = [Dense(h) for _ in range(n)]
        self.mlp_norms = [nn.LayerNorm() for _ in range(n)]
        self.fc1 = [Dense(4 * h) for _ in range(n)]
        self.fc2 = [Dense(h) for _ in range(n)]
        self.out_norm = nn.LayerNorm()

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def _qkv(self, layer: int, h: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        qkv = self.qkv[layer](self.attn_norms[layer](h))
        shape = (*h.shape[:-1], self.num_heads, self.head_dim)
        q, k, v = (part.reshape(shape) for part in jnp.split(qkv, 3, axis=-1))
        return q, k, v

    def _bias(self, distance: np.ndarray) -> jax.Array:
        """ALiBi biases [H, *distance.shape] for key distances (query index - key index)."""
        slopes = alibi_slopes(self.num_heads).reshape(-1, *([1] * distance.ndim))
        return jnp.asarray(-slopes * distance, jnp.float32)

    def _attend(
        self, q: jax.Array, keys: jax.Array, values: jax.Array, mask: jax.Array, bias: jax.Array
    ) -> jax.Array:
        """q [..., Q, H, d], keys/values [..., K, H, d], mask [..., Q, K], bias [H, Q, K]."""
        logits = jnp.einsum("...qhd,...khd->...hqk", q, keys) / np.sqrt(self.head_dim) + bias
        logits = jnp.where(mask[..., None, :, :] > 0, logits, _NEG)
        out = jnp.einsum("...hqk,...khd->...qhd", jax.nn.softmax(logits, axis=-1), values)
        return out.reshape(*out.shape[:-2], self.hidden_size)

    def _finish(self, layer: int, h: jax.Array, attended: jax.Array) -> jax.Array:
        h = h + self.proj[layer](attended)
        return h + self.fc2[layer](nn.gelu(self.fc1[layer](self.mlp_norms[layer](h))))

    def step(self, carry: Carry, x: jax.Array, reset: jax.Array) -> tuple[Carry, jax.Array]:
        keep = jnp.where(reset[:, None], 0.0, carry["mask"])
        mask = jnp.concatenate([keep[:, 1:], jnp.ones_like(keep[:, :1])], axis=1)  # [B, W]
        valid = mask[:, :, None, None, None] > 0
        bias = self._bias(np.arange(self.window - 1, -1, -1)[None, :])  # slot w: W-1-w back
        h = self.inp(x)
        new_keys, new_values = [], []
        for layer in range(self.num_layers):
            q, k, v = self._qkv(layer, h)
            new_keys.append(k)
            new_values.append(v)
            keys = jnp.concatenate([carry["keys"][:, 1:, layer], k[:, None]], axis=1)
            values = jnp.concatenate([carry["values"][:, 1:, layer], v[:, None]], axis=1)
            keys = jnp.where(valid[:, :, 0], keys, 0.0)
            values = jnp.where(valid[:, :, 0], values, 0.0)
            attended = self._attend(q[:, None], keys, values, mask[:, None], bias)
            h = self._finish(layer, h, attended[:, 0])

        def shift_in(cache, new):
            cache = jnp.concatenate([cache[:, 1:], jnp.stack(new, axis=1)[:, None]], axis=1)
            return jnp.where(valid, cache, 0.0)

        carry = {
            "keys": shift_in(carry["keys"], new_keys),
            "values": shift_in(carry["values"], new_values),
            "mask": mask,
        }
        return carry, self.out_norm(h)

    def sequence(self, carry: Carry, xs: jax.Array, resets: jax.Array) -> tuple[Carry, jax.Array]:
        batch, steps = resets.shape
        w = self.window
        # Positions [cache (w slots); sequence (steps)]: step t is index w + t and may
        # attend to the indices (t, w + t] of its own episode (the cache is episode 0).
        episode = jnp.cumsum(resets.astype(jnp.int32), axis=1)
        combined_episode = jnp.concatenate([jnp.zeros((batch, w), jnp.int32), episode], axis=1)
        combined_valid = jnp.concatenate(
            [carry["mask"], jnp.ones((batch, steps), carry["mask"].dtype)], axis=1
        )

        # Attention in blocks of w queries: block i (steps [iw, iw + w)) sees the indices
        # [iw, iw + 2w), i.e. its own block and the previous one: O(T * w), not O(T^2).
        blocks = -(-steps // w)
        pad = blocks * w - steps

        def to_blocks(a):  # [B, w + T, ...] -> [B, blocks, 2w, ...]
            a = jnp.pad(a, [(0, 0), (0, pad)] + [(0, 0)] * (a.ndim - 2))
            a = a.reshape(batch, blocks + 1, w, *a.shape[2:])
            return jnp.concatenate([a[:, :-1], a[:, 1:]], axis=2)

        q_index, k_index = np.arange(w)[:, None], np.arange(2 * w)[None, :]
        in_band = (k_index > q_index) & (k_index <= q_index + w)  # [w, 2w]
        query_episode = jnp.pad(episode, [(0, 0), (0, pad)]).reshape(batch, blocks, w, 1)
        block_mask = (
            in_band
            & (to_blocks(combined_episode)[:, :, None, :] == query_episode)
            & (to_blocks(combined_valid)[:, :, None, :] > 0)
        ).astype(jnp.float32)  # [B, blocks, w, 2w]
        block_bias = self._bias((w + q_index - k_index).astype(np.float32))

        h = self.inp(xs)
        all_keys, all_values = [], []
        for layer in range(self.num_layers):
            q, k, v = self._qkv(layer, h)
            keys = jnp.concatenate([carry["keys"][:, :, layer], k], axis=1)  # [B, w + T, H, d]
            values = jnp.concatenate([carry["values"][:, :, layer], v], axis=1)
            all_keys.append(keys)
            all_values.append(values)
            q = jnp.pad(q, [(0, 0), (0, pad), (0, 0), (0, 0)])
            q = q.reshape(batch, blocks, w, self.num_heads, self.head_dim)
            attended = self._attend(q, to_blocks(keys), to_blocks(values), block_mask, block_bias)
            h = self._finish(layer, h, attended.reshape(batch, blocks * w, -1)[:, :steps])

        # The KV cache after each step t: the indices (t, w + t], gathered from the
        # layer-stacked keys/values, masked to step t's episode (invalid slots are zeros).
        index = np.arange(steps)[:, None] + 1 + np.arange(w)[None, :]  # [T, w]
        same = jnp.take(combined_episode, index, axis=1) == episode[:, :, None]
        mask = jnp.where(same, jnp.take(combined_valid, index, axis=1), 0.0)  # [B, T, w]

        def windows(per_layer):
            gathered = jnp.take(jnp.stack(per_layer, axis=2), index, axis=1)
            return jnp.where(mask[..., None, None, None] > 0, gathered, 0.0)

        carries = {"keys": windows(all_keys), "values": windows(all_values), "mask": mask}
        return carries, self.out_norm(h)


@dataclasses.dataclass(frozen=True)
class Transformer:
    """Causal sliding-window transformer with ALiBi positions and a KV-cache carry.

    Options: `num_layers` (2), `num_heads` (4, must divide hidden_size) and
    `window` (16: each step sees itself and up to 15 earlier steps of its episode).
    Carry: {"keys", "values": [B, window, num_layers, num_heads, head_dim],
    "mask": [B, window]}, float32.
    """

    input_size: int
    hidden_size: int
    num_layers: int = 2
    num_heads: int = 4
    window: int = 16

    def __post_init__(self) -> None:
        cfg.check_positive(self, "input_size", "hidden_size", "num_layers", "num_heads", "window")
        cfg.check(
            self.hidden_size % self.num_heads == 0,
            "num_heads",
            self.num_heads,
            f"a divisor of hidden_size={self.hidden_size}",
        )

    @property
    def _net(self) -> _TransformerNet:
        return _TransformerNet(self.hidden_size, self.num_layers, self.num_heads, self.window)

    def init(self, key: jax.Array) -> Params:
        x = jnp.zeros((1, self.input_size), jnp.float32)
        carry = self.initial_carry(1)
        return self._net.init(key, carry, x, jnp.zeros((1,), bool), method="step")["params"]

    def initial_carry(self, batch_size: int) -> Carry:
        head_dim = self.hidden_size // self.num_heads
        shape = (batch_size, self.window, self.num_layers, self.num_heads, head_dim)
        return {
            "keys": jnp.zeros(shape, jnp.float32),
            "values": jnp.zeros(shape, jnp.float32),
            "mask": jnp.zeros((batch_size, self.window), jnp.float32),
        }

    def step(
        self, params: Params, carry: Carry, x: jax.Array, reset: jax.Array
    ) -> tuple[Carry, jax.Array]:
        return self._net.apply({"params": params}, carry, x, reset, method="step")

    def sequence(
        self, params: Params, carry: Carry, xs: jax.Array, resets: jax.Array
    ) -> tuple[Carry, jax.Array]:
        return self._net.apply({"params": params}, carry, xs, resets, method="sequence")
