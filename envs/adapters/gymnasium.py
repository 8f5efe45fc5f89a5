"""Export jaxrl environments to gymnasium (>= 1.0): a `gymnasium.Env` and a `VectorEnv`.

    env = to_gymnasium("CartPole-v1", seed=0)              # gymnasium.Env
    venv = to_gymnasium_vector("CartPole-v1", num_envs=8)  # gymnasium.vector.VectorEnv

Both run jitted JAX functions and return NumPy values, with spaces converted to
gymnasium spaces (`render_mode=None`, no rendering). Randomness flows from
gymnasium's seeding: `reset(seed=s)` seeds `np_random`, and each reset draws a
fresh JAX key from it, so seeded runs are reproducible and `check_env` passes.

Single environment. The JAX environment resets itself when an episode ends;
`step` returns the episode's true last observation (what gymnasium expects
before you call `reset`) and keeps the already-reset state, so stepping on
without `reset` continues with a fresh episode.

Vector environment. Autoreset mode is `AutoresetMode.SAME_STEP`, matching
`SyncVectorEnv(..., autoreset_mode=SAME_STEP)` exactly: when copy `i` ends an
episode on a step, `obs[i]` is already the first observation of the next
episode, `infos["final_obs"]` (an object array, `None` for other copies) holds
its last observation and `infos["final_info"]` that step's info, both masked
by `infos["_final_obs"]` / `infos["_final_info"]`; top-level info keys are
masked (`infos["_key"]`) to the copies that did not reset. `reset(options=
{"reset_mask": mask})` resets only the masked copies.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .. import spaces
from ..core import Environment

try:
    import gymnasium
    from gymnasium import spaces as gym_spaces
    from gymnasium.vector import AutoresetMode, VectorEnv
    from gymnasium.vector.utils import batch_space
except ImportError as _err:  # pragma: no cover - depends on the environment
    raise ImportError(
        "the gymnasium adapter needs gymnasium>=1.0: install the extra with "
        "`pip install 'jaxrl[bench]'` (or `pip install gymnasium`)"
    ) from _err

__all__ = [
    "JaxToGymnasiumEnv",
    "JaxToGymnasiumVectorEnv",
    "to_gymnasium",
    "to_gymnasium_vector",
    "to_gymnasium_space",
    "register_gymnasium",
]

EnvLike = str | tuple[Environment, Any]


def to_gymnasium_space(space: spaces.Space) -> gym_spaces.Space:
    """Converts a jaxrl space to the equivalent gymnasium space."""
    if isinstance(space, spaces.Discrete):
        return gym_spaces.Discrete(space.n)
    if isinstance(space, spaces.Box):
        return gym_spaces.Box(space.low, space.high, space.shape, np.dtype(space.dtype))
    if isinstance(space, spaces.Dict):
        return gym_spaces.Dict({k: to_gymnasium_space(v) for k, v in space.spaces.items()})
    if isinstance(space, spaces.Tuple):
        return gym_spaces.Tuple([to_gymnasium_space(s) for s in space.spaces])
    raise TypeError(f"cannot convert {space!r} to a gymnasium space")


def _resolve(env: EnvLike) -> tuple[Environment, Any]:
    if isinstance(env, str):
        from ..registry import make

        return make(env)
    jax_env, params = env
    return jax_env, jax_env.default_params if params is None else params


def _to_jax_action(space: spaces.Space, action: Any) -> Any:
    """A gymnasium action as a JAX value of the jaxrl space's dtype."""
    if isinstance(space, spaces.Dict):
        return {k: _to_jax_action(s, action[k]) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_to_jax_action(s, a) for s, a in zip(space.spaces, action, strict=True))
    return jnp.asarray(np.asarray(action), space.dtype)


def _numpy(tree: Any) -> Any:
    return jax.tree.map(np.asarray, jax.device_get(tree))


def _draw_seed(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**31 - 1))


class JaxToGymnasiumEnv(gymnasium.Env):
    """One jaxrl environment as a `gymnasium.Env` (see the module docstring)."""

    metadata = {"render_modes": []}

    def __init__(self, env: Environment, params: Any = None, seed: int | None = None):
        self.jax_env = env
        self.params = env.default_params if params is None else params
        self._jax_action_space = env.action_space(self.params)
        self.observation_space = to_gymnasium_space(env.observation_space(self.params))
        self.action_space = to_gymnasium_space(self._jax_action_space)
        self.render_mode = None
        self._initial_seed = seed
        self._key: jax.Array | None = None
        self._state: Any = None
        self._reset_fn = jax.jit(_reset_single(env))
        self._step_fn = jax.jit(_step_single(env))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None and self._initial_seed is not None:
            seed, self._initial_seed = self._initial_seed, None
        super().reset(seed=seed)
        key = jax.random.key(_draw_seed(self.np_random))
        obs, self._state, self._key = self._reset_fn(key, self.params)
        return _numpy(obs), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        jax_action = _to_jax_action(self._jax_action_space, action)
        obs, self._state, reward, terminated, truncated, info, self._key = self._step_fn(
            self._key, self._state, jax_action, self.params
        )
        obs, reward, terminated, truncated, info = _numpy(
            (obs, reward, terminated, truncated, info)
        )
        return obs, float(reward), bool(terminated), bool(truncated), info

    def render(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"JaxToGymnasiumEnv({self.jax_env!r})"


def _reset_single(env: Environment) -> Any:
    def reset(key: jax.Array, params: Any) -> tuple[Any, Any, jax.Array]:
        key, reset_key = jax.random.split(key)
        obs, state = env.reset(reset_key, params)
        return obs, state, key

    return reset


def _step_single(env: Environment) -> Any:
    def step(key: jax.Array, state: Any, action: Any, params: Any) -> tuple[Any, ...]:
        key, step_key = jax.random.split(key)
        _, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
        info = dict(info)
        final_obs = info.pop("final_observation")  # == obs unless the episode ended
        return final_obs, state, reward, terminated, truncated, info, key

    return step


class JaxToGymnasiumVectorEnv(VectorEnv):
    """`num_envs` copies of a jaxrl environment, `vmap`ped, as a gymnasium `VectorEnv`.

    Autoreset follows gymnasium's `AutoresetMode.SAME_STEP` (module docstring).
    """

    def __init__(
        self, env: Environment, params: Any = None, num_envs: int = 1, seed: int | None = None
    ):
        if int(num_envs) < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.jax_env = env
        self.params = env.default_params if params is None else params
        self.num_envs = int(num_envs)
        self._jax_action_space = env.action_space(self.params)
        self.single_observation_space = to_gymnasium_space(env.observation_space(self.params))
        self.single_action_space = to_gymnasium_space(self._jax_action_space)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}
        self.render_mode = None
        self._initial_seed = seed
        self._keys: jax.Array | None = None
        self._state: Any = None
        self._obs: Any = None
        self._reset_fn = jax.jit(jax.vmap(_reset_single(env), in_axes=(0, None)))
        self._step_fn = jax.jit(jax.vmap(_step_vector(env), in_axes=(0, 0, 0, None)))
        self._select = jax.jit(_select_copies)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        if seed is None and self._initial_seed is not None:
            seed, self._initial_seed = self._initial_seed, None
        super().reset(seed=seed)
        keys = jax.random.split(jax.random.key(_draw_seed(self.np_random)), self.num_envs)
        obs, state, keys = self._reset_fn(keys, self.params)
        mask = (options or {}).get("reset_mask")
        if mask is not None and self._state is not None:
            mask = jnp.asarray(np.asarray(mask, dtype=bool))
            new, old = (obs, state, keys), (self._obs, self._state, self._keys)
            obs, state, keys = self._select(mask, new, old)
        self._obs, self._state, self._keys = obs, state, keys
        return _numpy(obs), {}

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict]:
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        jax_actions = _to_jax_action(self._jax_action_space, actions)
        obs, self._state, reward, terminated, truncated, info, final_obs, self._keys = (
            self._step_fn(self._keys, self._state, jax_actions, self.params)
        )
        self._obs = obs
        obs, reward, terminated, truncated, info, final_obs = _numpy(
            (obs, reward, terminated, truncated, info, final_obs)
        )
        done = np.logical_or(terminated, truncated)
        infos = _vector_infos(info, final_obs, done)
        # float64 rewards, as gymnasium's own vector envs return.
        return obs, reward.astype(np.float64), terminated, truncated, infos

    def render(self) -> None:
        return None

    def __repr__(self) -> str:
        return f"JaxToGymnasiumVectorEnv({self.jax_env!r}, num_envs={self.num_envs})"


def _step_vector(env: Environment) -> Any:
    """One copy's step, keeping both the next `obs` and the `final_observation`."""

    def step(key: jax.Array, state: Any, action: Any, params: Any) -> tuple[Any, ...]:
        key, step_key = jax.random.split(key)
        obs, state, reward, terminated, truncated, info = env.step(step_key, state, action, params)
        info = dict(info)
        final_obs = info.pop("final_observation")
        return obs, state, reward, terminated, truncated, info, final_obs, key

    return step


def _select_copies(mask: jax.Array, new: Any, old: Any) -> Any:
    def pick(a: jax.Array, b: jax.Array) -> jax.Array:
        return jnp.where(mask.reshape(mask.shape + (1,) * (a.ndim - 1)), a, b)

    return jax.tree.map(pick, new, old)


def _masked(value: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`value` zeroed where `mask` is false, as gymnasium's `_add_info` fills absent copies."""
    shaped = mask.reshape(mask.shape + (1,) * (value.ndim - 1))
    return np.where(shaped, value, np.zeros_like(value))


def _add_masked(infos: dict[str, Any], info: dict[str, Any], mask: np.ndarray) -> dict[str, Any]:
    for key, value in info.items():
        if isinstance(value, dict):
            infos[key] = _add_masked(infos.get(key, {}), value, mask)
        else:
            infos[key] = _masked(np.asarray(value), mask)
        infos[f"_{key}"] = mask.copy()
    return infos


def _vector_infos(info: dict[str, Any], final_obs: Any, done: np.ndarray) -> dict[str, Any]:
    """Batched infos laid out as gymnasium's SAME_STEP `SyncVectorEnv` does."""
    infos: dict[str, Any] = {}
    alive = ~done
    if alive.any():
        _add_masked(infos, info, alive)
    if done.any():
        final = np.full(done.shape[0], None, dtype=object)
        for i in np.flatnonzero(done):
            final[i] = jax.tree.map(lambda x, i=i: x[i], final_obs)
        infos["final_obs"], infos["_final_obs"] = final, done.copy()
        infos["final_info"] = _add_masked({}, info, done)
        infos["_final_info"] = done.copy()
    return infos


def to_gymnasium(env: EnvLike, seed: int | None = None) -> JaxToGymnasiumEnv:
    """A registered id, or an `(env, params)` pair, as a `gymnasium.Env`."""
    jax_env, params = _resolve(env)
    return JaxToGymnasiumEnv(jax_env, params, seed=seed)


def to_gymnasium_vector(
    env: EnvLike, num_envs: int, seed: int | None = None
) -> JaxToGymnasiumVectorEnv:
    """A registered id, or an `(env, params)` pair, as a batched gymnasium `VectorEnv`."""
    jax_env, params = _resolve(env)
    return JaxToGymnasiumVectorEnv(jax_env, params, num_envs=num_envs, seed=seed)


def register_gymnasium(env_id: str, **make_overrides: Any) -> str:
    """Registers `"jaxrl/<env_id>"` with gymnasium, so `gymnasium.make` builds it.

    Our environments apply their own time limit, so no gymnasium `TimeLimit`
    is added. Returns the gymnasium id.
    """
    gym_id = f"jaxrl/{env_id}"
    if gym_id not in gymnasium.registry:
        gymnasium.register(
            id=gym_id,
            entry_point=functools.partial(_make_registered, env_id, make_overrides),
            disable_env_checker=True,
        )
    return gym_id


def _make_registered(env_id: str, overrides: dict[str, Any], **kwargs: Any) -> JaxToGymnasiumEnv:
    from ..registry import make

    jax_env, params = make(env_id, **overrides)
    kwargs.pop("render_mode", None)
    return JaxToGymnasiumEnv(jax_env, params, **kwargs)
