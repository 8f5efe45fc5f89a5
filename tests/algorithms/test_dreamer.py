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
from jaxrl.algorithms.dreamer import losses, tricks
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
    assert default.gradient_steps == 2  # 64 * 32 env steps = 2048 = 2 x (16 x 64)


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


def with_certain_posterior(algo: dreamer.Dreamer, params: dict) -> dict:
    """`params` with a posterior that puts all its mass on class 0 of every latent, so
    the latents are the same whatever the key (the config needs `unimix=0`)."""
    wm_params = params["world_model"]
    post = jax.tree.map(jnp.zeros_like, wm_params["posterior"])
    bias = np.full(post["params"]["Dense_0"]["bias"].shape, -1e4, np.float32)
    bias[:: algo.world_model.num_classes] = 1e4  # class 0 of every latent
    post["params"]["Dense_0"]["bias"] = jnp.asarray(bias)
    return {**params, "world_model": {**wm_params, "posterior": post}}


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
    params = with_certain_posterior(algo, jax.jit(algo.init_params)(jax.random.key(0)))
    seq = random_sequences(algo, 2, 6)
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


# ----------------------------------------------------------------------------- inspection

open_loop = jax.jit(dreamer.Dreamer.open_loop, static_argnames=("self", "context"))


def one_episode(algo: dreamer.Dreamer, length: int, seed: int = 0) -> losses.Sequences:
    """A random `[T, ...]` trajectory that starts an episode and never starts another."""
    seq = random_sequences(algo, 1, length, seed)
    seq = seq._replace(is_first=jnp.zeros_like(seq.is_first).at[:, 0].set(True))
    return jax.tree.map(lambda x: x[0], seq)


@pytest.mark.parametrize("posterior", ["history", "observation"])
def test_open_loop_with_the_whole_context_decodes_the_training_pass(posterior):
    """context = T: no imagination; the predictions are the decoder and the heads on
    the posterior states that training computes (`observe`, as the world-model loss)."""
    algo = make(posterior=posterior, unimix=0.0)
    wm = algo.world_model
    params = with_certain_posterior(algo, jax.jit(algo.init_params)(jax.random.key(0)))
    seq = random_sequences(algo, 3, 8)
    pred = open_loop(algo, params, seq.obs, seq.action, seq.is_first, 8, jax.random.key(1))
    assert pred["obs"].shape == (3, 8, *algo.obs_shape)  # a batch in, a batch out
    assert pred["reward"].shape == pred["cont"].shape == (3, 8)
    p = params["world_model"]
    out = wm.observe(p, seq.obs, seq.action, seq.is_first, jax.random.key(2))
    decoded = tricks.symexp(wm.decode(p, out["h"], out["z"]))
    np.testing.assert_allclose(pred["obs"], decoded, rtol=1e-5, atol=1e-5)
    cont = jax.nn.sigmoid(wm.cont_logit(p, out["next_h"]))
    np.testing.assert_allclose(pred["cont"], cont, rtol=1e-5, atol=1e-6)
    reward = tricks.twohot_mean(wm.reward_logits(p, out["next_h"]), algo.bins)
    np.testing.assert_allclose(pred["reward"], reward, atol=1e-6)
    # A shorter context reconstructs the same first steps (the latents are certain).
    short = open_loop(algo, params, seq.obs, seq.action, seq.is_first, 5, jax.random.key(3))
    np.testing.assert_allclose(short["obs"][:, :5], decoded[:, :5], rtol=1e-5, atol=1e-5)
    assert not np.allclose(short["obs"][:, 5:], decoded[:, 5:], atol=1e-3)  # imagined


@pytest.mark.parametrize("posterior", ["history", "observation"])
def test_open_loop_imagines_under_the_given_actions_without_the_later_observations(posterior):
    algo = make(posterior=posterior)
    params = jax.jit(algo.init_params)(jax.random.key(0))
    seq, context, key = one_episode(algo, 10), 4, jax.random.key(1)
    base = open_loop(algo, params, seq.obs, seq.action, seq.is_first, context, key)
    assert base["obs"].shape == (10, *algo.obs_shape)  # one trajectory in, one out
    assert base["reward"].shape == base["cont"].shape == (10,)
    # Another action at step `context`: the state h_{context+1} after it changes, so the
    # predictions from step context + 1 on and the continuation of step `context` do.
    other = seq.action.at[context].set(1 - seq.action[context])
    changed = open_loop(algo, params, seq.obs, other, seq.is_first, context, key)
    np.testing.assert_array_equal(changed["obs"][: context + 1], base["obs"][: context + 1])
    np.testing.assert_array_equal(changed["cont"][:context], base["cont"][:context])
    assert np.all(np.abs(changed["obs"][context + 1 :] - base["obs"][context + 1 :]).max(-1) > 0)
    assert changed["cont"][context] != base["cont"][context]
    # An action inside the context changes the first imagined step too.
    earlier = seq.action.at[context - 1].set(1 - seq.action[context - 1])
    moved = open_loop(algo, params, seq.obs, earlier, seq.is_first, context, key)
    assert np.abs(moved["obs"][context] - base["obs"][context]).max() > 0
    # The observations after the context are never seen.
    unseen = seq.obs.at[context:].set(100.0)
    blind = open_loop(algo, params, unseen, seq.action, seq.is_first, context, key)
    np.testing.assert_array_equal(blind["obs"], base["obs"])


def test_open_loop_with_continuous_actions():
    """Box actions are `[T, action_dim]` in the actor's [-1, 1] box (as `rollout` records
    them); the batched and unbatched CartPole shapes are checked in the tests above."""
    pendulum = make("Pendulum-v1")
    params = jax.jit(pendulum.init_params)(jax.random.key(0))
    actions = jnp.linspace(-1.0, 1.0, 6)[:, None]
    obs = jnp.zeros((6, *pendulum.obs_shape))
    out = open_loop(pendulum, params, obs, actions, jnp.arange(6) == 0, 3, jax.random.key(1))
    assert out["obs"].shape == (6, *pendulum.obs_shape)
    assert out["reward"].shape == out["cont"].shape == (6,)
    cont = np.asarray(out["cont"])
    assert np.all((cont >= 0) & (cont <= 1)) and np.isfinite(out["obs"]).all()
    with pytest.raises(ValueError, match=r"invalid action shape \(6,\): expected \(6, 1\)"):
        pendulum.open_loop(params, obs, actions[:, 0], jnp.arange(6) == 0, 3, jax.random.key(1))


def test_open_loop_rejects_a_bad_context_or_shape_naming_it():
    algo = make()
    params = jax.jit(algo.init_params)(jax.random.key(0))
    seq = one_episode(algo, 6)
    key = jax.random.key(1)
    for context in (0, -1, 7, 2.5):
        with pytest.raises(cfg.ConfigError, match=rf"invalid context={context}.*\[1, T = 6\]"):
            algo.open_loop(params, seq.obs, seq.action, seq.is_first, context, key)
    with pytest.raises(ValueError, match="invalid action shape"):
        algo.open_loop(params, seq.obs, seq.action[:5], seq.is_first, 2, key)
    with pytest.raises(ValueError, match="invalid is_first shape"):
        algo.open_loop(params, seq.obs, seq.action, seq.is_first[None], 2, key)
    with pytest.raises(ValueError, match="invalid obs shape"):
        algo.open_loop(params, seq.obs[..., :3], seq.action, seq.is_first, 2, key)


def test_rollout_records_what_the_policy_did_in_one_environment():
    """Greedy actions of a rollout are the actor's mode on the posterior states of the
    recorded trajectory, and the episode bookkeeping is the replay buffer's."""
    algo = make(unimix=0.0)
    params = with_certain_posterior(algo, jax.jit(algo.init_params)(jax.random.key(0)))
    rollout = jax.jit(algo.rollout, static_argnames=("num_steps", "deterministic"))
    rec = rollout(params, jax.random.key(1), 60)
    assert rec.obs.shape == (60, *algo.obs_shape) and rec.action.shape == (60,)
    is_first, terminated = np.asarray(rec.is_first), np.asarray(rec.terminated)
    assert is_first[0] and terminated.any()  # an untrained CartPole agent falls within 60
    # CartPole: no time limit within 60 steps, so an episode starts right after each end.
    np.testing.assert_array_equal(is_first[1:], terminated[:-1])
    np.testing.assert_array_equal(rec.reward, 1.0)
    out = algo.world_model.observe(
        params["world_model"],
        rec.obs[None],
        rec.action[None],
        rec.is_first[None],
        jax.random.key(2),
    )
    features = jnp.concatenate([out["h"], out["z"]], -1)[0]
    np.testing.assert_array_equal(algo.actor.apply(params["actor"], features).mode(), rec.action)
    with pytest.raises(cfg.ConfigError, match="invalid num_steps=0"):
        algo.rollout(params, jax.random.key(1), 0)


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
