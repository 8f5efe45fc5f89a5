"""Config validation, overrides, sweeps, config files and `RunConfig` (no training, no compiles)."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

import jaxrl
from jaxrl import config as cfg
from jaxrl.algorithms.ppo import PRESETS, SWEEPABLE, PPOConfig, default_config
from jaxrl.config import ConfigError
from jaxrl.training.driver import RunConfig

ALL_FIELDS = sorted(f.name for f in dataclasses.fields(PPOConfig))


# ----------------------------------------------------------------------------- PPOConfig
@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"total_steps": 0}, "invalid total_steps=0: must be > 0"),
        ({"num_envs": 0}, "invalid num_envs=0: must be > 0"),
        ({"num_steps": -1}, "invalid num_steps=-1: must be > 0"),
        ({"update_epochs": 0}, "invalid update_epochs=0: must be > 0"),
        ({"num_minibatches": 0}, "invalid num_minibatches=0: must be > 0"),
        ({"lr": -1e-3}, "invalid lr=-0.001: must be > 0"),
        ({"lr": 0.0}, "invalid lr=0.0: must be > 0"),
        ({"lr": float("nan")}, "invalid lr=nan: must be a finite number"),
        ({"max_grad_norm": 0.0}, "invalid max_grad_norm=0.0: must be > 0"),
        ({"adam_eps": 0.0}, "invalid adam_eps=0.0: must be > 0"),
        ({"obs_clip": 0.0}, "invalid obs_clip=0.0: must be > 0"),
        ({"reward_clip": -1.0}, "invalid reward_clip=-1.0: must be > 0"),
        ({"rnn_hidden_size": 0}, "invalid rnn_hidden_size=0: must be > 0"),
        ({"gamma": 1.5}, "invalid gamma=1.5: must be in [0.0, 1.0]"),
        ({"gamma": -0.1}, "invalid gamma=-0.1: must be in [0.0, 1.0]"),
        ({"gae_lambda": 2.0}, "invalid gae_lambda=2.0: must be in [0.0, 1.0]"),
        ({"clip_eps": 0.0}, "invalid clip_eps=0.0: must be > 0"),
        ({"vf_clip_eps": -0.2}, "invalid vf_clip_eps=-0.2: must be > 0"),
        ({"ent_coef": -0.01}, "invalid ent_coef=-0.01: must be >= 0"),
        ({"vf_coef": -0.5}, "invalid vf_coef=-0.5: must be >= 0"),
        (
            {"activation": "sigmoid"},
            "invalid activation='sigmoid': must be one of ['tanh', 'relu', 'gelu', 'silu']",
        ),
        (
            {"hidden_sizes": ()},
            "invalid hidden_sizes=(): must be a non-empty list of positive layer sizes",
        ),
        (
            {"hidden_sizes": (64, 0)},
            "invalid hidden_sizes=(64, 0): must be a non-empty list of positive layer sizes",
        ),
        (
            {"rnn_head_sizes": (64,)},
            "invalid rnn_head_sizes=(64,): must be None unless recurrent=True (a "
            "feed-forward policy's layers are hidden_sizes)",
        ),
        (
            {"recurrent": True, "rnn_head_sizes": (64, 0)},
            "invalid rnn_head_sizes=(64, 0): must be a non-empty tuple of positive layer "
            "sizes, or None",
        ),
        (
            {"total_steps": 500},
            "invalid total_steps=500: must be >= num_envs * num_steps = 512 (one update)",
        ),
        (
            {"num_minibatches": 3},
            "invalid num_minibatches=3: must be a divisor of num_envs * num_steps = 512",
        ),
        (
            {"recurrent": True, "num_envs": 6, "num_minibatches": 4},
            "invalid num_minibatches=4: must be a divisor of num_envs=6 "
            "(recurrent PPO splits minibatches by env)",
        ),
    ],
)
def test_ppo_config_validation_names_field_and_allowed_values(overrides, message):
    with pytest.raises(ConfigError) as info:
        dataclasses.replace(PPOConfig(), **overrides).validate()
    assert str(info.value) == message


def test_valid_configs_pass():
    assert PPOConfig().validate() == PPOConfig()
    for env in PRESETS:
        config = default_config(env)
        assert config.env == env and config.validate() is config
    # Recurrent minibatches split environments: 512 transitions but 4 envs, 2 minibatches.
    dataclasses.replace(PPOConfig(), recurrent=True, num_minibatches=2).validate()


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


# ----------------------------------------------------------------------------- overrides
def test_unknown_override_lists_allowed_fields():
    with pytest.raises(ConfigError) as info:
        jaxrl.make_config("ppo", learning_rate=1e-3)
    message = str(info.value)
    assert "unknown config field(s) ['learning_rate'] for PPOConfig" in message
    assert f"allowed: {ALL_FIELDS}" in message


def test_unknown_override_fails_before_training(tmp_path):
    with pytest.raises(ConfigError, match=r"\['learning_rate'\]"):
        jaxrl.train("ppo", learning_rate=1e-3, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_unknown_env_lists_registered_ids():
    from jaxrl import envs

    with pytest.raises(ConfigError) as info:
        jaxrl.make_config("ppo", env="Cartpole-v1")
    message = str(info.value)
    assert message.startswith("invalid env='Cartpole-v1': ")
    assert "CartPole-v1" in message
    for env_id in envs.registered():
        assert env_id in message


def test_unknown_algorithm_lists_the_registered_names():
    from jaxrl import algorithms

    expected = re.escape(f"unknown algorithm 'trpo'; available: {algorithms.names()}")
    with pytest.raises(ValueError, match=expected):
        jaxrl.make_config("trpo")
    assert {"ppo", "sft", "grpo"} <= set(algorithms.names())


def test_override_precedence_preset_then_file_then_overrides(tmp_path):
    path = tmp_path / "acrobot.toml"
    path.write_text('env = "Acrobot-v1"\nnum_envs = 8\nnum_steps = 32\n')
    config = jaxrl.make_config("ppo", config_file=path, num_envs=4)
    assert config.env == "Acrobot-v1"
    assert config.lr == PRESETS["Acrobot-v1"]["lr"]  # preset
    assert config.num_steps == 32  # file over preset
    assert config.num_envs == 4  # override over file
    # An explicit env wins over the file's (and brings its own preset).
    config = jaxrl.make_config("ppo", env="CartPole-v1", config_file=path)
    assert config.env == "CartPole-v1" and config.lr == PPOConfig().lr and config.num_envs == 8


@pytest.mark.parametrize(
    ("field", "text", "expected"),
    [
        ("num_envs", "8", 8),
        ("num_envs", "1e3", 1000),
        ("lr", "3e-4", 3e-4),
        ("anneal_lr", "false", False),
        ("anneal_lr", "Yes", True),
        ("hidden_sizes", "128,64", (128, 64)),
        ("hidden_sizes", [32], (32,)),
        ("activation", "relu", "relu"),
    ],
)
def test_string_values_are_coerced_to_field_types(field, text, expected):
    assert getattr(cfg.replace(PPOConfig(), **{field: text}), field) == expected


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_envs", "four", "invalid num_envs='four': expected int"),
        ("num_envs", 2.5, "invalid num_envs=2.5: expected int"),
        ("lr", "fast", "invalid lr='fast': expected float"),
        ("anneal_lr", "maybe", "invalid anneal_lr='maybe': expected bool"),
        ("hidden_sizes", "64,x", "invalid hidden_sizes='x': expected int"),
    ],
)
def test_uncoercible_values_name_the_field_and_type(field, value, message):
    with pytest.raises(ConfigError) as info:
        cfg.replace(PPOConfig(), **{field: value})
    assert str(info.value) == message


def test_fractional_string_for_int_field_is_rejected():
    with pytest.raises(ConfigError, match="num_envs"):
        cfg.replace(PPOConfig(), num_envs="2.5")
    with pytest.raises(ConfigError, match="num_envs"):
        cfg.replace(PPOConfig(), num_envs=2.5)
    assert cfg.replace(PPOConfig(), num_envs="8").num_envs == 8


def test_infinite_learning_rate_is_rejected():
    with pytest.raises(ConfigError, match="lr"):
        cfg.replace(PPOConfig(), lr=float("inf")).validate()


# ----------------------------------------------------------------------------- config files
def test_load_toml_and_json_files(tmp_path):
    values = {"env": "Pendulum-v1", "lr": 0.001, "hidden_sizes": [32, 32], "normalize_obs": True}
    toml = tmp_path / "c.toml"
    toml.write_text(
        'env = "Pendulum-v1"\nlr = 1e-3\nhidden_sizes = [32, 32]\nnormalize_obs = true\n'
    )
    js = tmp_path / "c.json"
    js.write_text(json.dumps(values))
    assert cfg.load_file(toml) == values
    assert cfg.load_file(js) == values
    a = jaxrl.make_config("ppo", config_file=toml)
    b = jaxrl.make_config("ppo", config_file=str(js))
    assert a == b
    assert (
        a.env == "Pendulum-v1"
        and a.hidden_sizes == (32, 32)
        and a.num_envs == PRESETS["Pendulum-v1"]["num_envs"]
    )


def test_load_yaml_file(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "c.yaml"
    path.write_text("lr: 0.001\nhidden_sizes: [32, 32]\n")
    assert jaxrl.make_config("ppo", config_file=path).hidden_sizes == (32, 32)


@pytest.mark.parametrize(
    ("name", "text", "pattern"),
    [
        ("c.ini", "lr = 1", r"unsupported suffix '\.ini'; use \.toml, \.json or \.yaml"),
        ("c.json", "[1, 2]", r"expected a mapping of field = value"),
        ("c.toml", "learning_rate = 0.1\n", r"unknown config field\(s\) \['learning_rate'\]"),
        ("c.toml", 'lr = "fast"\n', r"invalid lr='fast': expected float"),
        ("c.toml", "lr = -1.0\n", r"invalid lr=-1\.0: must be > 0"),
        ("c.json", '{"num_minibatches": 3}', r"invalid num_minibatches=3: must be a divisor"),
    ],
)
def test_bad_config_files(tmp_path, name, text, pattern):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=pattern):
        jaxrl.make_config("ppo", config_file=path)


def test_malformed_config_files_raise(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text("lr = = 1\n")
    with pytest.raises(ValueError):  # tomllib.TOMLDecodeError
        cfg.load_file(toml)
    js = tmp_path / "c.json"
    js.write_text("{lr: 1}")
    with pytest.raises(ValueError):  # json.JSONDecodeError
        cfg.load_file(js)
    with pytest.raises(FileNotFoundError):
        cfg.load_file(tmp_path / "missing.toml")


# ----------------------------------------------------------------------------- sweeps
def test_parse_sweep():
    assert cfg.parse_sweep(None) == {} and cfg.parse_sweep([]) == {}
    assert cfg.parse_sweep(["lr=1e-3,3e-4"]) == {"lr": [1e-3, 3e-4]}
    assert cfg.parse_sweep(["lr=1e-3, 3e-4", " ent_coef =0,0.01"]) == {
        "lr": [1e-3, 3e-4],
        "ent_coef": [0.0, 0.01],
    }
    assert cfg.parse_sweep({"lr": (1, 2)}) == {"lr": [1.0, 2.0]}


def test_expand_grid_order_last_name_fastest():
    grid = cfg.expand_grid({"lr": [1.0, 2.0], "ent_coef": [0.0, 0.1]})
    assert grid == [
        {"lr": 1.0, "ent_coef": 0.0},
        {"lr": 1.0, "ent_coef": 0.1},
        {"lr": 2.0, "ent_coef": 0.0},
        {"lr": 2.0, "ent_coef": 0.1},
    ]
    assert cfg.expand_grid({}) == [{}]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lr", "invalid sweep 'lr': expected name=v1,v2,..."),
        ("lr=", "invalid sweep 'lr=': expected name=v1,v2,..."),
        ("=1,2", None),  # empty name: rejected by RunConfig (not sweepable)
        ("lr=fast,slow", "invalid sweep 'lr=fast,slow': values must be numbers"),
        ("lr=1e-3;3e-4", "invalid sweep 'lr=1e-3;3e-4': values must be numbers"),
    ],
)
def test_sweep_parse_errors(spec, message):
    if message is None:
        with pytest.raises(ConfigError, match="sweepable"):
            RunConfig(sweep=cfg.parse_sweep([spec])).validate(SWEEPABLE)
        return
    with pytest.raises(ConfigError) as info:
        cfg.parse_sweep([spec])
    assert str(info.value) == message


def test_sweep_of_unsweepable_field_lists_sweepable_ones():
    with pytest.raises(ConfigError) as info:
        RunConfig(sweep={"num_envs": [2, 4]}).validate(SWEEPABLE)
    assert str(info.value) == (
        f"invalid sweep='num_envs': must be one of the sweepable hyperparameters {list(SWEEPABLE)}"
    )


def test_sweep_with_no_values():
    with pytest.raises(
        ConfigError, match=r"invalid sweep lr=\[\]: must be a non-empty list of values"
    ):
        RunConfig(sweep={"lr": []}).validate(SWEEPABLE)


def test_sweep_values_are_validated_before_the_run_directory_is_touched(tmp_path):
    with pytest.raises(ConfigError, match=r"invalid gamma=1\.5: must be in \[0\.0, 1\.0\]"):
        jaxrl.train(
            "ppo",
            sweep=["gamma=0.9,1.5"],
            run_dir=tmp_path / "run",
            total_steps=4096,
            progress=False,
        )
    assert not (tmp_path / "run").exists()


def test_every_sweepable_field_is_a_float_hyperparameter():
    hints = {f.name: f.type for f in dataclasses.fields(PPOConfig)}
    assert set(SWEEPABLE) <= set(hints)
    assert all(hints[name] in (float, "float") for name in SWEEPABLE)


# ----------------------------------------------------------------------------- RunConfig
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_seeds": 0}, "invalid num_seeds=0: must be > 0"),
        ({"keep_checkpoints": 0}, "invalid keep_checkpoints=0: must be > 0"),
        ({"seed": -1}, "invalid seed=-1: must be an integer >= 0"),
        ({"seed": 1.5}, "invalid seed=1.5: must be an integer >= 0"),
        (
            {"checkpoint_every": 0, "run_dir": "x"},
            "invalid checkpoint_every=0: must be a positive integer",
        ),
        ({"log_every": -5}, "invalid log_every=-5: must be a positive integer"),
        ({"resume": True}, "invalid resume=True: must be used together with run_dir"),
        (
            {"checkpoint_every": 1000},
            "invalid checkpoint_every=1000: must be used together with run_dir",
        ),
    ],
)
def test_run_config_validation(kwargs, message):
    with pytest.raises(ConfigError) as info:
        RunConfig(**kwargs).validate(SWEEPABLE)
    assert str(info.value) == message


def test_valid_run_config():
    run = RunConfig(
        num_seeds=8, seed=3, sweep={"lr": [1e-3]}, run_dir="x", checkpoint_every=1000, resume=True
    )
    assert run.validate(SWEEPABLE) is run


def test_run_options_through_the_api_are_validated(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("invalid num_seeds=0: must be > 0")):
        jaxrl.train("ppo", num_seeds=0, run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()
