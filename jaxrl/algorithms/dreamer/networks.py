"""Dreamer's networks: the world model (encoder, latent heads, a swappable sequence
backbone, decoder, reward and continuation heads), the actor and the critic.

The world model is DreamerV3's (Hafner et al. 2023, sec. 2 and appendix) with the
recurrent core replaced by any `jaxrl.nn.backbones` backbone:

    e_t = enc(obs_t)                                  symlog vector MLP or a conv stack
    h_t = backbone output after (z_{t-1}, a_{t-1})    zeros at the start of an episode
    z_t ~ q(z_t | h_t, e_t)  ("history")              categorical latents with 1% unimix,
          q(z_t | e_t)       ("observation")          straight-through gradients
    z_t ~ p(z_t | h_t)                                the prior (imagination samples it)
    obs_t ~ dec(h_t, z_t)                             symlog MSE
    h_{t+1} = backbone(z_t, a_t, history)
    r_t ~ R(h_{t+1}),  c_t ~ C(h_{t+1})               two-hot symexp reward, Bernoulli continue

The reward and continuation of step t are read from h_{t+1}, the state after the
action, which the backbone computes before the next observation: training and
imagination use exactly the same inputs for them, and an episode end never mixes
with the next episode's first observation. The actor and critic see
`features = concat(h_t, z_t)`.

Posterior "history" is the RSSM: z_t depends on h_t, which depends on z_{t-1}, so
training steps the backbone one step at a time (`observe` scans `backbone.step`).
With "observation" (STORM, TWM, R2I), all z_t come from the observations first and
the backbone runs over the whole sequence at once (`backbone.sequence`).
"""

from __future__ import annotations

import math
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl import config as cfg
from jaxrl import prng
from jaxrl.nn import Categorical, Dense, DiagGaussian, backbones, conv

from . import tricks
from .config import IMAGE_NETS


class DenseStack(nn.Module):
    """DreamerV3's MLP: `layers` x (Dense -> LayerNorm -> SiLU)."""

    units: int
    layers: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for _ in range(self.layers):
            x = nn.silu(nn.LayerNorm()(Dense(self.units, use_bias=False)(x)))
        return x


class Encoder(nn.Module):
    """Observation -> embedding. Vectors: symlog, then an MLP. Images `(H, W, C)`: two
    3x3 convolutions (the second with stride 2), LayerNorm and SiLU, then a dense layer.
    `impl`: the convolutions as `"patch"` (`jaxrl.nn.conv.Conv`, the fast form inside a
    training loop) or `"xla"` (flax's `nn.Conv`); the same function and parameters."""

    units: int
    layers: int
    image: bool
    conv_depth: int
    impl: str = "patch"

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        if not self.image:
            x = tricks.symlog(obs.reshape(*obs.shape[:-1], -1).astype(jnp.float32))
            return DenseStack(self.units, self.layers)(x)
        layer = {"patch": conv.Conv, "xla": nn.Conv}.get(self.impl)
        if layer is None:
            raise ValueError(f"Encoder.impl must be 'patch' or 'xla', got {self.impl!r}")
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:]).astype(jnp.float32)
        for depth, stride in ((self.conv_depth, 1), (2 * self.conv_depth, 2)):
            x = layer(depth, (3, 3), strides=stride, use_bias=False)(x)
            x = nn.silu(nn.LayerNorm()(x))
        x = x.reshape(*lead, -1)
        return DenseStack(self.units, 1)(x)


# DreamerV3's image stack (`image_net="dreamerv3"`): channel multipliers of the four
# stages and the kernel width (dreamer 3.3.1's configs.yaml: `mults: [2, 3, 4, 4]`,
# `kernel: 5`; each stage halves the resolution, so frames shrink 16x).
V3_MULTS = (2, 3, 4, 4)
V3_KERNEL = 5


class ConvEncoder(nn.Module):
    """DreamerV3's image encoder (Hafner et al. 2023; dreamer 3.3.1, `rssm.Encoder` with
    `strided: False`): pixels in [0, 1] shifted to [-0.5, 0.5], then per stage a 5x5
    convolution, a 2x2 max-pool, RMSNorm and SiLU, with `depth * (2, 3, 4, 4)` channels;
    the last feature map (e.g. 4x4x16 at depth 4 for 64x64 frames) flattened is the
    embedding. `impl` is the form of conv + pool (`jaxrl.nn.conv.conv_pool`; all forms
    compute the same function with the same parameters)."""

    depth: int
    impl: str = conv.FAST_POOL

    @nn.compact
    def __call__(self, obs: jax.Array) -> jax.Array:
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:]).astype(jnp.float32) - 0.5
        for i, mult in enumerate(V3_MULTS):
            shape = (V3_KERNEL, V3_KERNEL, x.shape[-1], self.depth * mult)
            kernel = self.param(f"conv{i}", nn.initializers.lecun_normal(), shape)
            x = conv.conv_pool(x, kernel, self.impl)
            x = nn.silu(nn.RMSNorm(name=f"norm{i}")(x))
        return x.reshape(*lead, -1)


class ConvDecoder(nn.Module):
    """DreamerV3's image decoder (dreamer 3.3.1, `rssm.Decoder` with `strided: False`),
    mirroring `ConvEncoder`: a dense layer to the smallest feature map
    (`obs_shape / 16` x `depth * 4`), RMSNorm and SiLU, then per stage 2x nearest
    upsampling and a 5x5 convolution (RMSNorm, SiLU) with `depth * (4, 3, 2)` channels,
    and a last upsampling + 5x5 convolution to the image's channels: the observation in
    symlog space, as `Decoder`. (The official decoder's dense layer is block-diagonal
    over the recurrent state and ends in a sigmoid on pixels; the convolutions, which
    are most of the arithmetic, are the same.) `impl`: `jaxrl.nn.conv.upsample_conv`."""

    depth: int
    obs_shape: tuple[int, ...]
    impl: str = conv.FAST_UPSAMPLE

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        height, width, channels = self.obs_shape
        factor = 2 ** len(V3_MULTS)
        depths = [self.depth * m for m in V3_MULTS]
        x = features.reshape(-1, features.shape[-1])
        x = Dense(height // factor * width // factor * depths[-1], use_bias=False)(x)
        x = nn.silu(nn.RMSNorm()(x))
        x = x.reshape(-1, height // factor, width // factor, depths[-1])
        init = nn.initializers.lecun_normal()
        for i, depth in reversed(list(enumerate(depths[:-1]))):
            shape = (V3_KERNEL, V3_KERNEL, x.shape[-1], depth)
            x = conv.upsample_conv(x, self.param(f"conv{i}", init, shape), self.impl)
            x = nn.silu(nn.RMSNorm(name=f"norm{i}")(x))
        shape = (V3_KERNEL, V3_KERNEL, x.shape[-1], channels)
        x = conv.upsample_conv(x, self.param("out", init, shape), self.impl)
        x = x + self.param("out_bias", nn.initializers.zeros, (channels,))
        return x.reshape(*features.shape[:-1], *self.obs_shape)


class Decoder(nn.Module):
    """Features -> the observation in symlog space (flattened back to its shape)."""

    units: int
    layers: int
    obs_shape: tuple[int, ...]

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        x = DenseStack(self.units, self.layers)(features)
        x = Dense(math.prod(self.obs_shape))(x)
        return x.reshape(*features.shape[:-1], *self.obs_shape)


class LatentHead(nn.Module):
    """Input -> logits of `num_latents` categoricals of `num_classes` (unimixed)."""

    units: int
    num_latents: int
    num_classes: int
    unimix: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = DenseStack(self.units, 1)(x)
        logits = Dense(self.num_latents * self.num_classes)(x)
        logits = logits.reshape(*x.shape[:-1], self.num_latents, self.num_classes)
        return tricks.unimix_logits(logits, self.unimix)


class TwoHotHead(nn.Module):
    """Input -> logits over the two-hot bins. The output layer starts at zero, so the
    first predictions are 0 (DreamerV3: avoids large early value and reward errors)."""

    units: int
    layers: int
    num_bins: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = DenseStack(self.units, self.layers)(x)
        return Dense(self.num_bins, kernel_init=nn.initializers.zeros)(x)


class LogitHead(nn.Module):
    """Input -> one logit (the continuation flag's Bernoulli)."""

    units: int
    layers: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return Dense(1)(DenseStack(self.units, self.layers)(x))[..., 0]


class Actor(nn.Module):
    """Features -> the policy: a `Categorical` over unimixed logits (discrete), or a
    `DiagGaussian` in [-1, 1]^d (continuous: mean tanh-bounded, standard deviation in
    [0.1, 1], as DreamerV3; samples are clipped to the box, `sample_action`)."""

    units: int
    layers: int
    action_dim: int
    discrete: bool
    unimix: float

    @nn.compact
    def __call__(self, features: jax.Array) -> Categorical | DiagGaussian:
        x = DenseStack(self.units, self.layers)(features)
        if self.discrete:
            return Categorical(tricks.unimix_logits(Dense(self.action_dim)(x), self.unimix))
        mean, std = jnp.split(Dense(2 * self.action_dim)(x), 2, axis=-1)
        return DiagGaussian(jnp.tanh(mean), jnp.log(0.9 * jax.nn.sigmoid(std + 2.0) + 0.1))


def sample_action(policy: Categorical | DiagGaussian, key: jax.Array) -> jax.Array:
    """A sampled action: an int32 index, or a Gaussian sample clipped to [-1, 1]."""
    if isinstance(policy, Categorical):
        return policy.sample(key)
    return jnp.clip(policy.sample(key), -1.0, 1.0)


# ----------------------------------------------------------------------------- world model


def sample_latent(key: jax.Array, logits: jax.Array) -> jax.Array:
    """A one-hot sample of each categorical, flattened to `[..., latents * classes]`, with
    straight-through gradients (Bengio et al. 2013): `onehot + probs - sg(probs)`.

    Sampled by inversion, one uniform per categorical: the index is the number of
    classes whose cumulative probability is below it. Gumbel-max would draw one number
    per class (16x the random bits), which dominated imagination's cost on CPU.
    """
    probs = jnp.exp(logits)
    u = prng.uniform(key, logits.shape[:-1])[..., None]
    below = jnp.cumsum(jax.lax.stop_gradient(probs), axis=-1) < u
    index = jnp.minimum(jnp.sum(below, axis=-1), logits.shape[-1] - 1)
    onehot = jax.nn.one_hot(index, logits.shape[-1], dtype=probs.dtype)
    sample = onehot + probs - jax.lax.stop_gradient(probs)
    return sample.reshape(*sample.shape[:-2], -1)


class WorldModel:
    """The world model's pure functions over its parameter dict (see the module docstring).

    Parameters: `{"encoder", "posterior", "prior", "backbone", "decoder", "reward",
    "cont"}`. Static structure (sizes, the backbone, the observation and action spaces)
    lives on this object.
    """

    def __init__(
        self,
        *,
        obs_shape: tuple[int, ...],
        action_dim: int,
        discrete: bool,
        sizes: dict[str, int],
        backbone: str,
        backbone_options: dict[str, Any],
        posterior: str,
        unimix: float,
        num_bins: int,
        conv_depth: int,
        image_net: str = "minatar",
    ):
        self.obs_shape = obs_shape
        self.action_dim = action_dim
        self.discrete = discrete
        self.posterior_mode = posterior
        units, layers = sizes["units"], sizes["layers"]
        self.num_latents, self.num_classes = sizes["num_latents"], sizes["num_classes"]
        self.latent_size = self.num_latents * self.num_classes
        self.hidden_size = sizes["hidden_size"]
        self.feature_size = self.hidden_size + self.latent_size
        image = len(obs_shape) == 3
        cfg.check(image_net in IMAGE_NETS, "image_net", image_net, f"one of {list(IMAGE_NETS)}")
        cfg.check(
            image or image_net == "minatar",
            "image_net",
            image_net,
            f"'minatar' (the default) for vector observations of shape {obs_shape}: "
            "'dreamerv3' is an image encoder",
        )
        self.encoder: nn.Module
        self.decoder: nn.Module
        if image and image_net == "dreamerv3":
            factor = 2 ** len(V3_MULTS)
            cfg.check(
                obs_shape[0] % factor == 0 and obs_shape[1] % factor == 0,
                "image_net",
                image_net,
                f"'minatar' for {obs_shape[0]}x{obs_shape[1]} frames ('dreamerv3' needs a "
                f"height and width that are multiples of {factor})",
            )
            self.encoder = ConvEncoder(conv_depth)
            self.decoder = ConvDecoder(conv_depth, obs_shape)
        else:
            self.encoder = Encoder(units, layers, image, conv_depth)
            self.decoder = Decoder(units, layers, obs_shape)
        self.posterior = LatentHead(units, self.num_latents, self.num_classes, unimix)
        self.prior = LatentHead(units, self.num_latents, self.num_classes, unimix)
        self.reward = TwoHotHead(units, layers, num_bins)
        self.cont = LogitHead(units, layers)
        self.backbone = backbones.make(
            backbone, self.latent_size + action_dim, self.hidden_size, **backbone_options
        )

    def init(self, key: jax.Array) -> dict[str, Any]:
        names = ("enc", "post", "prior", "bb", "dec", "rew", "cont")
        keys = dict(zip(names, prng.split(key, len(names)), strict=True))
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        embed = self.encoder.init(keys["enc"], obs)
        e = self.encoder.apply(embed, obs)
        h = jnp.zeros((1, self.hidden_size))
        post_in = jnp.concatenate([h, e], -1) if self.posterior_mode == "history" else e
        features = jnp.zeros((1, self.feature_size))
        return {
            "encoder": embed,
            "posterior": self.posterior.init(keys["post"], post_in),
            "prior": self.prior.init(keys["prior"], h),
            "backbone": self.backbone.init(keys["bb"]),
            "decoder": self.decoder.init(keys["dec"], features),
            "reward": self.reward.init(keys["rew"], h),
            "cont": self.cont.init(keys["cont"], h),
        }

    def encode_action(self, action: jax.Array) -> jax.Array:
        if self.discrete:
            return jax.nn.one_hot(action, self.action_dim, dtype=jnp.float32)
        return action.astype(jnp.float32)

    def posterior_logits(self, params: Any, h: jax.Array, embed: jax.Array) -> jax.Array:
        x = jnp.concatenate([h, embed], -1) if self.posterior_mode == "history" else embed
        return self.posterior.apply(params["posterior"], x)

    def observe(
        self, params: Any, obs: jax.Array, action: jax.Array, is_first: jax.Array, key: jax.Array
    ) -> dict[str, jax.Array]:
        """Posterior states of replayed sequences `[B, T]` (the first step starts an episode).

        Returns `h` and `z` (the model state of every step), `post` and `prior` logits,
        `next_h` (h_{t+1}: the state after the step's action, for the reward and
        continuation heads) and `carry` (the backbone's carry before each step, every
        leaf `[B, T, ...]`, where imagination from that step starts).
        """
        batch, length = is_first.shape
        is_first = is_first.at[:, 0].set(True)
        embed = self.encoder.apply(params["encoder"], obs)
        actions = self.encode_action(action)
        carry0 = self.backbone.initial_carry(batch)
        keys = prng.split(key, length)
        if self.posterior_mode == "history":

            def step(c, inputs):
                carry, prev_y = c
                e_t, a_t, first_t, k_t = inputs
                h_t = jnp.where(first_t[:, None], 0.0, prev_y)
                logits = self.posterior_logits(params, h_t, e_t)
                z_t = sample_latent(k_t, logits)
                x_t = jnp.concatenate([z_t, a_t], -1)
                new_carry, y_t = self.backbone.step(params["backbone"], carry, x_t, first_t)
                return (new_carry, y_t), (carry, h_t, z_t, logits, y_t)

            time_major = (
                jnp.swapaxes(embed, 0, 1),
                jnp.swapaxes(actions, 0, 1),
                jnp.swapaxes(is_first, 0, 1),
                keys,
            )
            init = (carry0, jnp.zeros((batch, self.hidden_size)))
            _, (carry, h, z, post, next_h) = jax.lax.scan(step, init, time_major)
            carry, h, z, post, next_h = jax.tree.map(
                lambda x: jnp.swapaxes(x, 0, 1), (carry, h, z, post, next_h)
            )
        else:
            post = self.posterior_logits(params, None, embed)
            z = sample_latent(key, post)
            xs = jnp.concatenate([z, actions], -1)
            carries, next_h = self.backbone.sequence(params["backbone"], carry0, xs, is_first)
            carry = jax.tree.map(
                lambda c0, c: jnp.concatenate([c0[:, None], c[:, :-1]], axis=1), carry0, carries
            )
            shifted = jnp.concatenate([jnp.zeros_like(next_h[:, :1]), next_h[:, :-1]], axis=1)
            h = jnp.where(is_first[..., None], 0.0, shifted)
        prior = self.prior.apply(params["prior"], h)
        return {
            "h": h,
            "z": z,
            "post": post,
            "prior": prior,
            "next_h": next_h,
            "carry": carry,
            "is_first": is_first,
        }

    def imagine_step(
        self, params: Any, carry: Any, z: jax.Array, action: jax.Array, reset: jax.Array, key
    ) -> tuple[Any, jax.Array, jax.Array]:
        """One imagined step from `(carry, z)` under `action`: `(carry, h', z')` with z'
        sampled from the prior p(z | h')."""
        x = jnp.concatenate([z, self.encode_action(action)], -1)
        carry, h = self.backbone.step(params["backbone"], carry, x, reset)
        z = sample_latent(key, self.prior.apply(params["prior"], h))
        return carry, h, z

    def reward_logits(self, params: Any, next_h: jax.Array) -> jax.Array:
        return self.reward.apply(params["reward"], next_h)

    def cont_logit(self, params: Any, next_h: jax.Array) -> jax.Array:
        return self.cont.apply(params["cont"], next_h)

    def decode(self, params: Any, h: jax.Array, z: jax.Array) -> jax.Array:
        return self.decoder.apply(params["decoder"], jnp.concatenate([h, z], -1))
