"""Optimistic resets: a batched auto-reset that draws fewer fresh episode starts than copies.

`Environment.step` auto-resets: every step of every copy computes a fresh episode start
(`reset_env`) and keeps it only where the episode ended. For most environments a reset
is cheap; for Craftax it generates a whole world, and on a CPU that reset, computed for
every copy on every step, costs more than the step itself. The Craftax baselines
(Matthews et al. 2024, `OptimisticResetVecEnvWrapper`) compute only
`num_copies / reset_ratio` fresh starts per step for the whole batch and hand them to
the copies whose episode ended; `OptimisticResets` does the same on jaxrl's API.

Which copy gets which start: a pool of `P = num_copies / reset_ratio` fresh starts is
drawn per step; the k-th copy (in copy order) whose episode ended on the step takes
pool entry `k mod P`. So:

* exact in distribution while at most `P` copies finish on one step: each finished
  copy gets its own start, drawn independently of everything else (the pool's keys
  do not depend on the states);
* when more than `P` finish at once, the ones after the P-th reuse starts already
  handed out (two copies then begin the same episode). Each such copy is flagged in
  `info["shared_reset"]` and counted in its state's `shared_resets`
  (`find_state(state, OptimisticResetState).shared_resets`), so a run can say how
  often it happened;
* with `reset_ratio=1` the pool has one entry per copy, copy i takes entry i, and the
  pool's keys are the ones `Environment.step` would have used: the result equals the
  plain auto-reset exactly (tested).

How. The batch-wide part is `step_batch`, the batched step `jaxrl.acting.step_envs`
calls (`Environment.step_batch`: a `vmap` of `step` by default). It draws the pool, then
vmaps the wrapped stack's own `step` over the copies with a named axis, on a copy of
the stack whose base environment's `next_episode` hook (`envs/core.py`) returns the
copy's pool entry instead of computing a reset: the copy's rank among the finished
copies comes from an `all_gather` of the `done` flags over that axis. Everything else
is the wrapped stack's own step (its truncation, `final_observation`, the wrappers'
handling of the reset observation), so the wrapper composes with any stack beneath it.
It must be the outermost wrapper: only the outermost environment's `step_batch` runs.
The pool's starts are fresh resets (`reset_env`), also for an environment that restarts
otherwise (Playground's cached first state, its own `next_episode`): there the plain
auto-reset is already cheap, and the pool would replace its restarts by fresh ones.
A single copy stepped on its own (`step`, e.g. in evaluation episodes) has nothing to
share and auto-resets as usual.

Not here: the plain auto-reset (`envs/core.py`) and the per-copy wrappers
(`envs/wrappers.py`).
"""

from __future__ import annotations

import copy
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from .core import Environment, StepResult
from .wrappers import Options, Wrapper, WrapperState

__all__ = ["OptimisticResets", "OptimisticResetState", "pool_index", "shared_starts"]

# The name of the copy axis `step_batch` vmaps over (the `all_gather` of `done` uses it).
COPY_AXIS = "optimistic_resets_copy"


@struct.dataclass
class OptimisticResetState(WrapperState):
    """The wrapped state plus how many of this copy's episode starts were shared."""

    shared_resets: jax.Array  # int32: episode starts this copy shared with another copy


def pool_index(done: jax.Array, copy_index: jax.Array, pool_size: int) -> jax.Array:
    """The pool entry copy `copy_index` restarts from, given every copy's `done` `(N,)`.

    With one entry per copy (`pool_size == N`), entry `copy_index`; otherwise
    `k mod pool_size` for the k-th finished copy (k counted from 0 in copy order).
    Copies that did not finish get an entry too (it is not selected).
    """
    num_copies = done.shape[0]
    if pool_size == num_copies:
        return copy_index
    done = done.astype(jnp.int32)
    rank = jnp.cumsum(done) - done  # finished copies before each copy
    return rank[copy_index] % pool_size


def shared_starts(done: jax.Array, pool_size: int) -> jax.Array:
    """Which finished copies reuse a start already handed to an earlier copy `(N,)`."""
    done = jnp.asarray(done, jnp.bool_)
    rank = jnp.cumsum(done.astype(jnp.int32)) - done.astype(jnp.int32)
    return jnp.logical_and(done, rank >= pool_size)


class OptimisticResets(Wrapper):
    """Shares `num_copies / reset_ratio` fresh episode starts per step among a batch.

    See the module docstring. `reset_ratio` (a positive integer dividing the number
    of copies `step_batch` is called with) is the number of copies per fresh start;
    1 draws one per copy, as the plain auto-reset does.
    """

    def __init__(self, env: Environment, reset_ratio: int):
        super().__init__(env)
        if isinstance(reset_ratio, bool) or not isinstance(reset_ratio, int) or reset_ratio < 1:
            raise ValueError(
                f"OptimisticResets: reset_ratio must be a positive integer, got {reset_ratio!r}"
            )
        self.reset_ratio = reset_ratio

    def pool_size(self, num_copies: int) -> int:
        """Fresh starts drawn per step for `num_copies` copies: `num_copies / reset_ratio`."""
        if num_copies % self.reset_ratio:
            raise ValueError(
                f"OptimisticResets: reset_ratio={self.reset_ratio} must divide the number "
                f"of copies stepped together ({num_copies})"
            )
        return num_copies // self.reset_ratio

    def wrapped_reset(
        self, key: jax.Array, params: Any, options: Options
    ) -> tuple[Any, OptimisticResetState]:
        obs, inner = super().wrapped_reset(key, params, options)
        return obs, OptimisticResetState(inner, jnp.zeros((), jnp.int32))

    def wrapped_step(
        self,
        key: jax.Array,
        state: OptimisticResetState,
        action: Any,
        params: Any,
        truncate: jax.Array | None,
    ) -> StepResult:
        # One copy on its own shares nothing: the wrapped stack's own auto-reset.
        obs, inner, reward, terminated, truncated, info = super().wrapped_step(
            key, state.inner_state, action, params, truncate
        )
        info = {**info, "shared_reset": jnp.zeros((), jnp.bool_)}
        return obs, state.replace(inner_state=inner), reward, terminated, truncated, info

    def step_batch(
        self, keys: jax.Array, state: OptimisticResetState, action: Any, params: Any = None
    ) -> StepResult:
        """Steps `N` copies (one key each), drawing `N / reset_ratio` fresh starts."""
        params = self.default_params if params is None else params
        num_copies = keys.shape[0]
        pool_size = self.pool_size(num_copies)
        base = self.unwrapped
        # The keys `Environment.step` would reset the first `pool_size` copies with.
        pool_keys = jax.vmap(lambda k: base.step_keys(k, params)[1])(keys[:pool_size])
        pool = jax.vmap(base.reset_env, in_axes=(0, None))(pool_keys, params)
        stack = _with_base(self._env, _pooled(base, pool, pool_size))

        def step_one(key: jax.Array, inner: Any, act: Any) -> StepResult:
            return stack.step(key, inner, act, params)

        obs, inner, reward, terminated, truncated, info = jax.vmap(step_one, axis_name=COPY_AXIS)(
            keys, state.inner_state, action
        )
        shared = shared_starts(jnp.logical_or(terminated, truncated), pool_size)
        new_state = OptimisticResetState(inner, state.shared_resets + shared.astype(jnp.int32))
        info = {**info, "shared_reset": shared}
        return obs, new_state, reward, terminated, truncated, info


def _pooled(base: Environment, pool: tuple[Any, Any], pool_size: int) -> Environment:
    """A shallow copy of `base` whose auto-reset takes its start from `pool` (stepped
    under `vmap(..., axis_name=COPY_AXIS)`): see `pool_index`."""

    def next_episode(key: jax.Array, params: Any, state: Any, done: jax.Array) -> tuple[Any, Any]:
        del key, params, state  # the pool was drawn with the keys the plain auto-reset uses
        all_done = jax.lax.all_gather(jnp.asarray(done, jnp.int32), COPY_AXIS)
        index = pool_index(all_done, jax.lax.axis_index(COPY_AXIS), pool_size)
        return jax.tree.map(lambda leaf: leaf[index], pool)

    pooled = copy.copy(base)
    pooled.next_episode = next_episode
    return pooled


def _with_base(env: Environment, base: Environment) -> Environment:
    """The wrapper stack `env` rebuilt (shallow copies) around `base` instead of its own."""
    if not isinstance(env, Wrapper):
        return base
    rebuilt = copy.copy(env)
    rebuilt._env = _with_base(env.env, base)
    return rebuilt
