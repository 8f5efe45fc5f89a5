"""n-step return targets from a replay buffer of transitions, with correct time limits.

Off-policy algorithms store one `Transition` per environment step (one column of the
ring per environment, see `jaxrl.replay.buffer`) and, for a sampled slot `t`, learn
towards

    y_t = sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - terminated_{t+m-1}) V(s'_{t+m-1})

(the n-step return, Sutton & Barto 2018, eq. 7.1; used by Rainbow, Hessel et al.
2018), where `m <= n` stops early at the first episode end in the window, and at
the buffer's write head (the steps after it are not written yet; the target is then
the shorter return, still a valid bootstrapped target, so every written slot can be
sampled, uniformly or by priority). `s'` is the transition's `next_observation`:
the observation after the step, and at an episode end `info["final_observation"]`
(never the auto-reset observation). So:

* **terminated** (a terminal state): no bootstrap, `discount = 0`;
* **truncated** (a time limit, Pardo et al. 2018): bootstrap from the value of the
  final observation, `discount = gamma^m`, as PPO does one step at a time with
  `jaxrl.returns.bootstrap_truncated_rewards`. Termination takes precedence when
  both flags are set, as there.

`NStepBatch` holds `reward = sum_k gamma^k r_{t+k}`, `discount` and the
`next_observation` to evaluate, so every loss computes `reward + discount *
V(next_observation)` whatever `n` is (n = 1 is the usual one-step target).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.config import check
from jaxrl.replay import buffer


@struct.dataclass
class Transition:
    """One environment step, the item off-policy algorithms store."""

    observation: Any
    action: Any
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_observation: Any  # at an episode end: info["final_observation"]


@struct.dataclass
class NStepBatch:
    """Inputs of the target `reward + discount * V(next_observation)`."""

    observation: Any  # leaves [batch, ...]: s_t
    action: Any  # a_t
    reward: jax.Array  # float32 [batch]: sum_{k<m} gamma^k r_{t+k}
    discount: jax.Array  # float32 [batch]: gamma^m, or 0 if the window ended by termination
    next_observation: Any  # s'_{t+m-1}, the state to bootstrap from


def nstep_return(
    reward: jax.Array,
    terminated: jax.Array,
    truncated: jax.Array,
    valid: jax.Array,
    gamma: float | jax.Array,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The n-step return of one window of `n` consecutive steps (1-D arrays).

    `valid` is a prefix mask (steps that exist; the first must). The window is cut
    after its first terminated or truncated step and before its first invalid one,
    leaving `m` steps. Returns `(sum_{k<m} gamma^k r_k, discount, m - 1)`: the
    discounted reward sum, the bootstrap discount (`gamma^m`, or 0 if step `m - 1`
    terminated) and the index of the step whose `next_observation` to bootstrap from.
    """
    done = (terminated | truncated).astype(jnp.int32)
    ended_before = (jnp.cumsum(done) - done) > 0  # an episode end strictly before step k
    included = valid & ~ended_before
    steps = jnp.sum(included.astype(jnp.int32))
    powers = jnp.asarray(gamma, jnp.float32) ** jnp.arange(reward.shape[0], dtype=jnp.float32)
    ret = jnp.sum(jnp.where(included, powers * reward, 0.0))
    last = steps - 1
    discount = jnp.where(terminated[last], 0.0, jnp.asarray(gamma, jnp.float32) ** steps)
    return ret, discount, last


def nstep_batch(
    state: buffer.ReplayState, indices: jax.Array, n: int, gamma: float | jax.Array
) -> NStepBatch:
    """n-step targets' inputs for the transitions at slots `indices` (from `sample`).

    `state.items` must be a `Transition`. Only the reward and done flags of the
    window are gathered, and one `next_observation` per sample, so `n` costs little.
    `n = 1` (the one-step target) reads each sampled transition alone: no window to
    cut, so `reward = r_t`, `discount = 0 if terminated_t else gamma` and `s'_t`.
    """
    check(
        isinstance(n, int) and 1 <= n <= buffer.rows(state),
        "n",
        n,
        f"an integer in [1, rows={buffer.rows(state)}] (steps stored per environment)",
    )
    if isinstance(gamma, (int, float)):
        check(0.0 <= gamma <= 1.0, "gamma", gamma, "in [0, 1]")
    items: Transition = state.items
    if n == 1:
        first = buffer.gather(state, indices)
        return NStepBatch(
            observation=first.observation,
            action=first.action,
            reward=first.reward,
            discount=jnp.where(first.terminated, 0.0, jnp.asarray(gamma, jnp.float32)),
            next_observation=first.next_observation,
        )
    flags = state.replace(items=(items.reward, items.terminated, items.truncated))
    (reward, terminated, truncated), valid = buffer.gather_windows(flags, indices, n)
    ret, discount, last = jax.vmap(nstep_return, in_axes=(0, 0, 0, 0, None))(
        reward, terminated, truncated, valid, gamma
    )
    first = buffer.gather(state, indices)
    next_obs = state.replace(items=items.next_observation)
    return NStepBatch(
        observation=first.observation,
        action=first.action,
        reward=ret,
        discount=discount,
        next_observation=buffer.gather(next_obs, buffer.shift(state, indices, last)),
    )
