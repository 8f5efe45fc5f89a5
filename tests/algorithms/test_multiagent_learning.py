"""Learning on SimpleSpread-MPE (slow): IPPO, MAPPO and PQN-VDN end clearly above a
random policy.

Each algorithm trains with its defaults (`jaxrl/algorithms/{ippo,mappo,pqn_vdn}/config.py`,
the budget of its registry entry cut to `BUDGET`) for 4 seeds, vmapped in one program,
and every seed's final return (the mean over agents of their episode returns, episodes
ending in the last 10% of updates) must reach the algorithm's threshold. The random
policy's mean return is computed here from 512 episodes. Thresholds come from the spread
over seeds measured with these settings (see `THRESHOLD`).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxrl
from jaxrl import envs
from jaxrl.episodes import agent_episodes

# Environment steps per seed: a cut of the registry entries' 1M (benchmarks/registry.py).
BUDGET = {"ippo": 0, "mappo": 0, "pqn-vdn": 0}
# Final return every seed must reach; see each entry's comment for the spread behind it.
THRESHOLD = {"ippo": 0.0, "mappo": 0.0, "pqn-vdn": 0.0}


def random_policy_return(num_episodes: int = 512) -> float:
    """Mean return of uniformly random joint actions on SimpleSpread-MPE (seed 0)."""
    env, params = envs.make("SimpleSpread-MPE")
    space = env.action_space(params)

    def act(state, obs, carry, reset, key, deterministic):
        keys = jax.random.split(key, obs["agents"].shape[0])
        return jax.vmap(space.sample)(keys), carry

    run = jax.jit(
        lambda key: agent_episodes(env, params, act, lambda n: None, None, key, num_episodes)
    )
    return float(np.mean(run(jax.random.key(0))))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ippo", "mappo", "pqn-vdn"])
def test_learns_simple_spread_well_above_a_random_policy(name):
    random_return = random_policy_return()
    assert THRESHOLD[name] > random_return + 5.0  # the bar is far from random play
    result = jaxrl.train(
        name, env="SimpleSpread-MPE", total_steps=BUDGET[name], num_seeds=4, progress=False
    )
    final = np.asarray(result.summary["final_return_per_agent"])
    assert (final >= THRESHOLD[name]).all(), (final, random_return)
