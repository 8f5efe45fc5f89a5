"""The registries of `jaxrl.objectives`: their keys are the names users pass, and config
validation, error messages and the CLI's choices all come from them."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from jaxrl import cli, objectives
from jaxrl.algorithms import grpo, ppo_lm
from jaxrl.config import ConfigError
from jaxrl.objectives import Registry

# Each registry, the config field it names, and its keys (the names users pass).
REGISTRIES = {
    "advantage": (
        objectives.ADVANTAGE_ESTIMATORS,
        ("grpo", "dr_grpo", "rloo", "reinforce_pp", "gae"),
    ),
    "policy_loss": (objectives.POLICY_LOSSES, ("clip", "gspo", "cispo")),
    "loss_agg": (
        objectives.LOSS_AGGREGATIONS,
        ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"),
    ),
    "kl": (objectives.KL_ESTIMATORS, ("k1", "k2", "k3", "k3+")),
}
# What each algorithm's config accepts for a registry-backed field.
ACCEPTED = {
    (grpo, "advantage"): ("grpo", "dr_grpo", "rloo", "reinforce_pp"),
    (ppo_lm, "advantage"): ("gae",),
}


@pytest.mark.parametrize("field", sorted(REGISTRIES))
def test_registry_keys_are_the_names_users_pass(field):
    registry, names = REGISTRIES[field]
    assert registry.field == field and registry.names() == names
    assert all(callable(entry) or isinstance(entry, tuple) for entry in registry.values())
    with pytest.raises(ConfigError, match=rf"invalid {field}='nosuch': must be one of \["):
        registry["nosuch"]
    assert "nosuch" not in registry and names[0] in registry


def test_restricting_a_registry_keeps_the_field_and_rejects_unknown_names():
    subset = objectives.ADVANTAGE_ESTIMATORS.only("gae")
    assert isinstance(subset, Registry) and subset.names() == ("gae",)
    with pytest.raises(ConfigError, match=r"invalid advantage='grpo': must be one of \['gae'\]"):
        subset.check("grpo")
    with pytest.raises(ConfigError, match="advantage='nosuch'"):
        objectives.ADVANTAGE_ESTIMATORS.only("nosuch")


@pytest.mark.parametrize("module", [grpo, ppo_lm], ids=["grpo", "ppo-lm"])
@pytest.mark.parametrize("field", sorted(REGISTRIES))
def test_config_choices_and_errors_come_from_the_registry(module, field):
    """The field's declared choices (what the CLI offers) are the registry's keys (or the
    algorithm's subset of them), and a bad value's error lists exactly those."""
    registry, names = REGISTRIES[field]
    accepted = ACCEPTED.get((module, field), names)
    declared = {f.name: f for f in dataclasses.fields(module.Config)}[field]
    assert declared.metadata["choices"] == accepted
    for name in accepted:
        assert getattr(dataclasses.replace(module.default_config(), **{field: name}), field)
    bad = dataclasses.replace(module.default_config(), **{field: "nosuch"})
    with pytest.raises(ConfigError, match=rf"invalid {field}='nosuch': must be one of") as err:
        bad.validate()
    assert str(list(accepted)) in str(err.value)


@pytest.mark.parametrize("algorithm", ["grpo", "ppo-lm"])
def test_cli_choices_equal_the_registry_keys(algorithm):
    """`jaxrl train <algorithm> --advantage/--policy-loss/--loss-agg/--kl` offer exactly
    the registry's keys (the algorithm's subset for `--advantage`)."""
    parser = argparse.ArgumentParser()
    cli._add_config_flags(parser, algorithm, None)
    choices = {action.dest: action.choices for action in parser._actions}
    module = {"grpo": grpo, "ppo-lm": ppo_lm}[algorithm]
    for field, (_, names) in REGISTRIES.items():
        accepted = ACCEPTED.get((module, field), names)
        assert choices[field] is not None and tuple(choices[field]) == accepted, field
