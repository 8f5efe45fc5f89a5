"""The algorithm contract (`jaxrl/training/contract.py`) through the generic driver.

Two toy algorithms without an environment, each a few lines, exercise what the
driver promises every algorithm: a fused one (`update`) and a staged one
(`process` on the host with a data cursor, then a jitted `learn`). Both fit
`y = 3x - 1` by SGD, so they compile in a second; their `hyperparams` is the
contract's default. The declarations the layers above the driver read, and the
environment protocol, have tests of their own (below the resume tests).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

from jaxrl import algorithms, envs, evaluation
from jaxrl import config as cfg
from jaxrl.training import driver
from jaxrl.training.checkpoint import tree_fingerprint
from jaxrl.training.contract import (
    TARGET_FIELDS,
    Algorithm,
    EnvironmentAlgorithm,
    check_algorithm,
    check_environment_algorithm,
    declared,
)
from jaxrl.training.driver import RunConfig


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    total_steps: int = 64
    """Samples to train on (per agent)."""
    batch_size: int = 8
    """Samples per update."""
    lr: float = 0.1
    """SGD step size."""

    def validate(self) -> ToyConfig:
        cfg.check_positive(self, "total_steps", "batch_size", "lr")
        return self


@struct.dataclass
class ToyState:
    params: Any
    opt_state: Any
    frozen: jax.Array  # derivable from the key: excluded from checkpoints
    key: jax.Array
    update_step: jax.Array
    hparams: Any


class _Toy(Algorithm):
    progress_unit = "samples"
    sweepable = ("lr",)

    def __init__(self, config: ToyConfig, frozen_scale: float = 1.0):
        self.config = config.validate()
        self.steps_per_update = config.batch_size
        self.num_updates = config.total_steps // config.batch_size
        self.frozen_scale = frozen_scale

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> ToyState:
        key, k_init = jax.random.split(key)
        if params is None:
            params = {"w": jax.random.normal(k_init, ()), "b": jnp.zeros(())}
        return ToyState(
            params=params,
            opt_state=optax.sgd(1.0).init(params),
            frozen=jnp.full((4,), self.frozen_scale),
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def _step(self, state: ToyState, x: jax.Array) -> tuple[ToyState, dict[str, jax.Array]]:
        def loss_fn(p):
            return jnp.mean((p["w"] * x + p["b"] - (3.0 * x - 1.0)) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        updates, opt_state = optax.sgd(state.hparams.lr).update(grads, state.opt_state)
        state = state.replace(
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
            update_step=state.update_step + 1,
        )
        return state, {"loss": loss, "tokens": jnp.asarray(x.size, jnp.int32)}


class FusedToy(_Toy):
    name = "fused-toy"
    checkpoint_exclude = ("frozen",)

    def update(self, state):
        key, k_x = jax.random.split(state.key)
        x = jax.random.uniform(k_x, (self.config.batch_size,), minval=-1, maxval=1)
        return self._step(state.replace(key=key), x)


class StagedToy(_Toy):
    """The host draws the data (numpy, from a cursor in the host state)."""

    name = "staged-toy"
    checkpoint_exclude = ("frozen",)

    def init_host_state(self, seed: int, num_agents: int) -> Any:
        return {"seed": seed, "cursor": 0, "agents": num_agents}

    def process(self, collected, host_state):
        assert collected is None  # no collect phase
        rng = np.random.default_rng([host_state["seed"], host_state["cursor"]])
        x = rng.uniform(-1, 1, (host_state["agents"], self.config.batch_size)).astype(np.float32)
        host_state = {**host_state, "cursor": host_state["cursor"] + 1}
        return x, host_state, {"cursor": host_state["cursor"]}

    def learn(self, state, batch):
        return self._step(state, batch)


class FourPhaseToy(StagedToy):
    """Host inputs -> device collect -> host process -> device learn (GRPO's shape):
    the host draws x, the device computes the targets, the host adds noise-free
    checks, the device learns."""

    name = "four-phase-toy"

    def prepare(self, host_state):
        x, host_state, _ = StagedToy.process(self, None, host_state)
        return x, host_state

    def collect(self, state, x):
        return state, {"x": x, "y": 3.0 * x - 1.0}

    def process(self, collected, host_state):
        assert collected["x"].shape == (host_state["agents"], self.config.batch_size)
        np.testing.assert_allclose(collected["y"], 3.0 * collected["x"] - 1.0, atol=1e-6)
        return collected["x"], host_state, {"cursor": host_state["cursor"]}


def _run(algo, tmp_path=None, **run):
    run.setdefault("progress", False)
    if tmp_path is not None:
        run.setdefault("run_dir", str(tmp_path))
    return driver.train(algo, RunConfig(**run))


@pytest.mark.parametrize("cls", [FusedToy, StagedToy, FourPhaseToy])
def test_both_step_kinds_learn_through_one_loop(cls, tmp_path):
    result = _run(cls(ToyConfig(total_steps=400, lr=0.5)), tmp_path, num_seeds=2, log_every=40)
    params = jax.tree.map(np.asarray, result.state.params)
    np.testing.assert_allclose(params["w"], [3.0, 3.0], atol=0.1)
    np.testing.assert_allclose(params["b"], [-1.0, -1.0], atol=0.05)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["update"] for r in rows] == [5 * i for i in range(1, 11)]
    assert [r["samples"] for r in rows] == [40 * i for i in range(1, 11)]
    assert rows[0]["tokens"] == [40, 40]  # summed over the chunk's 5 updates, per agent
    assert rows[0]["tokens_per_second"] > 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["progress_unit"] == "samples" and summary["samples_per_agent"] == 400
    assert "final_return_mean" not in summary  # no episodes: no returns invented
    if cls is not FusedToy:
        assert rows[-1]["cursor"] == [48.0, 48.0]  # host metrics are logged (chunk mean: 46..50)


@pytest.mark.parametrize("cls", [FusedToy, StagedToy, FourPhaseToy])
def test_resume_matches_uninterrupted_run_with_host_state(cls, tmp_path):
    algo = cls(ToyConfig(total_steps=80))
    full = _run(algo, tmp_path / "full", checkpoint_every=16, log_every=8)
    # The same run stopped after 5 of its 10 updates, then resumed.
    _run(cls(ToyConfig(total_steps=40)), tmp_path / "half", checkpoint_every=16, log_every=8)
    config = json.loads((tmp_path / "half" / "config.json").read_text())
    assert config["config"]["total_steps"] == 40
    resumed = _run(algo, tmp_path / "half", resume=True, checkpoint_every=16, log_every=8)
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    config = json.loads((tmp_path / "half" / "config.json").read_text())
    assert config["config"]["total_steps"] == 80  # the record says what the run now is
    if cls is not FusedToy:
        from jaxrl.training.checkpoint import Checkpointer

        ckpt = Checkpointer(tmp_path / "half" / "checkpoints", read_only=True)
        _, _, meta = ckpt.restore_latest(driver.checkpointed_fields(algo, resumed.state))
        ckpt.close()
        assert meta["host_state"] == {"seed": 0, "cursor": 10, "agents": 1}


class EarlyStopToy(StagedToy):
    """Stops the run once every agent has made `stop_after` updates (SFT stops on a
    training accuracy; the driver's side is the same)."""

    name = "early-stop-toy"

    def __init__(self, config: ToyConfig, stop_after: int):
        super().__init__(config)
        self.stop_after = stop_after

    def early_stop(self, state):
        return state, bool(np.all(np.asarray(state.update_step) >= self.stop_after))


def test_early_stop_ends_the_run_with_a_checkpoint_and_resume_trains_no_more(tmp_path, capsys):
    algo = EarlyStopToy(ToyConfig(total_steps=80), stop_after=3)  # 10 updates at most
    first = _run(algo, tmp_path, num_seeds=2, log_every=8, checkpoint_every=40)
    # One line says why the run (and its progress bar) stopped before the budget.
    assert capsys.readouterr().err.splitlines()[-1] == (
        "jaxrl: early-stop-toy ended the run at update 3 of 10: the algorithm's goal was reached"
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_early_at_update"] == 3 and summary["samples_per_agent"] == 24
    assert np.asarray(first.state.update_step).tolist() == [3, 3]
    assert len(first.metrics) == 3
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == [
        "3"
    ]  # the stop wrote a checkpoint although none was due

    again = _run(algo, tmp_path, resume=True, num_seeds=2, log_every=8, checkpoint_every=40)
    assert again.summary["stopped_early_at_update"] == 3
    assert again.summary["params_fingerprint"] == first.summary["params_fingerprint"]
    assert np.asarray(again.state.update_step).tolist() == [3, 3]  # nothing trained


def test_excluded_fields_are_not_saved_and_must_match_on_resume(tmp_path):
    _run(FusedToy(ToyConfig(total_steps=40)), tmp_path, checkpoint_every=8)
    saved = list((tmp_path / "checkpoints").iterdir())[0] / "state" / "_METADATA"
    assert "opt_state" in saved.read_text() and "frozen" not in saved.read_text()
    # The frozen part is rebuilt by init; a different one would mix two models.
    other = FusedToy(ToyConfig(total_steps=80), frozen_scale=2.0)
    with pytest.raises(cfg.ConfigError, match=r"frozen parts .*\['frozen'\].*model changed"):
        _run(other, tmp_path, resume=True, checkpoint_every=8)


def test_resume_without_a_checkpoint_fails_and_changes_nothing(tmp_path):
    algo = FusedToy(ToyConfig())
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "algorithm": algo.name,
                "config": cfg.to_dict(algo.config),
                "run": driver.run_dict(RunConfig(run_dir=str(tmp_path))),
            }
        )
    )
    (tmp_path / "metrics.jsonl").write_text('{"update": 1}\n')
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(cfg.ConfigError, match="no checkpoint .*nothing was changed.*fresh"):
        _run(algo, tmp_path, resume=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    # --fresh starts over in the same directory.
    result = _run(algo, tmp_path, fresh=True)
    assert result.summary["samples_per_agent"] == 64
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(rows[0])["update"] != 1 or len(rows) > 1


def test_a_run_cannot_be_shortened_or_changed_on_resume(tmp_path):
    _run(FusedToy(ToyConfig(total_steps=40)), tmp_path)
    with pytest.raises(cfg.ConfigError, match="extended, not shortened"):
        _run(FusedToy(ToyConfig(total_steps=32)), tmp_path, resume=True)
    with pytest.raises(cfg.ConfigError, match="batch_size: saved 8, now 4"):
        _run(FusedToy(ToyConfig(total_steps=40, batch_size=4)), tmp_path, resume=True)


def test_time_based_checkpoints_fall_on_chunk_boundaries(tmp_path):
    # A tiny interval: every chunk boundary is "due"; no step interval is set.
    _run(
        FusedToy(ToyConfig()), tmp_path, checkpoint_minutes=1e-9, log_every=16, keep_checkpoints=10
    )
    steps = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir())
    assert steps == [2, 4, 6, 8]


def test_default_runs_checkpoint_by_time_and_at_the_end(tmp_path):
    assert RunConfig().checkpoint_minutes == 10.0
    _run(FusedToy(ToyConfig()), tmp_path)
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [8]


def test_nan_in_a_staged_learn_stops_the_run(tmp_path):
    algo = StagedToy(ToyConfig(lr=1e30))
    with pytest.raises(driver.NaNLossError, match="loss is .* at update"):
        _run(algo, tmp_path, log_every=8)


def test_contract_violations_fail_early():
    class Neither(_Toy):
        name = "neither"

    with pytest.raises(TypeError, match="exactly one of update"):
        check_algorithm(Neither(ToyConfig()))
    with pytest.raises(TypeError, match="not a jaxrl.training.contract.Algorithm"):
        check_algorithm(object())

    class PrepareOnly(StagedToy):
        name = "prepare-only"

        def prepare(self, host_state):
            return None, host_state

    with pytest.raises(TypeError, match="prepare phase but no collect"):
        check_algorithm(PrepareOnly(ToyConfig()))


# ----------------------------------------------------------------------------- declarations
def test_default_hyperparams_come_from_sweepable_and_are_validated():
    algo = FusedToy(ToyConfig(lr=0.5))
    hp = algo.hyperparams()
    assert type(hp).__name__ == "FusedToyHyperParams"
    assert jax.tree.leaves(hp) == [jnp.float32(0.5)] and hp.lr.dtype == jnp.float32
    assert float(algo.hyperparams(lr=0.25).lr) == 0.25
    assert type(algo.hyperparams()) is type(hp)  # one class: stacked agents share a treedef
    with pytest.raises(cfg.ConfigError, match=r"invalid lr=-1.0: must be > 0"):
        algo.hyperparams(lr=-1.0)


@pytest.mark.parametrize("name", algorithms.names())
def test_every_registered_algorithm_declares_what_the_layers_above_read(name):
    entry = algorithms.get(name)
    cls = entry.algorithm
    assert cls.name == name
    assert entry.trains_on in TARGET_FIELDS
    assert isinstance(entry.headline_metric, str) and entry.headline_metric
    # In an environment: trains there, or trains on a dataset and is evaluated there.
    if entry.trains_on == "env":
        assert issubclass(cls, EnvironmentAlgorithm)
    if entry.trains_on == "task":
        assert not issubclass(cls, EnvironmentAlgorithm)
    field = TARGET_FIELDS[entry.trains_on]
    assert field in {f.name for f in dataclasses.fields(entry.Config)}
    if cls.evaluate is not EnvironmentAlgorithm.evaluate:  # evaluates itself: says what
        assert isinstance(cls.eval_metric, str) and cls.eval_metric


def test_an_undeclared_algorithm_is_refused_naming_the_declaration():
    class Undeclared(FusedToy):
        pass

    with pytest.raises(TypeError, match=r"Undeclared declares no trains_on"):
        declared(Undeclared, "trains_on")

    class Misdeclared(FusedToy):
        trains_on = "environment"

    with pytest.raises(TypeError, match=r"trains_on='environment': must be one of"):
        declared(Misdeclared, "trains_on")


def test_episodes_need_the_environment_protocol():
    state = FusedToy(ToyConfig()).init(jax.random.key(0), FusedToy(ToyConfig()).hyperparams())
    with pytest.raises(TypeError, match=r"FusedToy does not act in an environment"):
        evaluation.evaluate_episodes(FusedToy(ToyConfig()), state, jax.random.key(0), 1)
    with pytest.raises(NotImplementedError, match=r"no default evaluate"):
        FusedToy(ToyConfig()).evaluate(state, jax.random.key(0), 1)

    class NoAct(EnvironmentAlgorithm):
        name = "no-act"
        config, steps_per_update, num_updates = ToyConfig(), 1, 1

        def __init__(self, env, env_params):
            self.env, self.env_params = env, env_params

        def update(self, state):
            return state, {}

    algo = NoAct(*envs.make("CartPole-v1"))
    with pytest.raises(TypeError, match=r"NoAct lacks \['act'\] of the EnvironmentAlgorithm"):
        check_algorithm(algo)
    del algo.env_params
    with pytest.raises(TypeError, match=r"NoAct lacks \['env_params', 'act'\]"):
        check_environment_algorithm(algo)


def test_warm_start_params_are_used_by_every_agent():
    params = {"w": jnp.asarray(3.0), "b": jnp.asarray(-1.0)}
    algo = FusedToy(ToyConfig(total_steps=8))
    result = driver.train(algo, RunConfig(num_seeds=2, progress=False), init_params=params)
    # Already at the optimum: SGD leaves it there, for both agents.
    np.testing.assert_allclose(np.asarray(result.state.params["w"]), [3.0, 3.0], atol=1e-6)


# ----------------------------------------------------------------------------- fingerprint
def test_fingerprint_sees_every_single_element_change():
    tree = {"a": jnp.arange(12, dtype=jnp.float32).reshape(3, 4), "k": jax.random.key(0)}
    base = tree_fingerprint(tree)
    for i in range(12):
        changed = {**tree, "a": tree["a"].reshape(-1).at[i].add(1e-6).reshape(3, 4)}
        assert tree_fingerprint(changed) != base
    assert tree_fingerprint({**tree, "a": tree["a"].T}) != base  # shape (and order)
    assert tree_fingerprint({**tree, "k": jax.random.key(1)}) != base
    assert tree_fingerprint({**tree, "a": tree["a"].astype(jnp.int32)}) != base
    assert tree_fingerprint(jax.tree.map(jnp.copy, tree)) == base  # values, not identity


# ----------------------------------------------------------------------------- final return
def _agents(grid, seeds):
    return driver.Agents(grid=grid, num_seeds=seeds, keys=None, hparams=None)


def test_final_return_is_episode_weighted_over_the_last_tenth_of_updates():
    """100 updates logged every 5: the window is the last 10 updates = the last 2 rows."""
    history = [
        {"update": u, "episodes": [1, 0], "episode_return": [1.0, None]} for u in range(5, 95, 5)
    ]
    history += [
        {"update": 95, "episodes": [1, 0], "episode_return": [10.0, None]},
        {"update": 100, "episodes": [3, 0], "episode_return": [30.0, None]},
    ]
    out = driver.final_returns_summary(history, 100, _agents([{}], 2))
    # Agent 0: (1 x 10 + 3 x 30) / 4 = 25; agent 1 finished no episode in the window.
    assert out["final_return_per_agent"] == [25.0, None]
    assert out["final_return_mean"] == 25.0 and out["final_return_std"] == 0.0
    assert out["final_return_agents"] == 1
    assert out["final_return_window"] == [90, 100]


def test_final_return_window_is_reported_when_rows_are_coarse():
    """Rows of 40 updates: the last 10% (10 updates) lies in one row covering 40."""
    history = [
        {"update": 40, "episodes": [2], "episode_return": [5.0]},
        {"update": 80, "episodes": [2], "episode_return": [7.0]},
        {"update": 100, "episodes": [1], "episode_return": [9.0]},
    ]
    out = driver.final_returns_summary(history, 100, _agents([{}], 1))
    assert out["final_return_window"] == [80, 100]
    assert out["final_return_per_agent"] == [9.0]


class ScheduledToy(FusedToy):
    """A toy whose learning-rate schedule would be defined by total_steps."""

    @property
    def schedule_follows_total(self) -> bool:
        return True


def test_extending_a_run_whose_schedule_follows_the_total_needs_reschedule(tmp_path):
    _run(ScheduledToy(ToyConfig(total_steps=40)), tmp_path)
    with pytest.raises(cfg.ConfigError, match=r"total_steps=80.*--reschedule"):
        _run(ScheduledToy(ToyConfig(total_steps=80)), tmp_path, resume=True)
    result = _run(ScheduledToy(ToyConfig(total_steps=80)), tmp_path, resume=True, reschedule=True)
    assert result.summary["samples_per_agent"] == 80
