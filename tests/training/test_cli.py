"""The `jaxrl` command line: train flags and run directories, usage errors, eval, plot, envs.

Training runs use the shared STD program (conftest.py) and call `jaxrl.cli.main`
in-process, so they reuse its compilation; subprocesses are used only where
the real entry point matters (tests/training/test_checkpoint_resume.py kills them).
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import jaxrl
from jaxrl import cli, envs
from jaxrl import config as cfg
from jaxrl.algorithms.ppo import SWEEPABLE

from .conftest import (
    NUM_AGENTS,
    NUM_UPDATES,
    STD_HPARAMS,
    STEPS_PER_UPDATE,
    SUMMARY_KEYS,
    checkpoint_steps,
    read_metrics,
    std_train_args,
    subprocess_env,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _stdout_json(out: str) -> dict:
    """The first line of stdout that is a JSON object."""
    for line in out.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError(f"no JSON line in output:\n{out}")


# ----------------------------------------------------------------------------- train
def test_train_flags_produce_the_run_directory(tmp_path, capsys, reference_summary):
    run_dir = tmp_path / "run"
    args = std_train_args(run_dir, "--keep-checkpoints", "2", checkpoint_every=2048, seed=3)
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    printed = _stdout_json(out)
    # The headline line; with a sweep, its means are on one line per sweep point.
    assert set(printed) == set(SUMMARY_KEYS) - {
        "params_fingerprint",
        "final_return_per_agent",
        "sweep",
    }
    assert out.count("  sweep point ") == 2
    assert f"run directory: {run_dir}" in out

    # config.json: every hyperparameter resolved (flags over the env preset), and the run options.
    resolved = json.loads((run_dir / "config.json").read_text())
    assert resolved["algorithm"] == "ppo"
    assert resolved["config"] == cfg.to_dict(jaxrl.make_config("ppo", **STD_HPARAMS))
    assert (
        resolved["config"]["lr"] == 2.5e-4 and resolved["config"]["gamma"] == 0.99
    )  # preset defaults
    run = resolved["run"]
    assert run["num_seeds"] == 2 and run["seed"] == 3
    assert run["sweep"] == {"lr": [1e-3, 3e-4]}
    assert run["checkpoint_every"] == 2048 and run["keep_checkpoints"] == 2
    assert run["resume"] is False and run["run_dir"] == str(run_dir)

    # metrics.jsonl: one row per update (logging every update here), one value per agent.
    rows = read_metrics(run_dir)
    assert [r["update"] for r in rows] == list(range(1, NUM_UPDATES + 1))
    assert [r["env_steps"] for r in rows] == [
        u * STEPS_PER_UPDATE for u in range(1, NUM_UPDATES + 1)
    ]
    for name in ("episode_return", "episode_length", "episodes", "loss", "entropy", "lr"):
        assert all(len(r[name]) == NUM_AGENTS for r in rows), name
    # Agents are sweep-point-major: (lr=1e-3, seeds 0, 1), (lr=3e-4, seeds 0, 1); lr anneals.
    np.testing.assert_allclose(rows[0]["lr"], [1e-3, 1e-3, 3e-4, 3e-4], rtol=1e-6)
    np.testing.assert_allclose(
        rows[-1]["lr"], np.asarray([1e-3, 1e-3, 3e-4, 3e-4]) / NUM_UPDATES, rtol=1e-5
    )
    assert all(np.isfinite(r["loss"]).all() for r in rows)

    # Checkpoints every 8 updates, the last 2 kept.
    assert checkpoint_steps(run_dir) == [24, 32]

    summary = json.loads((run_dir / "summary.json").read_text())
    assert set(SUMMARY_KEYS) <= set(summary)
    assert {k: summary[k] for k in printed} == printed
    # 32 updates already lift CartPole above a random policy's ~22 (seed 3; the faster
    # learning rate more so); the exact values are fixed by the seed.
    # With a sweep, the means are per sweep point: one over all agents would average
    # runs of different hyperparameters.
    assert "final_return_mean" not in summary
    assert summary["sweep"][1]["final_return_mean"] > 30.0  # lr 3e-4
    assert summary["sweep"][1]["final_return_std"] >= 0.0
    assert summary["sweep"][0]["final_return_mean"] > 40.0  # lr 1e-3
    assert summary["steps_per_second"] > 0 and summary["compile_seconds"] > 0
    assert summary["wall_seconds"] >= summary["compile_seconds"]
    assert re.fullmatch(r"[0-9a-f]{64}", summary["params_fingerprint"])
    assert summary["params_fingerprint"] != reference_summary["params_fingerprint"]  # seed 3, not 0
    assert summary["num_agents"] == NUM_AGENTS and summary["env_steps_per_agent"] == 8192
    assert [p["lr"] for p in summary["sweep"]] == [1e-3, 3e-4]
    assert len(summary["final_return_per_agent"]) == NUM_AGENTS


@pytest.mark.parametrize("suffix", ["toml", "json"])
def test_config_file(tmp_path, reference_run, reference_summary, suffix):
    """`--config FILE` gives the same resolved config (and run) as the same flags; flags win."""
    values = {**STD_HPARAMS, "hidden_sizes": [64, 64], "update_epochs": 3}  # --update-epochs 2 wins
    path = tmp_path / f"ppo.{suffix}"
    if suffix == "toml":
        path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
    else:
        path.write_text(json.dumps(values))
    run_dir = tmp_path / "run"
    args = [
        "train",
        "ppo",
        "--config",
        str(path),
        "--update-epochs",
        "2",
        "--num-seeds",
        "2",
        "--sweep",
        "lr=0.001,0.0003",
        "--checkpoint-every",
        "1024",
        "--run-dir",
        str(run_dir),
        "--no-progress",
    ]
    assert cli.main(args) == 0
    resolved = json.loads((run_dir / "config.json").read_text())
    reference = json.loads((reference_run / "config.json").read_text())
    assert resolved["config"] == reference["config"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["params_fingerprint"] == reference_summary["params_fingerprint"]


# ----------------------------------------------------------------------------- usage errors
_ALL_IDS = envs.registered()

USAGE_ERRORS = {
    "negative-lr": (["--lr", "-1"], [r"invalid lr=-1\.0: must be > 0"]),
    "zero-lr": (["--lr", "0"], [r"invalid lr=0\.0: must be > 0"]),
    "minibatches-not-dividing": (
        ["--num-minibatches", "3"],
        [r"invalid num_minibatches=3: must be a divisor of num_envs \* num_steps = 512"],
    ),
    "unknown-env": (
        ["--env", "CartPol-v1"],
        [r"invalid env='CartPol-v1'", *map(re.escape, _ALL_IDS)],
    ),
    "tanh-squash-discrete": (
        ["--tanh-squash"],
        [r"invalid tanh_squash=True", r"discrete action space", r"continuous \(Box\) actions"],
    ),
    "activation": (
        ["--activation", "sigmoid"],
        [r"invalid activation='sigmoid': must be one of \['tanh', 'relu', 'gelu', 'silu'\]"],
    ),
    "gamma": (["--gamma", "1.5"], [r"invalid gamma=1\.5: must be in \[0\.0, 1\.0\]"]),
    "not-an-int": (["--num-envs", "four"], [r"invalid num_envs='four': expected int"]),
    "total-steps-below-one-update": (
        ["--total-steps", "100"],
        [r"invalid total_steps=100: must be >= num_envs"],
    ),
    "num-seeds": (["--num-seeds", "0"], [r"invalid num_seeds=0: must be > 0"]),
    "seed": (["--seed", "-1"], [r"invalid seed=-1: must be an integer >= 0"]),
    "checkpoint-every": (
        ["--checkpoint-every", "0"],
        [r"invalid checkpoint_every=0: must be a positive integer"],
    ),
    "sweep-unsweepable": (
        ["--sweep", "num_envs=2,4"],
        [r"invalid sweep='num_envs'", re.escape(str(list(SWEEPABLE)))],
    ),
    "sweep-not-numbers": (
        ["--sweep", "lr=fast,slow"],
        [r"invalid sweep 'lr=fast,slow': values must be numbers"],
    ),
    "sweep-no-values": (["--sweep", "lr"], [r"invalid sweep 'lr': expected name=v1,v2"]),
    "sweep-bad-value": (["--sweep", "lr=-1,0.001"], [r"invalid lr=-1\.0: must be > 0"]),
    "config-file-missing": (["--config", "no-such-file.toml"], [r"no-such-file\.toml"]),
    "sweep-repeated": (
        ["--sweep", "lr=1e-3", "lr=3e-4"],
        [r"invalid sweep 'lr=3e-4': 'lr' is swept twice; give all its values once"],
    ),
    "num-devices-too-many": (
        ["--num-devices", "99"],
        [r"invalid num_devices=99: must be in \[1, \d+\]"],
    ),
    "agent-execution-unknown": (
        ["--agent-execution", "pmap"],
        [r"invalid agent_execution='pmap': must be one of \['vmap', 'map'\]"],
    ),
}


@pytest.mark.parametrize("case", sorted(USAGE_ERRORS))
def test_bad_train_flags_exit_2_naming_field_and_allowed_values(tmp_path, capsys, case):
    flags, patterns = USAGE_ERRORS[case]
    run_dir = tmp_path / "run"
    args = [
        "train",
        "ppo",
        "--total-steps",
        "4096",
        "--run-dir",
        str(run_dir),
        "--no-progress",
        *flags,
    ]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("jaxrl: error: "), captured.err
    for pattern in patterns:
        assert re.search(pattern, captured.err), f"{pattern!r} not in {captured.err!r}"
    assert "Traceback" not in captured.err
    assert not run_dir.exists(), "a rejected command must not create the run directory"


def test_config_file_errors(tmp_path, capsys):
    bad_suffix = tmp_path / "ppo.ini"
    bad_suffix.write_text("lr = 1")
    unknown_key = tmp_path / "unknown.toml"
    unknown_key.write_text("learning_rate = 0.001\n")
    cases = {
        bad_suffix: r"unsupported suffix '\.ini'; use \.toml, \.json or \.yaml",
        unknown_key: (
            r"unknown config field\(s\) \['learning_rate'\] for PPOConfig; allowed: \[.*'lr'"
        ),
    }
    for path, pattern in cases.items():
        assert (
            cli.main(["train", "ppo", "--config", str(path), "--run-dir", str(tmp_path / "r")]) == 2
        )
        assert re.search(pattern, capsys.readouterr().err)
    assert not (tmp_path / "r").exists()


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("envs", "train", "eval", "plot"))


def test_console_script_help():
    script = pathlib.Path(sys.executable).parent / "jaxrl"
    if not script.exists():
        pytest.skip("the jaxrl console script is not installed next to this interpreter")
    done = subprocess.run(
        [str(script), "train", "ppo", "--help"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    for flag in (
        "--env",
        "--total-steps",
        "--num-seeds",
        "--seed",
        "--num-envs",
        "--num-steps",
        "--update-epochs",
        "--num-minibatches",
        "--run-dir",
        "--checkpoint-every",
        "--resume",
        "--config",
        "--sweep",
        "--lr",
    ):
        assert flag in done.stdout, flag


# ----------------------------------------------------------------------------- eval
def _random_cartpole_return(episodes: int = 256) -> float:
    """Mean return of uniformly random actions on CartPole-v1 over whole episodes."""
    import jax
    import jax.numpy as jnp

    env, params = envs.make("CartPole-v1")

    def episode(key):
        _, state = env.reset(key, params)

        def step(carry, k):
            state, total, done = carry
            k_act, k_step = jax.random.split(k)
            action = jax.random.randint(k_act, (), 0, 2)
            _, state, reward, term, trunc, _ = env.step(k_step, state, action, params)
            return (state, total + jnp.where(done, 0.0, reward), done | term | trunc), None

        keys = jax.random.split(key, params.max_steps_in_episode)
        (_, total, _), _ = jax.lax.scan(step, (state, 0.0, False), keys)
        return total

    keys = jax.random.split(jax.random.key(0), episodes)
    return float(jnp.mean(jax.jit(jax.vmap(episode))(keys)))


def test_eval_prints_returns_and_writes_eval_json(copy_run, capsys):
    run_dir = copy_run()
    assert cli.main(["eval", str(run_dir), "--episodes", "3"]) == 0
    printed = _stdout_json(capsys.readouterr().out)
    assert printed == json.loads((run_dir / "eval.json").read_text())
    assert printed["env"] == "CartPole-v1" and printed["episodes_per_agent"] == 3
    assert len(printed["return_per_agent"]) == NUM_AGENTS
    # It evaluates the trained policies: every agent (32 updates) beats uniformly random
    # actions (about 22 on CartPole) by a clear margin; its greedy returns are 79-215.
    random_return = _random_cartpole_return()
    assert 15.0 < random_return < 30.0, random_return
    assert min(printed["return_per_agent"]) > random_return + 40.0, printed
    # Grouped by sweep point (lr), each over its 2 seeds; no mean across sweep points.
    assert "return_mean" not in printed
    assert [p["lr"] for p in printed["sweep"]] == [1e-3, 3e-4]
    per_agent = printed["return_per_agent"]
    assert printed["sweep"][1]["return_mean"] == pytest.approx(np.mean(per_agent[2:]))
    assert printed["sweep"][1]["return_agents"] == 2


def test_eval_report_leads_with_the_declared_eval_metric():
    """Not the first key of `evaluate`'s result: GRPO's `pass@1`, named as declared."""
    from jaxrl.algorithms.grpo import GRPO

    resolved = {"config": {"task": "addition"}, "run": {"num_seeds": 2, "sweep": {}}}
    result = {"response_length_mean": np.array([7.0, 9.0]), "pass@1": np.array([0.5, 1.0])}
    report = cli._eval_report(GRPO, result, resolved, count=4)
    assert report == {
        "task": "addition",
        "pass@1_mean": 0.75,
        "pass@1_std": 0.25,
        "pass@1_agents": 2,
        "pass@1_per_agent": [0.5, 1.0],
        "examples_per_agent": 4,
    }


def test_eval_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert cli.main(["eval", str(tmp_path)]) == 2
    assert "not a jaxrl run directory" in capsys.readouterr().err


def test_eval_of_a_run_without_checkpoints(reference_run, tmp_path, capsys):
    (tmp_path / "config.json").write_bytes((reference_run / "config.json").read_bytes())
    assert cli.main(["eval", str(tmp_path)]) == 2
    assert "no intact checkpoint to evaluate" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]  # eval creates nothing


# ----------------------------------------------------------------------------- plot
def test_plot_writes_a_png(reference_run, tmp_path, capsys):
    import matplotlib.image

    output = tmp_path / "curves.png"
    assert cli.main(["plot", str(reference_run), "-o", str(output)]) == 0
    assert f"wrote {output}" in capsys.readouterr().out
    data = output.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000
    image = matplotlib.image.imread(output)
    assert image.shape[0] > 200 and image.shape[1] > 300
    assert len(np.unique(image.reshape(-1, image.shape[-1]), axis=0)) > 20  # not a blank canvas

    other = tmp_path / "loss.png"
    assert (
        cli.main(
            ["plot", str(reference_run), str(reference_run), "-o", str(other), "--metric", "loss"]
        )
        == 0
    )
    assert other.read_bytes().startswith(PNG_MAGIC)


def test_plot_reads_the_headline_metric_and_progress_unit_by_default(reference_run):
    from jaxrl.plotting import load_curves

    rows = [json.loads(line) for line in (reference_run / "metrics.jsonl").read_text().splitlines()]
    curves = load_curves(reference_run)
    assert list(curves) == [
        f"ppo CartPole-v1 ({reference_run.name}) lr=0.001",
        f"ppo CartPole-v1 ({reference_run.name}) lr=0.0003",
    ]
    steps, values = curves[f"ppo CartPole-v1 ({reference_run.name}) lr=0.0003"]
    np.testing.assert_array_equal(steps, [r["env_steps"] for r in rows])
    expected = [[np.nan if v is None else v for v in r["episode_return"][2:]] for r in rows]
    np.testing.assert_array_equal(values, expected)


def test_aggregate_plots_iqm_and_performance_profile(reference_run, tmp_path, capsys):
    """Issue 31, item 7: each sweep point's seeds' final scores as an IQM with its
    bootstrap interval, and as a performance profile; from the CLI, as PNG files."""
    from jaxrl import stats
    from jaxrl.plotting import final_scores, iqm_figure, profile_figure

    rows = [json.loads(line) for line in (reference_run / "metrics.jsonl").read_text().splitlines()]
    scores = final_scores([reference_run])
    assert [len(v) for v in scores.values()] == [2, 2]  # lr 1e-3 and 3e-4, two seeds each
    last = rows[-max(1, int(np.ceil(0.1 * len(rows)))) :]
    seed0 = [r["episode_return"][0] for r in last if r["episode_return"][0] is not None]
    assert list(scores.values())[0][0] == pytest.approx(np.mean(seed0))

    (axes,) = iqm_figure([reference_run]).axes
    assert len(axes.get_yticklabels()) == 2 and "IQM over seeds" in axes.get_title()
    (axes,) = profile_figure([reference_run]).axes
    for line, values in zip(axes.get_lines(), scores.values(), strict=True):
        np.testing.assert_allclose(
            line.get_ydata(), stats.performance_profile(values, line.get_xdata())
        )
        assert line.get_ydata()[0] == 1.0 and line.get_ydata()[-1] == 0.0

    for kind in ("iqm", "profile"):
        output = tmp_path / f"{kind}.png"
        assert cli.main(["plot", str(reference_run), "-o", str(output), "--kind", kind]) == 0
        assert output.read_bytes().startswith(PNG_MAGIC)


def test_plot_unknown_metric(reference_run, tmp_path, capsys):
    assert (
        cli.main(["plot", str(reference_run), "-o", str(tmp_path / "x.png"), "--metric", "reward"])
        == 2
    )
    err = capsys.readouterr().err
    assert "unknown metric 'reward'" in err and "'episode_return'" in err
    assert not (tmp_path / "x.png").exists()


# ----------------------------------------------------------------------------- envs
def test_envs_lists_and_steps_every_registered_environment(capsys):
    code = cli.main(["envs", "--steps", "20"])
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    missing = [env_id for env_id in envs.registered() if env_id not in lines]
    failed = {
        env_id: line
        for env_id, line in lines.items()
        if "FAILED" in line or "outside its space" in line
    }
    assert not missing, f"not listed: {missing}\n{out}"
    assert not failed, "environments failing `jaxrl envs`:\n" + "\n".join(failed.values())
    assert code == 0, out


@pytest.mark.parametrize(
    ("algorithm", "env", "pattern"),
    [
        ("dqn", "Pendulum-v1", r"invalid env='Pendulum-v1': dqn needs a Discrete action space"),
        ("c51", "Pendulum-v1", r"invalid env='Pendulum-v1': c51 needs a Discrete action space"),
        ("pqn", "Pendulum-v1", r"invalid env='Pendulum-v1': pqn needs a Discrete action space"),
        ("sac", "CartPole-v1", r"invalid env='CartPole-v1': sac needs a 1-D Box .*use dqn, c51"),
        ("td3", "CartPole-v1", r"invalid env='CartPole-v1': td3 needs a 1-D Box .*use dqn, c51"),
    ],
)
def test_action_space_mismatch_exits_2_before_the_run_directory(
    tmp_path, capsys, algorithm, env, pattern
):
    run_dir = tmp_path / "run"
    args = ["train", algorithm, "--env", env, "--run-dir", str(run_dir), "--no-progress"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert re.search(pattern, err), err
    assert "Traceback" not in err
    assert not run_dir.exists()


@pytest.mark.parametrize(
    ("algorithm", "env"),
    [
        ("ppo", "CartPole-v1"),
        ("dqn", "CartPole-v1"),
        ("sac", "Pendulum-v1"),
        ("td3", "Pendulum-v1"),
    ],
)
def test_help_shows_the_algorithms_own_default_environment(capsys, algorithm, env):
    with pytest.raises(SystemExit):
        cli.main(["train", algorithm, "--help"])
    assert f"the preset for --env {env})" in capsys.readouterr().out


@pytest.mark.parametrize("algorithm", jaxrl.algorithms.names())
def test_every_algorithms_help_prints_every_field(capsys, algorithm):
    """argparse %-formats help text: a "%" in a field docstring ("1% unimix") once
    crashed `jaxrl train dreamer --help` with a traceback."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", algorithm, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    config_cls = jaxrl.algorithms.get(algorithm).Config
    for name in cfg.field_docs(config_cls):
        if name != "env":
            assert "--" + name.replace("_", "-") in out, name
