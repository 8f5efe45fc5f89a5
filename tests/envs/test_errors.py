"""Mistakes fail early with messages that say what to do."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from jaxrl import envs
from jaxrl.envs.classic import AcrobotParams, PendulumParams
from jaxrl.envs.memory import MemoryChain


# ------------------------------------------------------------------ unknown ids
def test_unknown_id_lists_registered_ids_and_closest_matches() -> None:
    with pytest.raises(ValueError, match="Unknown environment id 'CartPole-v0'") as err:
        envs.make("CartPole-v0")
    message = str(err.value)
    suggestions = message.split("Did you mean:")[1].split("?")[0]
    assert "CartPole-v1" in suggestions
    for env_id in envs.registered():
        assert env_id in message


def test_unknown_id_suggests_case_insensitive_substring() -> None:
    with pytest.raises(ValueError) as err:
        envs.make("pendulum")
    assert "Pendulum-v1" in str(err.value).split("Did you mean:")[1].split("?")[0]


# ------------------------------------------------------------------ bad actions
def _lower_step(env_id: str, action: jax.Array) -> None:
    """Traces and lowers `jit(step)` (no compile, no run): errors here are trace-time."""
    env, params = envs.make(env_id)
    _, state = env.reset(jax.random.key(0), params)
    jax.jit(env.step).lower(jax.random.key(1), state, action, params)


@pytest.mark.parametrize(
    ("env_id", "action", "error", "pattern"),
    [
        (
            "CartPole-v1",
            jnp.array([0, 1]),
            ValueError,
            r"CartPole-v1: action has shape \(2,\), expected \(\)",
        ),
        (
            "CartPole-v1",
            jnp.float32(1.0),
            TypeError,
            "CartPole-v1: discrete action must have an integer dtype",
        ),
        ("Acrobot-v1", jnp.ones((1,), jnp.int32), ValueError, r"expected \(\)"),
        ("MountainCar-v0", jnp.float32(2.0), TypeError, "integer dtype"),
        (
            "Pendulum-v1",
            jnp.float32(1.0),
            ValueError,
            r"Pendulum-v1: action has shape \(\), expected \(1,\)",
        ),
        ("Pendulum-v1", jnp.ones((1,), jnp.bool_), TypeError, "continuous action must be numeric"),
        (
            "MountainCarContinuous-v0",
            jnp.zeros((2,), jnp.float32),
            ValueError,
            r"MountainCarContinuous-v0: action has shape \(2,\), expected \(1,\)",
        ),
        (
            "MemoryChain-v0",
            jnp.zeros((1,), jnp.int32),
            ValueError,
            r"MemoryChain-v0: action has shape",
        ),
    ],
)
def test_wrong_action_fails_at_trace_time(
    env_id: str, action: jax.Array, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        _lower_step(env_id, action)


def test_batched_action_to_unbatched_step_hints_at_vmap() -> None:
    with pytest.raises(ValueError, match="under vmap, pass one action per environment copy"):
        _lower_step("CartPole-v1", jnp.zeros((8,), jnp.int32))


# ------------------------------------------------------------------ bad params
@pytest.mark.parametrize(
    ("env_id", "field", "value"),
    [
        ("CartPole-v1", "max_steps_in_episode", 0),
        ("CartPole-v1", "masspole", -0.1),
        ("Acrobot-v1", "max_steps_in_episode", 0),
        ("Acrobot-v1", "link_mass_1", -1.0),
        ("Acrobot-v1", "dt", 0.0),
        ("MountainCar-v0", "max_speed", -0.07),
        ("MountainCar-v0", "max_position", -2.0),  # below min_position
        ("MountainCarContinuous-v0", "max_action", -1.0),  # not above min_action
        ("MountainCarContinuous-v0", "power", -0.1),
        ("Pendulum-v1", "mass", -1.0),
        ("Pendulum-v1", "length", 0.0),
        ("Pendulum-v1", "max_steps_in_episode", 0),
        ("CartPole-POMDP-v1", "masscart", -1.0),
        ("MemoryChain-v0", "max_steps_in_episode", 0),
    ],
)
def test_invalid_param_names_the_field(env_id: str, field: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"\.{field} = .* is invalid: must be"):
        envs.make(env_id, **{field: value})


def test_params_validate_when_used_not_when_rebuilt() -> None:
    """Hand-built params fail at `validate()`, `reset` and `step`; JAX may rebuild them freely
    (e.g. a `vmap` in_axes tree of zeros) without tripping the check."""
    with pytest.raises(ValueError, match="link_mass_2"):
        AcrobotParams(link_mass_2=-1.0).validate()
    bad = PendulumParams().replace(dt=-0.05)
    env, _ = envs.make("Pendulum-v1")
    with pytest.raises(ValueError, match="PendulumParams.dt"):
        env.reset(jax.random.key(0), bad)
    _, state = env.reset(jax.random.key(0), PendulumParams())
    with pytest.raises(ValueError, match="PendulumParams.dt"):
        env.step(jax.random.key(0), state, jax.numpy.zeros((1,)), bad)
    jax.tree.map(lambda _: 0, PendulumParams())  # an in_axes tree: no error


def test_traced_params_skip_validation_and_still_work() -> None:
    env, params = envs.make("Pendulum-v1")
    obs, _ = jax.jit(env.reset)(jax.random.key(0), params)
    assert obs.shape == (3,)


def test_invalid_memory_length_is_rejected() -> None:
    with pytest.raises(ValueError, match="memory_length = 0"):
        envs.make("MemoryChain-v0", memory_length=0)
    with pytest.raises(TypeError, match="memory_length must be an int"):
        MemoryChain(memory_length=2.5)  # type: ignore[arg-type]


# ------------------------------------------------------------------ bad overrides
def test_unknown_override_lists_allowed_names() -> None:
    with pytest.raises(ValueError, match=r"unknown override\(s\) \['gravityy'\]") as err:
        envs.make("Pendulum-v1", gravityy=9.8)
    message = str(err.value)
    for name in ("gravity", "max_torque", "max_steps_in_episode"):
        assert f"'{name}'" in message


def test_unknown_override_lists_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="memory_lenght") as err:
        envs.make("MemoryChain-v0", memory_lenght=3)
    assert "constructor arguments: ['memory_length']" in str(err.value)
