"""JaxMARL environments (MPE, SMAX, Overcooked, Hanabi, ...) on the multi-agent contract:
`envs.make("jaxmarl:<JaxMARL id>")`, optional extra `jaxrl[jaxmarl]`.

JaxMARL's API keys everything by agent name (`obs[agent]`, `actions[agent]`,
`rewards[agent]`, `dones[agent]` plus `dones["__all__"]`) and auto-resets inside its
`step`. The adapter wraps its `reset` and `step_env` (no reset) and lets jaxrl's
`Environment.step` add the time limit, auto-reset and `final_observation`, so a JaxMARL
environment steps like a built-in one:

* observations are stacked on the agent axis in `env.agents` order (`from_dict`);
  agents with shorter flat observations are zero-padded to the longest, because the
  stacked contract needs one shape;
* actions arrive stacked and are handed over as JaxMARL's dict (`to_dict`); all agents
  must share one action space (a clear error otherwise);
* `reward[i]` is agent i's reward while it is alive, 0 once it has left;
* `alive[i]` is `not dones[agent_i]` (SMAX's dead units); the episode ends when JaxMARL
  says `dones["__all__"]`, reported as `terminated` (JaxMARL does not tell its own time
  limits apart from terminal states, and its baselines treat both as terminal);
* the global state is the environment's `get_global_state`/`get_world_state` when it
  has one, else every agent's (padded) observation concatenated, as JaxMARL's MAPPO
  baselines build it for MPE;
* an environment with legal actions (one that implements JaxMARL's
  `get_avail_actions`, as SMAX does) passes them on as `obs["action_mask"] (N, A)`
  bool (`has_action_mask`; the contract's optional mask), which IPPO and MAPPO act and
  learn on (an action outside it is one SMAX ignores);
* `max_steps_in_episode` (ours) defaults to one step past JaxMARL's own `max_steps`, a
  guard that JaxMARL's own episode end comes first.

**SMAX scenarios by id**: `"SMAX-<map>"` (e.g. `jaxmarl:SMAX-3m`, `SMAX-2s3z`; `ids()`
lists them) is JaxMARL's `HeuristicEnemySMAX` on the map's scenario
(`map_name_to_scenario`) with the keywords of JaxMARL's SMAX baselines (`SMAX_KWARGS`:
enemies see actions, walls kill, the heuristic enemy attacks the closest unit); further
keywords to `envs.make` override them. JaxMARL's own ids (`SMAX`, `HeuristicEnemySMAX`)
build its defaults as before. An unknown map lists the available ones.
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .. import spaces
from ..core import EnvParams, EnvState
from .core import MultiAgentEnvironment, from_dict, to_dict

__all__ = ["JaxMARLEnv", "JaxMARLParams", "make"]

INSTALL_HINT = "pip install 'jaxrl[jaxmarl]'"


@struct.dataclass
class JaxMARLState(EnvState):
    inner: Any  # JaxMARL's own state
    alive: jax.Array  # (N,) bool
    time: jax.Array


@struct.dataclass
class JaxMARLParams(EnvParams):
    max_steps_in_episode: int = 1000


def _import_jaxmarl() -> Any:
    try:
        return importlib.import_module("jaxmarl")
    except ImportError as err:
        raise ImportError(
            f"jaxmarl:<id> environments need JaxMARL, which is not installed ({err}); "
            f"install the extra: {INSTALL_HINT}"
        ) from None


# `SMAX-<map>`: JaxMARL's SMAX against its heuristic enemy, with the environment keywords
# of JaxMARL's SMAX baselines (`baselines/MAPPO/config/mappo_homogenous_rnn_smax.yaml`,
# `baselines/IPPO/config/ippo_rnn_smax.yaml`).
SMAX_PREFIX = "SMAX-"
SMAX_KWARGS = {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest"}


def smax_ids() -> list[str]:
    """`SMAX-<map>` for every SMAX map JaxMARL knows (needs jaxmarl)."""
    _import_jaxmarl()
    from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO

    return [SMAX_PREFIX + name for name in MAP_NAME_TO_SCENARIO]


def available_ids() -> list[str]:
    """JaxMARL's registered environment ids and the SMAX scenario ids (needs jaxmarl)."""
    return sorted(_import_jaxmarl().registered_envs) + smax_ids()


def _build(env_id: str, overrides: dict[str, Any]) -> Any:
    """JaxMARL's environment for `env_id` (a registered id or `SMAX-<map>`)."""
    jaxmarl = _import_jaxmarl()
    if env_id.startswith(SMAX_PREFIX) and env_id not in jaxmarl.registered_envs:
        scenarios = smax_ids()
        if env_id not in scenarios:
            raise ValueError(f"Unknown SMAX scenario {env_id!r}; available: {scenarios}")
        from jaxmarl.environments.smax import map_name_to_scenario

        scenario = map_name_to_scenario(env_id[len(SMAX_PREFIX) :])
        return jaxmarl.make("HeuristicEnemySMAX", scenario=scenario, **{**SMAX_KWARGS, **overrides})
    registered = sorted(jaxmarl.registered_envs)
    if env_id not in registered:
        raise ValueError(
            f"Unknown JaxMARL environment id {env_id!r}; available: {registered} and the SMAX "
            f"scenarios {smax_ids()}"
        )
    return jaxmarl.make(env_id, **overrides)


def make(env_id: str, **overrides: Any) -> tuple[JaxMARLEnv, JaxMARLParams]:
    """`envs.make("jaxmarl:<env_id>")`: overrides are JaxMARL's constructor keywords, except
    `max_steps_in_episode` (ours). `SMAX-<map>` builds a SMAX scenario (module docstring).
    Unknown ids list JaxMARL's and the scenarios."""
    max_steps = overrides.pop("max_steps_in_episode", None)
    env = JaxMARLEnv(_build(env_id, overrides), env_id)
    if max_steps is None:
        max_steps = int(getattr(env.inner, "max_steps", 999)) + 1
    params = JaxMARLParams(max_steps_in_episode=int(max_steps))
    params.validate()
    return env, params


def _implements(inner: Any, method: str) -> bool:
    """Whether JaxMARL's environment overrides `method` of its `MultiAgentEnv` base (whose
    version raises NotImplementedError)."""
    from jaxmarl.environments.multi_agent_env import MultiAgentEnv

    own = getattr(type(inner), method, None)
    return own is not None and own is not getattr(MultiAgentEnv, method, None)


def _space(space: Any) -> spaces.Space:
    """A JaxMARL space as ours (Discrete, or a Box of its shape and bounds)."""
    if hasattr(space, "n") and not hasattr(space, "low"):
        return spaces.Discrete(int(space.n), getattr(space, "dtype", jnp.int32))
    shape = tuple(space.shape)
    low = np.broadcast_to(np.asarray(space.low, np.float32), shape)
    high = np.broadcast_to(np.asarray(space.high, np.float32), shape)
    return spaces.Box(low, high, shape, jnp.float32)


class JaxMARLEnv(MultiAgentEnvironment):
    """One JaxMARL environment behind the stacked multi-agent contract."""

    def __init__(self, inner: Any, env_id: str):
        self.inner, self.env_id = inner, env_id
        self.num_agents = int(inner.num_agents)
        self._names = tuple(inner.agents)
        obs_spaces = [_space(inner.observation_space(a)) for a in self._names]
        sizes = [int(np.prod(s.shape)) for s in obs_spaces]
        self.obs_size = max(sizes)
        actions = [_space(inner.action_space(a)) for a in self._names]
        if len({repr(a) for a in actions}) != 1:
            raise ValueError(
                f"jaxmarl:{env_id}: the agents' action spaces differ "
                f"({dict(zip(self._names, map(repr, actions), strict=True))}); stacked agents "
                "need one action space"
            )
        self._action_space = actions[0]
        self.has_action_mask = isinstance(self._action_space, spaces.Discrete) and _implements(
            inner, "get_avail_actions"
        )
        self._global = next(
            (
                getattr(inner, m)
                for m in ("get_global_state", "get_world_state")
                if callable(getattr(inner, m, None))
            ),
            None,
        )

    @property
    def name(self) -> str:
        return f"jaxmarl:{self.env_id}"

    @property
    def agent_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def default_params(self) -> JaxMARLParams:
        return JaxMARLParams(max_steps_in_episode=int(getattr(self.inner, "max_steps", 999)) + 1)

    def agent_observation_space(self, params: Any) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (self.obs_size,), jnp.float32)

    def agent_action_space(self, params: Any) -> spaces.Space:
        return self._action_space

    def state_space(self, params: Any) -> spaces.Box:
        shape = jax.eval_shape(lambda: self._state_vector(*self._reset_raw(jax.random.key(0))))
        return spaces.Box(-np.inf, np.inf, shape.shape, jnp.float32)

    # ------------------------------------------------------------------ pieces
    def _stack_obs(self, obs: dict[str, Any]) -> jax.Array:
        flat = {
            a: jnp.pad(
                jnp.ravel(obs[a]).astype(jnp.float32),
                (0, self.obs_size - int(np.prod(jnp.shape(obs[a])))),
            )
            for a in self._names
        }
        return from_dict(flat, self._names)

    def _state_vector(self, inner: Any, agents: jax.Array) -> jax.Array:
        if self._global is not None:
            return jnp.ravel(self._global(inner)).astype(jnp.float32)
        return agents.ravel()

    def _reset_raw(self, key: jax.Array) -> tuple[Any, jax.Array]:
        obs, inner = self.inner.reset(key)
        return inner, self._stack_obs(obs)

    def _observation(self, inner: Any, agents: jax.Array, alive: jax.Array) -> dict[str, Any]:
        obs = {"agents": agents, "state": self._state_vector(inner, agents), "alive": alive}
        if self.has_action_mask:  # JaxMARL's 0/1 per agent -> (N, A) bool
            legal = self.inner.get_avail_actions(inner)
            obs["action_mask"] = from_dict(
                {a: jnp.asarray(legal[a]) != 0 for a in self._names}, self._names
            )
        return obs

    # ------------------------------------------------------------------ dynamics
    def reset_env(self, key: jax.Array, params: Any):
        inner, agents = self._reset_raw(key)
        alive = jnp.ones((self.num_agents,), jnp.bool_)
        state = JaxMARLState(inner=inner, alive=alive, time=jnp.zeros((), jnp.int32))
        return self._observation(inner, agents, alive), state

    def step_env(self, key: jax.Array, state: JaxMARLState, action: jax.Array, params: Any):
        obs, inner, reward, dones, info = self.inner.step_env(
            key, state.inner, to_dict(action, self._names)
        )
        alive = ~from_dict({a: jnp.asarray(dones[a], bool) for a in self._names}, self._names)
        reward = from_dict(
            {a: jnp.asarray(reward[a], jnp.float32) for a in self._names}, self._names
        )
        reward = jnp.where(state.alive, reward, 0.0)
        agents = self._stack_obs(obs)
        state = JaxMARLState(inner=inner, alive=alive, time=state.time + 1)
        terminated = jnp.asarray(dones["__all__"], bool)
        return self._observation(inner, agents, alive), state, reward, terminated, {}
