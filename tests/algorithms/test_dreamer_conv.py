"""Dreamer's DreamerV3-style image encoder and decoder (`image_net="dreamerv3"`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import dreamer
from jaxrl.algorithms.dreamer import networks


def _world_model(obs_shape, image_net=None, conv_depth=4, action_dim=4):
    """A debug-sized GRU world model; `image_net=None` leaves the argument at its default."""
    options = {} if image_net is None else {"image_net": image_net}
    return networks.WorldModel(
        obs_shape=obs_shape,
        action_dim=action_dim,
        discrete=True,
        sizes=dreamer.MODEL_SIZES["debug"],
        backbone="gru",
        backbone_options={},
        posterior="history",
        unimix=0.01,
        num_bins=255,
        conv_depth=conv_depth,
        **options,
    )


def test_image_net_is_validated_by_name():
    with pytest.raises(cfg.ConfigError, match="image_net"):
        dreamer.DreamerConfig(image_net="resnet").validate()
    dreamer.DreamerConfig(image_net="dreamerv3").validate()


def test_dreamerv3_stack_shapes_at_the_official_smallest_preset():
    """64x64x3 frames -> 4 stages of 5x5 conv + pool at depth 4 x (2, 3, 4, 4) -> a 4x4x16
    map (256 features); the decoder returns the frame's shape."""
    wm = _world_model((64, 64, 3), "dreamerv3")
    params = jax.jit(wm.init)(jax.random.key(0))
    enc = params["encoder"]["params"]
    assert [enc[f"conv{i}"].shape for i in range(4)] == [
        (5, 5, 3, 8),
        (5, 5, 8, 12),
        (5, 5, 12, 16),
        (5, 5, 16, 16),
    ]
    obs = jax.random.uniform(jax.random.key(1), (2, 3, 64, 64, 3))
    embed = jax.jit(wm.encoder.apply)(params["encoder"], obs)
    assert embed.shape == (2, 3, 256)
    features = jnp.zeros((2, 3, wm.feature_size))
    recon = jax.jit(wm.decoder.apply)(params["decoder"], features)
    assert recon.shape == (2, 3, 64, 64, 3)
    assert bool(jnp.all(jnp.isfinite(embed))) and bool(jnp.all(jnp.isfinite(recon)))


def test_fast_and_plain_convolutions_give_the_same_networks():
    """The forms `jaxrl.nn.conv` picks and the plain convolutions share parameters and
    compute the same encoder and decoder (values and parameter gradients)."""
    obs = jax.random.uniform(jax.random.key(2), (2, 32, 32, 3))
    fast, plain = networks.ConvEncoder(2), networks.ConvEncoder(2, impl="xla")
    params = fast.init(jax.random.key(3), obs)

    def grads(module):
        return jax.jit(jax.grad(lambda p: jnp.sum(jnp.sin(module.apply(p, obs)))))(params)

    np.testing.assert_allclose(
        jax.jit(fast.apply)(params, obs), jax.jit(plain.apply)(params, obs), atol=1e-4
    )
    g_fast, g_plain = grads(fast), grads(plain)
    for a, b in zip(jax.tree.leaves(g_fast), jax.tree.leaves(g_plain), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)

    features = jax.random.normal(jax.random.key(4), (2, 24))
    fast_dec = networks.ConvDecoder(2, (32, 32, 3))
    plain_dec = networks.ConvDecoder(2, (32, 32, 3), impl="xla")
    params = fast_dec.init(jax.random.key(5), features)
    np.testing.assert_allclose(
        jax.jit(fast_dec.apply)(params, features),
        jax.jit(plain_dec.apply)(params, features),
        atol=1e-4,
    )


def test_frames_that_do_not_shrink_16x_are_refused_naming_the_field():
    with pytest.raises(cfg.ConfigError, match="image_net.*multiples of 16"):
        _world_model((10, 10, 4), "dreamerv3")


def test_default_keeps_the_minatar_stack_and_its_parameter_layout():
    """image_net defaults to the two-conv MinAtar encoder and dense decoder, with the
    parameter names and shapes they had before the option existed."""
    wm = _world_model((10, 10, 4), conv_depth=16, action_dim=3)  # image_net not given
    assert isinstance(wm.encoder, networks.Encoder)
    assert isinstance(wm.decoder, networks.Decoder)
    shapes = jax.eval_shape(wm.init, jax.random.key(0))
    enc = shapes["encoder"]["params"]
    assert enc["Conv_0"]["kernel"].shape == (3, 3, 4, 16)
    assert enc["Conv_1"]["kernel"].shape == (3, 3, 16, 32)
    assert shapes["decoder"]["params"]["Dense_0"]["kernel"].shape == (16, 400)


def test_make_builds_the_configured_image_net():
    """`image_net` reaches the world model through `dreamer.make`: MinAtar's 10x10 frames
    are refused by the DreamerV3 stack, and so are vector observations."""
    base = dict(model_size="debug", image_net="dreamerv3")
    with pytest.raises(cfg.ConfigError, match="image_net.*multiples of 16"):
        dreamer.make(cfg.replace(dreamer.default_config("Breakout-MinAtar"), **base))
    with pytest.raises(cfg.ConfigError, match="image_net.*vector observations"):
        dreamer.make(cfg.replace(dreamer.default_config("CartPole-v1"), **base))
    assert isinstance(
        dreamer.make(
            cfg.replace(dreamer.default_config("Breakout-MinAtar"), model_size="debug")
        ).world_model.encoder,
        networks.Encoder,
    )
