"""MPE simple_spread (Lowe et al. 2017), ported from JaxMARL's `MPE_simple_spread_v3`.

N agents and N landmarks on a plane. Every agent observes its own velocity and
position, the landmarks and the other agents relative to itself (and an always-zero
communication channel, kept so observations have JaxMARL's 18 numbers for N = 3).
The agents are rewarded together for covering the landmarks and each is penalised for
its own collisions:

    r_i = local_ratio * (-#{j != i : |p_i - p_j| < 2 * agent_radius})
          + (1 - local_ratio) * sum_l (-min_j |p_j - l|)

Dynamics (the multi-agent particle environment's): discrete actions {0: stay,
1: -x, 2: +x, 3: -y, 4: +y} push with force `accel`; colliding agents repel each other
with the softened contact force `contact_force * (p_a - p_b) / |p_a - p_b| * k *
log(1 + exp(-(|p_a - p_b| - 2 r) / k))`, `k = contact_margin`; then, with `dt`,
`p += v dt`, `v = v (1 - damping) + F dt` (unit mass, no speed limit).

The global state for a centralised critic is every agent's position and velocity and
every landmark's position. Episodes are truncated after `max_steps_in_episode` steps
(25, as PettingZoo's `max_cycles`); nothing terminates and no agent leaves.

Differences from JaxMARL, on purpose: JaxMARL ends an episode after 26 steps (its done
check reads the step counter before incrementing it, `MAX_STEPS = 25`); set
`max_steps_in_episode=26` to match it. Its episode end is a `done` its baselines
treat as terminal; here it is a truncation (bootstrapped by learners that do so).
Transitions are checked step for step against the `jaxmarl` package in
tests/envs/test_multiagent_env.py (optional tier) and against hand-computed values in
the default tier.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .. import spaces
from ..core import EnvParams, EnvState, require
from .core import MultiAgentEnvironment

__all__ = ["SimpleSpread", "SimpleSpreadParams", "SimpleSpreadState"]


@struct.dataclass
class SimpleSpreadState(EnvState):
    agent_pos: jax.Array  # (N, 2)
    agent_vel: jax.Array  # (N, 2)
    landmark_pos: jax.Array  # (L, 2)
    time: jax.Array


@struct.dataclass
class SimpleSpreadParams(EnvParams):
    local_ratio: float = 0.5  # weight of the agent's own collision penalty
    agent_radius: float = 0.15
    accel: float = 5.0  # force of a move action
    damping: float = 0.25
    contact_force: float = 100.0
    contact_margin: float = 1e-3
    dt: float = 0.1
    max_steps_in_episode: int = 25

    def validate(self) -> None:
        super().validate()
        require(self, "local_ratio", lambda v: (v >= 0) & (v <= 1), "in [0, 1]")
        for name in ("agent_radius", "accel", "contact_force", "contact_margin", "dt"):
            require(self, name, lambda v: v > 0, "positive")
        require(self, "damping", lambda v: (v >= 0) & (v <= 1), "in [0, 1]")


# The displacement direction of each discrete action: stay, -x, +x, -y, +y.
_MOVES = np.array([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]], np.float32)


class SimpleSpread(MultiAgentEnvironment):
    """`num_agents` agents cover `num_landmarks` landmarks (see the module docstring)."""

    stochastic_step = False  # deterministic dynamics: the whole key goes to reset
    obs_from_state = True

    def __init__(self, num_agents: int = 3, num_landmarks: int = 3):
        if int(num_agents) < 1 or int(num_landmarks) < 1:
            raise ValueError(
                f"SimpleSpread: num_agents={num_agents} and num_landmarks={num_landmarks} "
                "must both be >= 1"
            )
        self.num_agents = int(num_agents)
        self.num_landmarks = int(num_landmarks)

    @property
    def name(self) -> str:
        return "SimpleSpread-MPE"

    @property
    def default_params(self) -> SimpleSpreadParams:
        return SimpleSpreadParams()

    # ------------------------------------------------------------------ spaces
    @property
    def obs_size(self) -> int:
        # velocity, position, landmarks, other agents, their (silent) communication
        return 4 + 2 * self.num_landmarks + 4 * (self.num_agents - 1)

    def agent_observation_space(self, params: SimpleSpreadParams) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (self.obs_size,), jnp.float32)

    def agent_action_space(self, params: SimpleSpreadParams) -> spaces.Discrete:
        return spaces.Discrete(5)

    def state_space(self, params: SimpleSpreadParams) -> spaces.Box:
        return spaces.Box(-np.inf, np.inf, (4 * self.num_agents + 2 * self.num_landmarks,))

    # ------------------------------------------------------------------ dynamics
    def reset_env(self, key: jax.Array, params: SimpleSpreadParams):
        k_agents, k_landmarks = jax.random.split(key)
        n, m = self.num_agents, self.num_landmarks
        state = SimpleSpreadState(
            agent_pos=jax.random.uniform(k_agents, (n, 2), minval=-1.0, maxval=1.0),
            agent_vel=jnp.zeros((n, 2), jnp.float32),
            landmark_pos=jax.random.uniform(k_landmarks, (m, 2), minval=-1.0, maxval=1.0),
            time=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state, params), state

    def step_env(self, key: jax.Array, state: SimpleSpreadState, action: jax.Array, params):
        force = jnp.asarray(_MOVES)[action] * params.accel + self.contact_forces(
            state.agent_pos, params
        )
        pos = state.agent_pos + state.agent_vel * params.dt
        vel = state.agent_vel * (1.0 - params.damping) + force * params.dt
        state = state.replace(agent_pos=pos, agent_vel=vel, time=state.time + 1)
        reward = self.rewards(state, params)
        return self.get_obs(state, params), state, reward, jnp.asarray(False), {}

    def contact_forces(self, pos: jax.Array, params: SimpleSpreadParams) -> jax.Array:
        """`(N, 2)`: the sum over the other agents of the softened contact force."""
        delta = pos[:, None, :] - pos[None, :, :]  # delta[a, b] = p_a - p_b
        other = ~jnp.eye(self.num_agents, dtype=bool)
        dist = jnp.sqrt(jnp.sum(delta**2, axis=-1))
        safe = jnp.where(other, dist, 1.0)  # no 0/0 on the diagonal
        k = params.contact_margin
        penetration = jnp.logaddexp(0.0, -(safe - 2 * params.agent_radius) / k) * k
        pair = params.contact_force * delta / safe[..., None] * penetration[..., None]
        return jnp.sum(jnp.where(other[..., None], pair, 0.0), axis=1)

    def rewards(self, state: SimpleSpreadState, params: SimpleSpreadParams) -> jax.Array:
        """`(N,)`: each agent's collision penalty mixed with the shared coverage term."""
        pos = state.agent_pos
        dist = jnp.sqrt(jnp.sum((pos[:, None] - pos[None]) ** 2, axis=-1))
        other = ~jnp.eye(self.num_agents, dtype=bool)
        collisions = jnp.sum((dist < 2 * params.agent_radius) & other, axis=1)
        to_landmarks = jnp.linalg.norm(pos[:, None] - state.landmark_pos[None], axis=-1)
        coverage = -jnp.sum(jnp.min(to_landmarks, axis=0))
        local = -collisions.astype(jnp.float32)
        return params.local_ratio * local + (1.0 - params.local_ratio) * coverage

    def get_obs(self, state: SimpleSpreadState, params: SimpleSpreadParams) -> dict[str, Any]:
        n = self.num_agents
        pos, vel = state.agent_pos, state.agent_vel
        landmarks = state.landmark_pos[None] - pos[:, None]  # (N, L, 2)
        # The other agents in index order, relative to each agent: (N, N - 1, 2).
        others_idx = np.array(
            [[j for j in range(n) if j != i] for i in range(n)], np.int32
        ).reshape(n, n - 1)
        others = pos[others_idx] - pos[:, None]
        agents = jnp.concatenate(
            [
                vel,
                pos,
                landmarks.reshape(n, -1),
                others.reshape(n, -1),
                jnp.zeros((n, 2 * (n - 1)), jnp.float32),  # silent communication
            ],
            axis=-1,
        )
        global_state = jnp.concatenate([pos.ravel(), vel.ravel(), state.landmark_pos.ravel()])
        return {"agents": agents, "state": global_state, "alive": jnp.ones((n,), jnp.bool_)}
