"""Environment throughput: random-policy steps per second, jaxrl vs gymnax vs gymnasium.

    python benchmarks/env_throughput.py                       # everything, defaults
    python benchmarks/env_throughput.py --envs CartPole-v1 Breakout-MinAtar --copies 1 64

For every registered jaxrl environment and each number of parallel copies,
one jitted function resets `copies` environments and runs `--steps` steps in a
`lax.scan`, each step sampling uniform random actions for all copies and
`vmap`ping `env.step` (auto-reset included). The observation, state, summed
rewards and episode ends are carried, so nothing is dead code except `info`,
which a random policy does not read (for jaxrl environments with
`obs_from_state`, XLA then skips `info["final_observation"]`; gymnax computes
it either way, since its auto-reset selects between the two observations).
Compile time is excluded (compiled once, timed on fresh keys), results are
synchronised with `block_until_ready`, and the median of `--repeats` runs is
reported.

Baselines, in the same run:

* gymnax (environments it also has: classic control and the four MinAtar
  games), in its own virtualenv `benchmarks/.venvs/gymnax` (created on first
  use with the same jax version) through a worker process running this very
  file with `--worker`, so the loop code is identical. The worker stays up and
  each repeat times jaxrl then gymnax back to back, so machine load affects
  both alike. Actions are sampled by the same function for both libraries
  (`randint` for Discrete, `uniform(low, high)` for Box).
* gymnasium's `SyncVectorEnv` (classic control only), with
  `AutoresetMode.SAME_STEP` as ours, sampling `action_space.sample()`; up to
  `--gymnasium-max-copies` copies (larger cells are marked skipped).

Writes a table to stdout and JSON to `--out` (default
`benchmarks/results/env_throughput.json`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "env_throughput.json"
GYMNAX_VERSION = "1.0.1"
CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]
MINATAR = ["Breakout-MinAtar", "Asterix-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar"]
GYMNAX_IDS = set(CLASSIC + MINATAR)
GYMNASIUM_IDS = set(CLASSIC)


# ----------------------------------------------------------------------------- shared loop
# Used by both jaxrl and the gymnax worker: keep it free of jaxrl imports.


def make_sampler(space: Any) -> Callable[[jax.Array], jax.Array]:
    """Uniform random actions for a Discrete (`n`) or bounded Box (`low`/`high`) space."""
    if hasattr(space, "n"):
        n, dtype = int(space.n), getattr(space, "dtype", jnp.int32)
        return lambda key: jax.random.randint(key, (), 0, n, dtype=dtype)
    low = jnp.broadcast_to(jnp.asarray(space.low, jnp.float32), tuple(space.shape))
    high = jnp.broadcast_to(jnp.asarray(space.high, jnp.float32), tuple(space.shape))
    dtype = space.dtype
    return lambda key: jax.random.uniform(key, low.shape, minval=low, maxval=high).astype(dtype)


def build_rollout(env: Any, params: Any, copies: int, steps: int) -> Callable[[jax.Array], Any]:
    """A jitted `key -> final carry` running `copies` x `steps` random-policy steps.

    Actions and step keys for all steps are drawn up front, inside the timed
    function, in one vectorised call each: per-step PRNG calls (which XLA:CPU
    runs as small rolled loops) would otherwise dominate small batches and
    hide the environments' own cost.
    """
    sample = jax.vmap(jax.vmap(make_sampler(env.action_space(params))))
    reset = jax.vmap(env.reset, in_axes=(0, None))
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(key: jax.Array) -> Any:
        key_reset, key_act, key_step = jax.random.split(key, 3)
        obs, state = reset(jax.random.split(key_reset, copies), params)
        actions = sample(jax.random.split(key_act, (steps, copies)))
        step_keys = jax.random.split(key_step, (steps, copies))

        def body(carry: Any, xs: tuple[jax.Array, Any]) -> tuple[Any, None]:
            obs, state, returns, ends = carry
            keys, action = xs
            obs, state, reward, terminated, truncated, _ = step(keys, state, action, params)
            ends = ends + jnp.logical_or(terminated, truncated)
            return (obs, state, returns + reward, ends), None

        init = (obs, state, jnp.zeros(copies, jnp.float32), jnp.zeros(copies, jnp.int32))
        carry, _ = jax.lax.scan(body, init, (step_keys, actions))
        return carry

    return jax.jit(rollout)


class Timer:
    """Compiles rollouts once per (env, copies, steps) and times them."""

    def __init__(self, make_env: Callable[[str], tuple[Any, Any]]):
        self._make_env = make_env
        self._compiled: dict[tuple[str, int, int], Any] = {}
        self.compile_seconds: dict[tuple[str, int, int], float] = {}

    def seconds(self, env_id: str, copies: int, steps: int, seed: int) -> dict[str, float]:
        """Wall and process CPU time of one compiled rollout (compiling first if needed)."""
        config = (env_id, copies, steps)
        if config not in self._compiled:
            env, params = self._make_env(env_id)
            start = time.perf_counter()
            fn = build_rollout(env, params, copies, steps).lower(jax.random.key(0)).compile()
            jax.block_until_ready(fn(jax.random.key(0)))  # warm-up
            self.compile_seconds[config] = time.perf_counter() - start
            self._compiled[config] = fn
        fn = self._compiled[config]
        key = jax.random.key(seed)
        start, start_cpu = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(key))
        return {"wall": time.perf_counter() - start, "cpu": time.process_time() - start_cpu}


def _worker() -> None:
    """Gymnax side: reads JSON requests on stdin, answers JSON lines on stdout."""
    from importlib.metadata import version

    import gymnax

    timer = Timer(lambda env_id: gymnax.make(env_id))
    print(json.dumps({"gymnax": version("gymnax"), "jax": jax.__version__}))
    sys.stdout.flush()
    for line in sys.stdin:
        request = json.loads(line)
        try:
            config = (request["env"], request["copies"], request["steps"])
            seconds = timer.seconds(*config, seed=request["seed"])
            reply = {**seconds, "compile_seconds": timer.compile_seconds[config]}
        except Exception as err:  # reported back, the run goes on
            reply = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(reply))
        sys.stdout.flush()


# ----------------------------------------------------------------------------- baselines


class GymnaxWorker:
    """The gymnax worker process in its own venv."""

    def __init__(self) -> None:
        import jaxlib

        sys.path.insert(0, str(HERE))
        from _venvs import ensure_venv

        requirements = [
            f"gymnax=={GYMNAX_VERSION}",
            f"jax=={jax.__version__}",
            f"jaxlib=={jaxlib.__version__}",
            "six",  # imported by gymnax 1.0.1 but missing from its dependencies
        ]
        python = ensure_venv("gymnax", requirements)
        self._proc = subprocess.Popen(
            [str(python), str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,  # keep the project's packages off its path
        )
        self.info = self._read()

    def _read(self) -> dict[str, Any]:
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("gymnax worker exited")
        return json.loads(line)

    def seconds(self, env_id: str, copies: int, steps: int, seed: int) -> dict[str, Any]:
        """The worker's timing reply (`wall`, `cpu`, `compile_seconds`) or `error`."""
        request = {"env": env_id, "copies": copies, "steps": steps, "seed": seed}
        self._proc.stdin.write(json.dumps(request) + "\n")
        self._proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self._proc.stdin.close()
        self._proc.wait(timeout=60)


def gymnasium_steps_per_second(
    env_id: str, copies: int, steps: int, repeats: int, clock: str = "wall"
) -> float:
    """Median steps/s of gymnasium's SyncVectorEnv (SAME_STEP autoreset), random actions."""
    timer = time.perf_counter if clock == "wall" else time.process_time
    import gymnasium
    from gymnasium.vector import AutoresetMode

    venv = gymnasium.make_vec(
        env_id,
        num_envs=copies,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    venv.reset(seed=0)
    venv.action_space.seed(0)
    rates = []
    for _ in range(repeats):
        start = timer()
        for _ in range(steps):
            venv.step(venv.action_space.sample())
        rates.append(copies * steps / (timer() - start))
    venv.close()
    return statistics.median(rates)


# ----------------------------------------------------------------------------- main


def _available_envs(requested: list[str] | None) -> tuple[list[str], dict[str, str]]:
    from jaxrl import envs

    ids = requested or envs.registered()
    ok, missing = [], {}
    for env_id in ids:
        try:
            envs.make(env_id)
            ok.append(env_id)
        except (ImportError, ValueError) as err:
            missing[env_id] = f"{type(err).__name__}: {err}"
    return ok, missing


def _fmt_rate(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value >= 1e6:
        return f"{value / 1e6:.2f}M"
    return f"{value / 1e3:.1f}k"


def _fmt_ratio(ours: Any, theirs: Any) -> str:
    if isinstance(ours, str) or isinstance(theirs, str):
        return "-"
    return f"{ours / theirs:.2f}x"


def run(args: argparse.Namespace) -> dict[str, Any]:
    from jaxrl import envs

    env_ids, missing = _available_envs(args.envs)
    for env_id, reason in missing.items():
        print(f"[skip] {env_id}: {reason}", file=sys.stderr)
    ours = Timer(envs.make)
    gymnax = None
    if not args.no_gymnax and GYMNAX_IDS.intersection(env_ids):
        gymnax = GymnaxWorker()
    rows = []
    for env_id in env_ids:
        for copies in args.copies:
            row = _measure(env_id, copies, args, ours, gymnax)
            rows.append(row)
            _print_row(row)
    if gymnax is not None:
        gymnax.close()
    return {
        "meta": _meta(args, gymnax.info if gymnax else None),
        "unavailable": missing,
        "results": rows,
    }


def _rates(n: int, timings: list[dict[str, float]]) -> dict[str, float]:
    """Steps/s from the median wall and CPU time of the repeats."""
    return {clock: n / statistics.median(t[clock] for t in timings) for clock in ("wall", "cpu")}


def _measure(
    env_id: str, copies: int, args: argparse.Namespace, ours: Timer, gymnax: Any
) -> dict[str, Any]:
    """One table row: jaxrl and gymnax timed alternately, then gymnasium."""
    row: dict[str, Any] = {"env": env_id, "copies": copies, "steps": args.steps}
    in_gymnax = gymnax is not None and env_id in GYMNAX_IDS
    ours_t, gymnax_t = [], []
    for r in range(args.repeats):
        ours_t.append(ours.seconds(env_id, copies, args.steps, seed=r + 1))
        if in_gymnax:
            reply = gymnax.seconds(env_id, copies, args.steps, seed=r + 1)
            if "error" in reply:
                row["gymnax_error"], in_gymnax = reply["error"], False
            else:
                gymnax_t.append(reply)
                row["gymnax_compile_seconds"] = reply.pop("compile_seconds")
    n = copies * args.steps
    rates = _rates(n, ours_t)
    row["jaxrl_steps_per_s"] = rates[args.clock]
    row["jaxrl_steps_per_s_by_clock"] = rates
    row["jaxrl_compile_seconds"] = ours.compile_seconds[(env_id, copies, args.steps)]
    row["jaxrl_timings"] = ours_t
    if gymnax_t:
        rates = _rates(n, gymnax_t)
        row["gymnax_steps_per_s"] = rates[args.clock]
        row["gymnax_steps_per_s_by_clock"] = rates
        row["gymnax_timings"] = gymnax_t
        row["ratio_vs_gymnax"] = row["jaxrl_steps_per_s"] / row["gymnax_steps_per_s"]
    else:
        row["gymnax_steps_per_s"] = "n/a" if env_id not in GYMNAX_IDS else "skipped"
    if env_id in GYMNASIUM_IDS and not args.no_gymnasium and copies <= args.gymnasium_max_copies:
        rate = gymnasium_steps_per_second(env_id, copies, args.steps, args.repeats, args.clock)
        row["gymnasium_steps_per_s"] = rate
        row["ratio_vs_gymnasium"] = row["jaxrl_steps_per_s"] / rate
    else:
        row["gymnasium_steps_per_s"] = "n/a" if env_id not in GYMNASIUM_IDS else "skipped"
    return row


_HEADER = (
    f"{'env':<26}{'copies':>7}{'jaxrl/s':>10}{'gymnax/s':>10}{'ratio':>8}"
    f"{'gymnasium/s':>13}{'ratio':>9}"
)


def _print_row(row: dict[str, Any]) -> None:
    if not getattr(_print_row, "printed_header", False):
        print(_HEADER)
        print("-" * len(_HEADER))
        _print_row.printed_header = True  # type: ignore[attr-defined]
    ours = row["jaxrl_steps_per_s"]
    gx, gym = row["gymnax_steps_per_s"], row["gymnasium_steps_per_s"]
    print(
        f"{row['env']:<26}{row['copies']:>7}{_fmt_rate(ours):>10}{_fmt_rate(gx):>10}"
        f"{_fmt_ratio(ours, gx):>8}{_fmt_rate(gym):>13}{_fmt_ratio(ours, gym):>9}",
        flush=True,
    )


def _meta(args: argparse.Namespace, gymnax_info: dict[str, Any] | None) -> dict[str, Any]:
    try:
        import gymnasium

        gymnasium_version = gymnasium.__version__
    except ImportError:
        gymnasium_version = None
    return {
        "command": shlex.join(["python", "benchmarks/env_throughput.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_average": os.getloadavg(),  # 1, 5, 15 min: how busy the host was
        "steps": args.steps,
        "copies": args.copies,
        "repeats": args.repeats,
        "statistic": "median of repeats",
        "clock": args.clock,
        "note": args.note,
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "gymnax": gymnax_info,
        "gymnasium": gymnasium_version,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_count": __import__("os").cpu_count(),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", help="environment ids (default: all registered)")
    parser.add_argument("--copies", nargs="+", type=int, default=[1, 64, 2048])
    parser.add_argument("--steps", type=int, default=1000, help="steps per copy per timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the median is reported")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    parser.add_argument("--no-gymnax", action="store_true", help="skip the gymnax baseline")
    parser.add_argument("--no-gymnasium", action="store_true", help="skip the gymnasium baseline")
    parser.add_argument(
        "--gymnasium-max-copies", type=int, default=64, help="largest gymnasium batch to time"
    )
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="time the table reports: wall clock, or this process's CPU time (steadier on a "
        "loaded machine); the JSON records both",
    )
    parser.add_argument("--note", default="", help="free text stored in the JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        _worker()
        return
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
