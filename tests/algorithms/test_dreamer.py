"""Dreamer (`jaxrl/algorithms/dreamer/`): the config's errors, the world model's
bookkeeping (where h_t resets, what the heads read), acting against the posterior
pass, each backbone and action/observation kind through an update, and exact resume
through the driver. The tricks are tested in test_dreamer_tricks.py, the backbones
in tests/nn/test_backbones.py, learning on CartPole in test_dreamer_learning.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl.algorithms import dreamer
from jaxrl.algorithms.dreamer import losses
from jaxrl.training.checkpoint import tree_fingerprint
from jaxrl.training.driver import RunConfig, train

# 8 environment steps per update, one gradient step on 2 sequences of 8 (train ratio 2).
TINY = dict(
    total_steps=64,
    num_envs=2,
    train_every=4,
    train_ratio=2.0,
    batch_size=2,
    batch_length=8,
    buffer_size=64,
    learning_starts=16,
    imagination_starts=8,
    horizon=3,
    num_bins=31,
    model_size="debug",
    transformer_window=4,
    transformer_heads=2,
)


def make(env: str = "CartPole-v1", **overrides) -> dreamer.Dreamer:
    return dreamer.make(cfg.replace(dreamer.DreamerConfig(env=env), **{**TINY, **overrides}))


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "field, overrides",
    [
        ("train_ratio", {"train_ratio": 3.0}),  # 3 * 8 is not a multiple of 16
        ("train_ratio", {"train_ratio": 1.0}),  # less than one gradient step per update
        ("backbone", {"backbone": "lstm"}),
        ("posterior", {"posterior": "prior"}),
        ("model_size", {"model_size": "xl"}),
        ("learning_starts", {"learning_starts": 8}),  # < num_envs * batch_length
        ("learning_starts", {"learning_starts": 64}),  # never learns
        ("buffer_size", {"buffer_size": 8}),
        ("imagination_starts", {"imagination_starts": 17}),
        ("num_bins", {"num_bins": 30}),
        ("unimix", {"unimix": 1.0}),
        ("gamma", {"gamma": 1.5}),
    ],
)
def test_config_errors_name_the_field(field, overrides):
    with pytest.raises(cfg.ConfigError, match=f"invalid {field}="):
        cfg.replace(dreamer.DreamerConfig(), **{**TINY, **overrides}).validate()


def test_gradient_steps_follow_the_train_ratio():
    config = cfg.replace(dreamer.DreamerConfig(), **{**TINY, "train_ratio": 4.0}).validate()
    assert config.gradient_steps == 2  # 4 * 8 env steps = 2 * (2 x 8) replayed steps
    default = dreamer.DreamerConfig().validate()
    assert default.gradient_steps == 1  # 32 * 32 = 1024 = 16 x 64


def test_posterior_auto_is_the_rssm_for_gru_and_observation_only_otherwise():
    assert make(backbone="gru").world_model.posterior_mode == "history"
    assert make(backbone="ssm").world_model.posterior_mode == "observation"
    assert make(backbone="transformer").world_model.posterior_mode == "observation"
    assert make(backbone="ssm", posterior="history").world_model.posterior_mode == "history"


def test_every_preset_and_model_size_is_valid():
    for env in dreamer.PRESETS:
        dreamer.make(dreamer.default_config(env))
    for size in dreamer.MODEL_SIZES:
        dreamer.DreamerConfig(model_size=size).validate()


# ----------------------------------------------------------------------------- world model


def random_sequences(algo: dreamer.Dreamer, batch: int, length: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    is_first = rng.random((batch, length)) < 0.2
    return losses.Sequences(
        obs=jnp.asarray(rng.normal(size=(batch, length, *algo.obs_shape)), jnp.float32),
        action=jnp.asarray(rng.integers(0, algo.action_dim, (batch, length)), jnp.int32),
        reward=jnp.asarray(rng.normal(size=(batch, length)), jnp.float32),
        is_first=jnp.asarray(is_first),
        terminated=jnp.asarray(rng.random((batch, length)) < 0.1),
    )


@pytest.mark.parametrize("posterior", ["history", "observation"])
def test_observe_resets_h_at_episode_starts_and_hands_the_heads_the_next_state(posterior):
    algo = make(posterior=posterior)
    wm = algo.world_model
    params = jax.jit(wm.init)(jax.random.key(0))
    seq = random_sequences(algo, 3, 8)
    out = wm.observe(params, seq.obs, seq.action, seq.is_first, jax.random.key(1))
    first = np.asarray(out["is_first"])
    assert first[:, 0].all()  # every replayed sequence starts from an empty history
    h, next_h = np.asarray(out["h"]), np.asarray(out["next_h"])
    np.testing.assert_array_equal(h[first], 0.0)
    # Elsewhere h_t is the state after the previous step's action.
    np.testing.assert_allclose(h[:, 1:][~first[:, 1:]], next_h[:, :-1][~first[:, 1:]], atol=1e-6)
    assert np.abs(next_h).sum() > 0


def test_acting_step_by_step_follows_the_training_pass():
    """The policy's carried (backbone, h) after each environment step equals what
    `observe` computes for the same observations, actions and latents."""
    algo = make(posterior="observation", backbone="ssm", unimix=0.0)
    wm = algo.world_model
    params = jax.jit(algo.init_params)(jax.random.key(0))
    seq = random_sequences(algo, 2, 6)
    # Force deterministic latents: a posterior that puts all mass on class 0.
    wm_params = params["world_model"]
    post = wm_params["posterior"]
    post = jax.tree.map(jnp.zeros_like, post)
    bias = np.full(post["params"]["Dense_0"]["bias"].shape, -1e4, np.float32)
    bias[:: wm.num_classes] = 1e4  # class 0 of every latent
    post["params"]["Dense_0"]["bias"] = jnp.asarray(bias)
    params["world_model"] = {**wm_params, "posterior": post}
    out = jax.jit(wm.observe)(
        params["world_model"], seq.obs, seq.action, seq.is_first, jax.random.key(1)
    )

    @jax.jit
    def act_along(params, obs, action, z, is_first):
        """The acting recurrence over the sequence, fed the training pass's latents."""
        wm_params, carry = params["world_model"], algo.eval_carry(2)
        hs, ys, argmax = [], [], []
        for t in range(obs.shape[1]):
            h_t = jnp.where(is_first[:, t, None], 0.0, carry.h)
            embed = wm.encoder.apply(wm_params["encoder"], obs[:, t])
            argmax.append(wm.posterior_logits(wm_params, h_t, embed).argmax(-1))
            x = jnp.concatenate([z[:, t], wm.encode_action(action[:, t])], -1)
            backbone, y = wm.backbone.step(wm_params["backbone"], carry.backbone, x, is_first[:, t])
            carry = carry.replace(backbone=backbone, h=y)
            hs.append(h_t)
            ys.append(y)
        return jnp.stack(hs, 1), jnp.stack(ys, 1), jnp.stack(argmax, 1)

    hs, ys, argmax = act_along(params, seq.obs, seq.action, out["z"], out["is_first"])
    np.testing.assert_array_equal(argmax, 0)  # the posterior is the forced one
    np.testing.assert_allclose(hs, out["h"], atol=1e-5)
    np.testing.assert_allclose(ys, out["next_h"], atol=1e-5)


# ----------------------------------------------------------------------------- updates


def run_updates(algo: dreamer.Dreamer, n: int, seed: int = 0):
    state = jax.jit(algo.init)(jax.random.key(seed), algo.hyperparams())
    update = jax.jit(algo.update)
    history = []
    for _ in range(n):
        state, metrics = update(state)
        history.append({k: np.asarray(v) for k, v in metrics.items()})
    return state, history


@pytest.mark.slow  # three compiles of a whole update (~1 min each on 2 cores)
@pytest.mark.parametrize("backbone", ["gru", "transformer", "ssm"])
def test_each_backbone_learns_from_replay_with_finite_losses(backbone):
    algo = make(backbone=backbone)
    state, history = run_updates(algo, 4)  # learning starts after the second update
    assert history[0]["loss"] == 0.0  # 8 steps stored: no whole sequence per environment yet
    for name in ("loss", "actor_loss", "critic_loss", "kl", "decoder_loss", "reward_loss"):
        assert np.isfinite(history[-1][name]) and history[-1][name] != 0.0, name
    assert int(state.replay.size) == 4 * 4  # rows: 4 updates of 4 steps per environment
    fresh = jax.jit(algo.init)(jax.random.key(0), algo.hyperparams())
    moved = jax.tree.map(lambda a, b: bool(jnp.any(a != b)), state.params, fresh.params)
    assert any(jax.tree.leaves(moved["actor"]))
    assert any(jax.tree.leaves(moved["world_model"]["backbone"]))
    assert any(jax.tree.leaves(moved["critic"]))


@pytest.mark.slow
def test_continuous_actions_and_image_observations():
    pendulum = make("Pendulum-v1")
    assert not pendulum.discrete
    _, history = run_updates(pendulum, 3)
    assert np.isfinite(history[-1]["loss"]) and np.isfinite(history[-1]["actor_loss"])
    breakout = make("Breakout-MinAtar")
    assert breakout.obs_dtype == jnp.uint8  # boolean images are stored as bytes
    state, history = run_updates(breakout, 3)
    assert state.replay.items.obs.dtype == jnp.uint8
    assert np.isfinite(history[-1]["loss"]) and history[-1]["decoder_loss"] > 0


# ----------------------------------------------------------------------------- driver


@pytest.mark.slow
def test_resumed_run_matches_an_uninterrupted_one(tmp_path):
    """Replay, world model, actor, critic, slow critic and return scale are all in the
    checkpoint: a resumed run ends exactly where an uninterrupted one does."""
    run = dict(num_seeds=2, progress=False, log_every=32)
    whole = train(make(), RunConfig(**run))
    run_dir = tmp_path / "run"
    train(make(total_steps=32), RunConfig(**run, run_dir=str(run_dir)))
    resumed = train(make(), RunConfig(**run, run_dir=str(run_dir), resume=True))
    assert tree_fingerprint(resumed.state) == tree_fingerprint(whole.state)
    assert resumed.summary["params_fingerprint"] == whole.summary["params_fingerprint"]
    last = whole.metrics[-1]
    assert np.asarray(last["loss"]).shape == (2,)
    assert last["loss"][0] != last["loss"][1]  # two agents, two seeds
