"""PPO's variants learn: Gaussian and tanh-squashed continuous policies, recurrent PPO.

Each test trains one fixed seed and asserts the return beats a policy that cannot have
learned by a clear margin:

* continuous (Pendulum-v1): the uniformly random policy's mean return, measured here
  over 256 episodes (about -1230). 100k steps of the Pendulum preset reach about -500
  (Gaussian) and -550 (tanh-squashed) with seed 0; the tests ask for 400 above random.
  About 15 s each on 2 cores, so they stay in the default suite.
* recurrent (MemoryChain-v0): any memoryless policy has expected return 0 (the cue is
  hidden at the answer step; proved in envs/memory/memory_chain.py and
  tests/envs/test_memory.py), the remembering optimum is +1. Recurrent PPO's preset
  reaches 1.0 with seed 0, a feed-forward PPO -0.02; the test asks for 0.9. About 30 s
  on 2 cores: slow tier. Recurrent PPO on CartPole-POMDP-v1 is in test_ppo_learning.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

import jaxrl
from jaxrl import envs

PENDULUM_STEPS = 100_000
MARGIN_OVER_RANDOM = 400.0
MEMORYLESS_RETURN = 0.0  # exact expectation for any policy without memory (see above)


@functools.cache
def random_policy_return(env_id: str, episodes: int, seed: int = 0) -> float:
    """Mean undiscounted return of uniformly random actions over whole episodes.

    Every episode runs `max_steps_in_episode` steps from its own reset; rewards after
    an episode's first end are masked, so each episode counts once.
    """
    env, params = envs.make(env_id)
    space = env.action_space(params)

    def episode(key: jax.Array) -> jax.Array:
        k_reset, k_run = jax.random.split(key)
        _, state = env.reset(k_reset, params)

        def body(carry, k):
            state, total, done = carry
            k_act, k_step = jax.random.split(k)
            _, state, reward, term, trunc, _ = env.step(k_step, state, space.sample(k_act), params)
            total = total + jnp.where(done, 0.0, reward)
            return (state, total, done | term | trunc), None

        init = (state, jnp.float32(0.0), jnp.bool_(False))
        keys = jax.random.split(k_run, params.max_steps_in_episode)
        (_, total, done), _ = jax.lax.scan(body, init, keys)
        return jnp.where(done, total, jnp.nan)  # an unfinished episode poisons the mean

    keys = jax.random.split(jax.random.key(seed), episodes)
    return float(jnp.mean(jax.jit(jax.vmap(episode))(keys)))


def _final_return(env: str, **overrides) -> float:
    result = jaxrl.train("ppo", env=env, num_seeds=1, seed=0, progress=False, **overrides)
    return result.summary["final_return_mean"]


def test_random_pendulum_baseline_is_near_minus_1200():
    """The baseline the continuous tests beat: gymnasium's documented random-play range."""
    assert -1400 < random_policy_return("Pendulum-v1", episodes=256) < -1000


@pytest.mark.parametrize("tanh_squash", [False, True], ids=["gaussian", "tanh_squashed"])
def test_continuous_ppo_beats_random_on_pendulum(tanh_squash: bool):
    baseline = random_policy_return("Pendulum-v1", episodes=256)
    final = _final_return("Pendulum-v1", total_steps=PENDULUM_STEPS, tanh_squash=tanh_squash)
    assert final >= baseline + MARGIN_OVER_RANDOM, (final, baseline)


@pytest.mark.slow
def test_recurrent_ppo_remembers_the_cue_on_memory_chain():
    final = _final_return("MemoryChain-v0")  # the preset: recurrent, 200k steps
    assert final >= MEMORYLESS_RETURN + 0.9, final
