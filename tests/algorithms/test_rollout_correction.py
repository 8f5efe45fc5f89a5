"""Rollout correction (issue 32, items 2 and 3): the importance weights for the mismatch
between the sampler (behaviour) and the learner (proximal) policy, against hand-computed
values; their validation; and GRPO with a bfloat16 sampler, where the mismatch is real."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import config as cfg
from jaxrl import objectives as L
from jaxrl.algorithms import grpo
from jaxrl.config import ConfigError

# Two rows of three tokens; row 1's last token is padding. log rho = proximal - behaviour.
LOG_RHO = np.array([[0.0, math.log(3.0), math.log(0.25)], [math.log(1.5), math.log(0.8), 9.9]])
MASK = np.array([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
BEHAVIOUR = np.full((2, 3), -1.0)
PROXIMAL = BEHAVIOUR + LOG_RHO
CAP, BAND = 2.0, (0.5, 2.0)


def weights(kind: str):
    w, changed = L.rollout_weights(kind, PROXIMAL, BEHAVIOUR, MASK, CAP, BAND)
    return np.asarray(w), np.asarray(changed)


def close(actual, expected):
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-7)


def test_token_truncated_is():
    w, changed = weights("token_tis")
    close(w, [[1.0, 2.0, 0.25], [1.5, 0.8, 0.0]])  # 3 truncated to the cap; padding 0
    close(changed, [[0, 1, 0], [0, 0, 0]])


def test_sequence_truncated_is():
    # Row 0: 1 x 3 x 0.25 = 0.75; row 1: 1.5 x 0.8 = 1.2 (the padding's 9.9 not counted).
    w, changed = weights("seq_tis")
    close(w, [[0.75, 0.75, 0.75], [1.2, 1.2, 0.0]])
    close(changed, np.zeros((2, 3)))
    big = L.rollout_weights("seq_tis", PROXIMAL + 1.0, BEHAVIOUR, MASK, CAP, BAND)[0]
    close(np.asarray(big), [[2.0, 2.0, 2.0], [2.0, 2.0, 0.0]])  # e^3 x 0.75 > 2: capped


def test_token_masked_is():
    w, changed = weights("token_mis")
    close(w, [[1.0, 0.0, 0.0], [1.5, 0.8, 0.0]])  # 3 and 0.25 lie outside [0.5, 2]
    close(changed, [[0, 1, 1], [0, 0, 0]])


def test_sequence_masked_is_and_geometric_rejection():
    w, changed = weights("seq_mis")
    close(w, [[0.75, 0.75, 0.75], [1.2, 1.2, 0.0]])  # both products inside the band
    close(changed, np.zeros((2, 3)))
    # Geometric means: row 0 (0.75)^(1/3) = 0.909, row 1 1.2^(1/2) = 1.095: kept, weight 1.
    w, _ = weights("geo_mis")
    close(w, [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    narrow = L.rollout_weights("geo_mis", PROXIMAL, BEHAVIOUR, MASK, CAP, (0.95, 1.05))
    close(np.asarray(narrow[0]), [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    close(np.asarray(narrow[1]), MASK)


def test_none_is_one_and_the_metrics_measure_the_mismatch_anyway():
    w, changed = weights("none")
    close(w, MASK)
    close(changed, np.zeros((2, 3)))
    measured = L.rollout_metrics(PROXIMAL, BEHAVIOUR, MASK)
    rho = np.exp(LOG_RHO) * MASK
    close(np.asarray(measured["ratio"]), rho)
    k3 = (rho - 1 - LOG_RHO) * MASK  # KL(behaviour || proximal) >= 0 per token
    close(np.asarray(measured["kl"]), k3)
    assert (np.asarray(measured["kl"]) >= 0).all()


def test_weights_carry_no_gradient():
    grad = jax.grad(
        lambda p: jnp.sum(L.rollout_weights("token_tis", p, BEHAVIOUR, MASK, CAP, BAND)[0])
    )(jnp.asarray(PROXIMAL))
    close(np.asarray(grad), np.zeros((2, 3)))


@pytest.mark.parametrize(
    ("kind", "cap", "band", "field"),
    [
        ("nosuch", 2.0, (0.5, 2.0), "rollout_correction"),
        ("token_tis", 0.5, (0.5, 2.0), "rollout_is_cap"),
        ("token_tis", float("inf"), (0.5, 2.0), "rollout_is_cap"),
        ("token_mis", 2.0, (1.2, 2.0), "rollout_mask_band"),  # excludes 1
        ("token_mis", 2.0, (0.5, 0.9), "rollout_mask_band"),
        ("token_mis", 2.0, (0.5,), "rollout_mask_band"),
    ],
)
def test_bad_corrections_name_the_field(kind, cap, band, field):
    with pytest.raises(ConfigError, match=rf"invalid {field}="):
        L.validate_rollout_correction(kind, cap, band)


# ---------------------------------------------------------------------- in GRPO
TINY = dict(
    digits=1,
    num_eval=4,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    num_prompts=4,
    group_size=4,
    total_steps=16,
    eval_samples=2,
)


def _first_update(**overrides):
    algo = grpo.make(cfg.replace(grpo.default_config(), **{**TINY, **overrides}))
    state = algo.init(jax.random.key(0), algo.hyperparams())
    inputs, host = algo.prepare(algo.init_host_state(0, 1))
    one = jax.tree.map(lambda x: jnp.asarray(x[0]), inputs)
    state, collected = jax.jit(algo.collect)(state, one)
    batch, _, _ = algo.process(jax.tree.map(lambda x: np.asarray(x)[None], collected), host)
    batch = jax.tree.map(lambda x: jnp.asarray(x[0]), batch)
    # Rewards that differ within each group, so that the update has a gradient (a random
    # model answers none of the prompts).
    rows = batch["rewards"].shape[0]
    return algo, state, {**batch, "rewards": jnp.asarray(np.arange(rows) % 3, jnp.float32)}


@pytest.mark.parametrize("sampler_dtype", [None, "float32"])
def test_a_learner_dtype_sampler_reports_no_rollout_metrics(sampler_dtype):
    """The default objective is untouched: no rollout_* metrics, no weights."""
    algo, state, batch = _first_update(sampler_dtype=sampler_dtype)
    assert algo.sampler_model is None and not algo.measures_rollout_mismatch
    _, metrics = jax.jit(algo.learn)(state, batch)
    assert not any(name.startswith("rollout_") for name in metrics)


def test_a_bfloat16_sampler_makes_a_measured_mismatch_that_a_correction_weighs():
    algo, state, batch = _first_update(sampler_dtype="bfloat16")
    assert algo.sampler_model.config.dtype == "bfloat16" and algo.measures_rollout_mismatch
    _, uncorrected = jax.jit(algo.learn)(state, batch)
    # bfloat16 sampling moves log-probs by ~1e-2, float32 re-scoring by ~1e-7.
    assert 1e-4 < float(uncorrected["logp_gap"]) < 0.5
    assert 0 < float(uncorrected["rollout_kl"]) < 0.05
    assert abs(float(uncorrected["rollout_ratio"]) - 1.0) < 0.1
    assert float(uncorrected["rollout_corrected"]) == 0.0  # none corrects nothing

    tight = grpo.make(
        cfg.replace(algo.config, rollout_correction="token_mis", rollout_mask_band=(0.999, 1.001))
    )
    _, masked = jax.jit(tight.learn)(state, batch)
    assert 0 < float(masked["rollout_corrected"]) <= 1.0
    np.testing.assert_allclose(masked["rollout_kl"], uncorrected["rollout_kl"], rtol=1e-6)
    # The masked tokens' gradient is gone (GRPO's loss value is ~0 either way: ratio 1).
    assert float(masked["grad_norm"]) != float(uncorrected["grad_norm"])
