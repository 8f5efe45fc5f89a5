"""Collecting datasets: from a policy (a trained run, or uniformly random actions), from
an off-policy run's replay buffer (D4RL's medium-replay), and mixes of them.

`jaxrl dataset collect` calls these. A *policy* source rolls out `num_envs`
environments for `steps` steps in one `lax.scan` and keeps each environment's complete
episodes (the partial one at the end is dropped), so the behaviour policy's returns are
exact. As D4RL does, a trained policy acts stochastically (`act(..., deterministic=
False)`: SAC samples its Gaussian, TD3 adds its exploration noise); a "medium" dataset
comes from a run stopped early, an "expert" one from a run trained to the end, a
"mixed" one from several sources concatenated. A *replay* source reads the newest
checkpoint's replay buffer (agent `agent`) in time order, per environment column, and
keeps its complete episodes.

The reference returns of the normalised score (`reference_return`) are the mean
returns of fresh episodes: of uniformly random actions (`random_return`) and of an
expert run's deterministic policy (`expert_return`), as D4RL's reference scores are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import acting, envs
from jaxrl.config import ConfigError
from jaxrl.episodes import agent_episodes
from jaxrl.evaluation import load_run, read_run
from jaxrl.replay.nstep import Transition

from .dataset import Dataset, concatenate, from_arrays

# `policy(obs (E, ...), carry, reset (E,), key) -> (env_action (E, ...), carry)`
Policy = Callable[[jax.Array, Any, jax.Array, jax.Array], tuple[jax.Array, Any]]


def random_policy(env: envs.Environment, env_params: Any) -> tuple[Policy, Callable[[int], Any]]:
    """Uniformly random actions from the environment's action space (no carry)."""
    space = env.action_space(env_params)

    def policy(obs, carry, reset, key):
        keys = jax.random.split(key, obs.shape[0])
        return jax.vmap(space.sample)(keys), carry

    return policy, lambda n: None


def run_policy(
    run_dir: str, agent: int = 0, deterministic: bool = False
) -> tuple[Any, Policy, Callable[[int], Any]]:
    """`(algo, policy, initial_carry)` of agent `agent` of a trained run's newest checkpoint."""
    algo, state, _ = load_run(run_dir)
    agents = jax.tree.leaves(state.params)[0].shape[0]
    if not 0 <= agent < agents:
        raise ConfigError(f"invalid agent={agent}: {run_dir} has agents 0..{agents - 1}")
    one = jax.tree.map(lambda x: x[agent], state)

    def policy(obs, carry, reset, key):
        return algo.act(one, obs, carry, reset, key, deterministic)

    return algo, policy, algo.eval_carry


def rollout(
    env: envs.Environment,
    env_params: Any,
    policy: Policy,
    initial_carry: Callable[[int], Any],
    key: jax.Array,
    steps: int,
    num_envs: int = 1,
) -> Dataset:
    """`steps` steps of `num_envs` environments under `policy`; the complete episodes."""
    if steps < 1 or num_envs < 1:
        raise ConfigError(f"invalid steps={steps}, num_envs={num_envs}: both must be >= 1")
    k_reset, k_run = jax.random.split(key)
    obs, env_state = acting.reset_envs(env, env_params, k_reset, num_envs)
    reset = jnp.ones((num_envs,), bool)

    def step(carry, key):
        obs, env_state, policy_carry, reset = carry
        k_act, k_env = jax.random.split(key)
        action, policy_carry = policy(obs, policy_carry, reset, k_act)
        next_obs, env_state, reward, terminated, truncated, info = acting.step_envs(
            env, env_params, k_env, env_state, action
        )
        transition = Transition(
            observation=obs,
            action=action,
            reward=reward.astype(jnp.float32),
            terminated=terminated,
            truncated=truncated,
            next_observation=info["final_observation"],
        )
        done = jnp.logical_or(terminated, truncated)
        return (next_obs, env_state, policy_carry, done), transition

    init = (obs, env_state, initial_carry(num_envs), reset)
    scan = jax.jit(lambda init, keys: jax.lax.scan(step, init, keys))
    _, steps_taken = scan(init, jax.random.split(k_run, steps))
    return complete_episodes(jax.device_get(steps_taken), drop_leading=False)


def complete_episodes(transitions: Transition, drop_leading: bool) -> Dataset:
    """A dataset from time-major transitions `[T, E, ...]`: each environment column in
    time order, cut after its last episode end (and, with `drop_leading`, before the end
    of its first episode, whose start may be missing), columns one after another."""
    pieces = []
    done = np.logical_or(transitions.terminated, transitions.truncated)
    for column in range(done.shape[1]):
        ends = np.flatnonzero(done[:, column])
        if ends.size == 0:
            continue
        start = ends[0] + 1 if drop_leading else 0
        stop = ends[-1] + 1
        if start < stop:
            rows = slice(start, stop)
            pieces.append(
                jax.tree.map(lambda x, r=rows, c=column: np.asarray(x[r, c]), transitions)
            )
    if not pieces:
        raise ConfigError(
            "invalid steps: no episode finished within the collected steps; collect more "
            "steps (at least one whole episode per environment)"
        )
    joined = jax.tree.map(lambda *xs: np.concatenate(xs), *pieces)
    return from_arrays(
        {
            "observations": joined.observation,
            "actions": joined.action,
            "rewards": joined.reward,
            "terminations": joined.terminated,
            "truncations": joined.truncated,
            "next_observations": joined.next_observation,
        }
    )


def from_replay(run_dir: str, agent: int = 0) -> tuple[Any, Dataset]:
    """`(algo, dataset)`: the complete episodes in the replay buffer of an off-policy
    run's newest checkpoint (agent `agent`), actions mapped to the environment's."""
    _, entry = read_run(run_dir)
    algo, state, _ = load_run(run_dir)
    replay = getattr(state, "replay", None)
    if replay is None:
        raise ConfigError(
            f"invalid source replay:{run_dir}: a {entry.name} run keeps no replay buffer "
            "(use an off-policy run: sac, td3, dqn, c51)"
        )
    ring = getattr(replay, "buffer", replay)  # prioritised replay wraps the ring
    ring = jax.tree.map(lambda x: np.asarray(x[agent]), ring)
    rows = ring.items.reward.shape[0]
    size, head = int(ring.size), int(ring.head)
    order = (head - size + np.arange(size)) % rows  # oldest row first
    items = jax.tree.map(lambda x: x[order], ring.items)
    to_env = jax.jit(jax.vmap(algo.to_env_action))
    items = items.replace(action=np.asarray(to_env(jnp.asarray(items.action))))
    # Rows written over the run: more than the ring holds means the oldest rows were
    # overwritten, so the first stored step of each column is mid-episode.
    written = int(state.update_step[agent]) * algo.steps_per_update // ring.items.reward.shape[1]
    return algo, complete_episodes(items, drop_leading=written > rows)


def reference_return(
    env: envs.Environment,
    env_params: Any,
    policy: Policy | None,
    initial_carry: Callable[[int], Any],
    key: jax.Array,
    episodes: int,
) -> float:
    """Mean return of `episodes` fresh episodes of `policy` (None: uniformly random)."""
    if policy is None:
        policy, initial_carry = random_policy(env, env_params)

    def act(_, obs, carry, reset, key, deterministic):
        return policy(obs, carry, reset, key)

    returns = jax.jit(
        lambda key: agent_episodes(env, env_params, act, initial_carry, None, key, episodes)
    )(key)
    return float(np.mean(np.asarray(returns)))


def collect(
    sources: list[str],
    steps: int,
    env_id: str | None = None,
    num_envs: int = 1,
    seed: int = 0,
    agent: int = 0,
    expert: str | None = None,
    expert_return: float | None = None,
    random_return: float | None = None,
    reference_episodes: int = 10,
) -> Dataset:
    """A dataset from `sources`, concatenated in order (one source: random, medium or
    expert; several: mixed), with its reference returns in the metadata.

    A source is `random` (uniform actions), a run directory (its policy, `steps` steps
    of `num_envs` environments) or `replay:RUN_DIR` (that run's replay buffer; `steps`
    does not apply). The environment is the runs' (they must agree) or `env_id`.
    `random_return` defaults to the mean return of `reference_episodes` random episodes;
    `expert_return` to the mean deterministic return of `expert` (a run directory) over
    as many; with neither given, the dataset has no normalised score.
    """
    if not sources:
        raise ConfigError(
            "invalid sources=[]: give at least one --source (random, RUN_DIR, replay:RUN_DIR)"
        )
    runs = [s.split(":", 1)[1] if s.startswith("replay:") else s for s in sources if s != "random"]
    if expert is not None:
        runs.append(expert)
    env_ids = {read_run(r)[0]["config"].get("env") for r in runs}
    if env_id is not None:
        env_ids.add(env_id)
    if len(env_ids) != 1 or None in env_ids:
        raise ConfigError(
            f"invalid env: the sources and --env name {sorted(map(str, env_ids))}; a dataset "
            "is of one environment (give --env for a random-only dataset)"
        )
    (env_id,) = env_ids
    env, env_params = envs.make(env_id)
    key = jax.random.key(seed)
    parts = []
    for index, source in enumerate(sources):
        k = jax.random.fold_in(key, index)
        if source == "random":
            policy, carry = random_policy(env, env_params)
            parts.append(rollout(env, env_params, policy, carry, k, steps, num_envs))
        elif source.startswith("replay:"):
            parts.append(from_replay(source.split(":", 1)[1], agent)[1])
        else:
            _, policy, carry = run_policy(source, agent)
            parts.append(rollout(env, env_params, policy, carry, k, steps, num_envs))
    k_random, k_expert = jax.random.split(jax.random.fold_in(key, len(sources)))
    if random_return is None:
        random_return = reference_return(env, env_params, None, None, k_random, reference_episodes)
    if expert_return is None and expert is not None:
        _, policy, carry = run_policy(expert, agent, deterministic=True)
        expert_return = reference_return(
            env, env_params, policy, carry, k_expert, reference_episodes
        )
    metadata = {
        "env": env_id,
        "sources": list(sources),
        "random_return": float(random_return),
        "expert_return": None if expert_return is None else float(expert_return),
        "expert": expert,
        "seed": seed,
    }
    return concatenate(parts, metadata)
