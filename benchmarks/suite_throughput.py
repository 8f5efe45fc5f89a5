"""The suites' adapters against the suites' own stepping: random-policy steps per second.

    python benchmarks/suite_throughput.py                          # every installed suite
    python benchmarks/suite_throughput.py --ids craftax:Craftax-Classic-Symbolic-v1 --copies 64

Each id runs at its suite's default widths (`DEFAULT_COPIES`: 64 and 1,024 copies, Craftax
16 only: a Craftax step with its auto-reset draws a world for every copy, so its wider
rows took minutes per timed run on this CPU); `--copies` sets the widths of every id.

For each id and number of vmapped copies, two jitted programs of the same shape run
`--steps` steps from a reset: actions and step keys drawn up front, one `lax.scan` of a
vmapped step, the observation, state, summed rewards and episode ends carried (as in
benchmarks/env_throughput.py, whose `build_rollout` times ours). The suite's side uses
the suite's own auto-reset:

* Craftax: its auto-resetting environment (`make_craftax_env_from_name(id, True)`);
* Jumanji: `jumanji.wrappers.AutoResetWrapper` on the raw environment;
* XLand-MiniGrid: `xminigrid.wrappers.GymAutoResetWrapper`;
* pgx: pgx has no auto-reset for a game against an opponent (`pgx.experimental.auto_reset`
  returns the bare `init` state, from which a caller acting as player 0 would play the
  opponent's first move), so its side is the program our adapter compiles (the adapter's
  random opponent) written on pgx's own API: `env.step` for the agent's random legal move,
  the opponent's moves until it is player 0's turn again, and where the game ended a
  fresh `env.init` with the opponent's opening moves;
* MuJoCo Playground: `mujoco_playground.wrapper.wrap_for_brax_training` (its episode
  limit and auto-reset to each copy's cached first state, as the adapter's default; it
  vmaps itself), MJX in JAX (`impl="jax"`) as the adapter.

Both sides are timed alternately in one process (the suites are installed next to
jaxrl, see .ci/optional_venv.sh), compile time excluded, median of `--repeats`; the ratio
ours / theirs is the cost of the wrapping (target: at least 0.9). Writes JSON to
`--out` (default `benchmarks/results/suite_throughput.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from env_throughput import build_rollout  # noqa: E402

DEFAULT_OUT = HERE / "results" / "suite_throughput.json"
DEFAULT_IDS = (
    "craftax:Craftax-Classic-Symbolic-v1",
    "craftax:Craftax-Symbolic-v1",
    "jumanji:Snake-v1",
    "jumanji:Game2048-v1",
    "xminigrid:MiniGrid-Empty-8x8",
    "xminigrid:XLand-MiniGrid-R1-9x9",
    "pgx:tic_tac_toe",
    "pgx:connect_four",
    "playground:CartpoleBalance",
)
# Copies per id, by suite (`--copies` overrides them all).
DEFAULT_COPIES = {"craftax": (16,)}
OTHER_COPIES = (64, 1024)
PACKAGES = {
    "craftax": "craftax",
    "jumanji": "jumanji",
    "xminigrid": "xminigrid",
    "pgx": "pgx",
    "playground": "playground",
}


# ----------------------------------------------------------------------------- theirs


def _scan_rollout(
    reset: Callable[[jax.Array], tuple[Any, Any]],
    step: Callable[[jax.Array, Any, Any], tuple[Any, Any, jax.Array, jax.Array]],
    sample: Callable[[jax.Array], Any],
    copies: int,
    steps: int,
) -> Callable[[jax.Array], Any]:
    """`build_rollout`'s program for a suite's own batched `reset(keys)` and
    `step(keys, state, actions) -> (obs, state, reward, done)`."""

    def rollout(key: jax.Array) -> Any:
        key_reset, key_act, key_step = jax.random.split(key, 3)
        obs, state = reset(jax.random.split(key_reset, copies))
        actions = jax.vmap(jax.vmap(sample))(jax.random.split(key_act, (steps, copies)))
        step_keys = jax.random.split(key_step, (steps, copies))

        def body(carry: Any, xs: tuple[jax.Array, Any]) -> tuple[Any, None]:
            obs, state, returns, ends = carry
            keys, action = xs
            obs, state, reward, done = step(keys, state, action)
            return (obs, state, returns + reward, ends + done.astype(jnp.int32)), None

        init = (obs, state, jnp.zeros(copies, jnp.float32), jnp.zeros(copies, jnp.int32))
        return jax.lax.scan(body, init, (step_keys, actions))[0]

    return jax.jit(rollout)


def _randint(n: int) -> Callable[[jax.Array], jax.Array]:
    return lambda key: jax.random.randint(key, (), 0, n, dtype=jnp.int32)


def craftax_native(env_id: str, copies: int, steps: int) -> Callable[[jax.Array], Any]:
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name(env_id, auto_reset=True)
    params = env.default_params
    reset = jax.vmap(env.reset, in_axes=(0, None))
    vstep = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def step(keys: jax.Array, state: Any, action: jax.Array) -> Any:
        obs, state, reward, done, _ = vstep(keys, state, action, params)
        return obs, state, reward, done

    return _scan_rollout(
        lambda keys: reset(keys, params), step, _randint(env.num_actions), copies, steps
    )


def jumanji_native(env_id: str, copies: int, steps: int) -> Callable[[jax.Array], Any]:
    import jumanji
    from jumanji.wrappers import AutoResetWrapper

    env = AutoResetWrapper(jumanji.make(env_id))

    def reset(keys: jax.Array) -> Any:
        state, timestep = jax.vmap(env.reset)(keys)
        return timestep.observation, state

    def step(keys: jax.Array, state: Any, action: jax.Array) -> Any:
        state, timestep = jax.vmap(env.step)(state, action)
        return timestep.observation, state, timestep.reward, timestep.last()

    return _scan_rollout(reset, step, _randint(int(env.action_spec.num_values)), copies, steps)


def xminigrid_native(env_id: str, copies: int, steps: int) -> Callable[[jax.Array], Any]:
    import xminigrid
    from xminigrid.wrappers import GymAutoResetWrapper

    env, params = xminigrid.make(env_id)
    env = GymAutoResetWrapper(env)

    def reset(keys: jax.Array) -> Any:
        timestep = jax.vmap(env.reset, in_axes=(None, 0))(params, keys)
        return timestep.observation, timestep

    def step(keys: jax.Array, timestep: Any, action: jax.Array) -> Any:
        timestep = jax.vmap(env.step, in_axes=(None, 0, 0))(params, timestep, action)
        return timestep.observation, timestep, timestep.reward, timestep.last()

    return _scan_rollout(reset, step, _randint(env.num_actions(params)), copies, steps)


def pgx_native(env_id: str, copies: int, steps: int) -> Callable[[jax.Array], Any]:
    import pgx

    env = pgx.make(env_id)

    def random_legal(key: jax.Array, legal: jax.Array) -> jax.Array:
        return jnp.argmax(jnp.where(legal, jax.random.gumbel(key, legal.shape), -jnp.inf))

    def opponent(key: jax.Array, state: Any) -> Any:
        def to_move(carry: Any) -> jax.Array:
            state = carry[0]
            return (state.current_player != 0) & ~(state.terminated | state.truncated)

        def move(carry: Any) -> Any:
            state, reward, count = carry
            k_action, k_step = jax.random.split(jax.random.fold_in(key, count))
            state = env.step(state, random_legal(k_action, state.legal_action_mask), k_step)
            return state, reward + state.rewards[0], count + 1

        state, reward, _ = jax.lax.while_loop(to_move, move, (state, 0.0, 0))
        return state, reward

    def one_reset(key: jax.Array) -> Any:
        k_init, k_opponent = jax.random.split(key)
        state, _ = opponent(k_opponent, env.init(k_init))
        return state.observation, state

    def one_step(key: jax.Array, state: Any, action: jax.Array) -> Any:
        k_step, k_opponent, k_reset = jax.random.split(key, 3)
        state = env.step(state, action, k_step)
        reward = state.rewards[0]
        state, opponent_reward = opponent(k_opponent, state)
        done = state.terminated | state.truncated
        _, fresh = one_reset(k_reset)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, state)
        return state.observation, state, reward + opponent_reward, done

    return _scan_rollout(
        jax.vmap(one_reset), jax.vmap(one_step), _randint(env.num_actions), copies, steps
    )


def playground_native(env_id: str, copies: int, steps: int) -> Callable[[jax.Array], Any]:
    from mujoco_playground import registry, wrapper

    raw = registry.load(env_id, config_overrides={"impl": "jax"})  # as the adapter's default
    episode_length = int(registry.get_default_config(env_id).episode_length)
    env = wrapper.wrap_for_brax_training(raw, episode_length=episode_length, action_repeat=1)
    size = raw.action_size

    def reset(keys: jax.Array) -> Any:
        # Brax's episode wrapper sizes its counters from raw (N, 2) uint32 keys.
        state = env.reset(jax.random.key_data(keys))
        return state.obs, state

    def step(keys: jax.Array, state: Any, action: jax.Array) -> Any:
        state = env.step(state, action)
        return state.obs, state, state.reward, state.done > 0.5

    def sample(key: jax.Array) -> jax.Array:
        return jax.random.uniform(key, (size,), minval=-1.0, maxval=1.0)

    return _scan_rollout(reset, step, sample, copies, steps)


NATIVE = {
    "craftax": craftax_native,
    "jumanji": jumanji_native,
    "xminigrid": xminigrid_native,
    "pgx": pgx_native,
    "playground": playground_native,
}


# ----------------------------------------------------------------------------- timing


def _compile(fn: Callable[[jax.Array], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    compiled = fn.lower(jax.random.key(0)).compile()
    jax.block_until_ready(compiled(jax.random.key(0)))  # warm-up
    return compiled, time.perf_counter() - start


def _seconds(compiled: Any, seed: int) -> float:
    start = time.perf_counter()
    jax.block_until_ready(compiled(jax.random.key(seed)))
    return time.perf_counter() - start


def measure(env_id: str, copies: int, args: argparse.Namespace) -> dict[str, Any]:
    """One row: our adapter and the suite's own program, timed alternately."""
    from jaxrl import envs

    suite, _, raw_id = env_id.partition(":")
    env, params = envs.make(env_id)
    ours, ours_compile = _compile(build_rollout(env, params, copies, args.steps))
    theirs, theirs_compile = _compile(NATIVE[suite](raw_id, copies, args.steps))
    ours_t, theirs_t = [], []
    for r in range(args.repeats):
        ours_t.append(_seconds(ours, r + 1))
        theirs_t.append(_seconds(theirs, r + 1))
    n = copies * args.steps
    row = {
        "env": env_id,
        "copies": copies,
        "steps": args.steps,
        "jaxrl_steps_per_s": n / statistics.median(ours_t),
        "suite_steps_per_s": n / statistics.median(theirs_t),
        "jaxrl_compile_seconds": ours_compile,
        "suite_compile_seconds": theirs_compile,
        "jaxrl_timings": ours_t,
        "suite_timings": theirs_t,
    }
    row["ratio"] = row["jaxrl_steps_per_s"] / row["suite_steps_per_s"]
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    from jaxrl.envs.adapters._suite import installed

    rows, skipped = [], {}
    for env_id in args.ids:
        suite = env_id.partition(":")[0]
        module = "mujoco_playground" if suite == "playground" else suite
        if not installed(module):
            skipped[env_id] = f"{module} is not installed (pip install 'jaxrl[{suite}]')"
            print(f"[skip] {env_id}: {skipped[env_id]}", file=sys.stderr)
            continue
        for copies in args.copies or DEFAULT_COPIES.get(suite, OTHER_COPIES):
            try:
                row = measure(env_id, copies, args)
            except Exception as err:  # reported, the run goes on
                row = {"env": env_id, "copies": copies, "error": f"{type(err).__name__}: {err}"}
            rows.append(row)
            _print_row(row)
    return {"meta": _meta(args), "skipped": skipped, "results": rows}


def _print_row(row: dict[str, Any]) -> None:
    if "error" in row:
        print(f"{row['env']:<38}{row['copies']:>7}  ERROR {row['error']}", flush=True)
        return
    print(
        f"{row['env']:<38}{row['copies']:>7}{row['jaxrl_steps_per_s'] / 1e3:>11.1f}k"
        f"{row['suite_steps_per_s'] / 1e3:>11.1f}k{row['ratio']:>8.2f}x",
        flush=True,
    )


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    versions = {}
    for suite, package in PACKAGES.items():
        try:
            versions[suite] = version(package)
        except Exception:  # not installed
            versions[suite] = None
    return {
        "command": shlex.join(["python", "benchmarks/suite_throughput.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average": os.getloadavg(),
        "steps": args.steps,
        "copies": args.copies or {"default": list(OTHER_COPIES), **DEFAULT_COPIES},
        "repeats": args.repeats,
        "statistic": "median of repeats, wall clock",
        "jax": jax.__version__,
        "suites": versions,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", nargs="+", default=list(DEFAULT_IDS), help="prefixed ids")
    parser.add_argument(
        "--copies", nargs="+", type=int, default=None, help="copies (default: DEFAULT_COPIES)"
    )
    parser.add_argument("--steps", type=int, default=200, help="steps per copy per timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is kept")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    print(f"{'env':<38}{'copies':>7}{'jaxrl/s':>12}{'suite/s':>12}{'ratio':>9}")
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
