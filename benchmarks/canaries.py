"""Canaries: the first updates' metrics of a tiny fixed run of each algorithm.

A results file is a claim about the code at the commit that measured it. Each one
records the canary of its algorithm (`CANARIES[name]`): the logged metrics of the
last `UPDATES` updates of a run of a few updates, small enough to train in seconds. When a
change moves an algorithm's numbers (a loss, an initialiser, a PRNG split, a default),
its canary moves too, and tests/benchmarks/test_canaries.py names every results file
measured before the change: rerun those (`python -m benchmarks.reproduce --only NAME`),
do not loosen the test.

What is compared is `compare`'s tolerance: `|new - old| <= ATOL + RTOL * |old|` per
number. Why RTOL = 1e-4 and ATOL = 1e-6: the same code on another x86 CPU rounds
differently (XLA CPU picks its vector width from the CPU: AVX2 on one EPYC, AVX-512 on
another, and sums in another order). Emulated here by capping XLA's instruction set
(`XLA_FLAGS=--xla_cpu_max_isa=AVX2` and `=SSE4_2` against AVX-512 on this EPYC), every
canary number of the first updates moved by at most the relative amount recorded in
`benchmarks/notes/2026-11-27-canary-tolerance.md` (below 1e-5), while any change to an
algorithm moves them by far more (a changed learning rate or seed: 1e-3 and above).
Reruns on one machine are bit-exact (tests/tools/fingerprints.py relies on it), so the
tolerance only absorbs the CPU type.

The configurations are those of tests/tools/fingerprints.py, with one seed and a log
row per update.

An offline learner's run needs a dataset file, and one trained from an offline run's
checkpoint needs that run: a canary's overrides may hold a `TinyDataset` (written by
`compute` into a temporary directory from uniformly random actions, seed 0: nothing is
downloaded, and the same code writes the same file) or a `TinyRun` (another canary's
configuration trained into that directory first), which `compute` replaces by the
file's or the run's path.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import tempfile
from typing import Any

UPDATES = 3  # the last of a few updates' rows: early enough to stay near bit-exact across CPUs
RTOL = 1e-4
ATOL = 1e-6

# Keys of a metrics row that measure time, not learning.
TIMING = {
    "seconds",
    "steps_per_second",
    "sample_seconds",
    "learn_seconds",
    "sample_tokens_per_second",
    "learn_tokens_per_second",
    "tokens_per_second",
}

_LM = dict(
    digits=2,
    num_eval=8,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    eval_batch_size=32,
)
_OFF = dict(
    total_steps=40,  # 5 updates of 8 steps
    num_envs=2,
    train_frequency=4,
    gradient_steps=2,
    batch_size=16,
    buffer_size=128,
    learning_starts=8,  # gradient steps from the first update on
    hidden_sizes=(16,),
)
_AC = dict(
    total_steps=12, batch_size=8, buffer_size=64, learning_starts=8, hidden_sizes=(16, 16)
)  # one environment step per update: the last updates learn


@dataclasses.dataclass(frozen=True)
class TinyDataset:
    """A canary's dataset: `steps` steps of uniformly random actions in `num_envs` copies
    of `env` (PRNG seed 0), their complete episodes (`jaxrl.datasets.collect.rollout`),
    with reference returns 0 and 100 in the metadata, so that the normalised score is
    logged and equals the return: it rounds as the return does across CPUs (realistic
    references put a random policy's score near 0, where the relative tolerance is thin;
    benchmarks/notes/2026-11-27-canary-tolerance.md)."""

    env: str
    steps: int
    num_envs: int = 1
    random_return: float = 0.0
    expert_return: float = 100.0

    def write(self, directory: pathlib.Path) -> str:
        """Writes the dataset as `<env>-random.npz` in `directory` (unless it is there);
        returns its path."""
        path = directory / f"{self.env}-random.npz"
        if path.exists():
            return str(path)
        import jax

        from jaxrl import datasets, envs
        from jaxrl.datasets import collect

        env, params = envs.make(self.env)
        policy, carry = collect.random_policy(env, params)
        data = collect.rollout(
            env, params, policy, carry, jax.random.key(0), self.steps, self.num_envs
        )
        data = data.with_metadata(
            env=self.env, random_return=self.random_return, expert_return=self.expert_return
        )
        return str(datasets.save(data, path))


@dataclasses.dataclass(frozen=True)
class TinyRun:
    """Another canary's run (its configuration, one seed, seed 0), trained first: its
    directory is the value (rlpd's `init_from`)."""

    canary: str


# Offline learners: four updates of 8 gradient steps, one evaluation episode each, on 400
# random Pendulum steps (two episodes) or 400 random CartPole steps.
_OFFLINE = dict(
    total_steps=32, eval_interval=8, eval_episodes=1, batch_size=16, hidden_sizes=(16, 16)
)
PENDULUM_DATA = TinyDataset("Pendulum-v1", 400)
CARTPOLE_DATA = TinyDataset("CartPole-v1", 200, num_envs=2)

# The multi-agent algorithms (three updates of 16 steps in 4 environments).
_MARL = dict(num_envs=4, num_steps=16, num_minibatches=2, hidden_sizes=(16,))

# name -> (algorithm, env or None for a task, config overrides)
CANARIES: dict[str, tuple[str, str | None, dict[str, Any]]] = {
    "ppo": ("ppo", "CartPole-v1", dict(total_steps=768, num_envs=4, num_steps=64)),
    **{
        name: (name, "SimpleSpread-MPE", dict(_MARL, total_steps=4 * 16 * 3))
        for name in ("ippo", "mappo", "pqn-vdn")
    },
    "pqn": (
        "pqn",
        "CartPole-v1",
        dict(
            num_envs=4,
            num_steps=16,
            num_epochs=2,
            num_minibatches=4,
            hidden_sizes=(32, 32),
            total_steps=4 * 16 * 3,
        ),
    ),
    "dqn": ("dqn", "CartPole-v1", _OFF),
    "c51": ("c51", "CartPole-v1", {**_OFF, "num_atoms": 11, "v_min": 0.0, "v_max": 20.0}),
    "sac": ("sac", "Pendulum-v1", _AC),
    "td3": ("td3", "Pendulum-v1", _AC),
    # Offline learners, each on the tiny random dataset of its action space.
    **{
        name: (name, "Pendulum-v1", dict(_OFFLINE, dataset=PENDULUM_DATA, **extra))
        for name, extra in (
            ("iql", {}),
            ("td3-bc", {}),
            ("rebrac", {}),
            ("cql", {"num_sampled_actions": 2}),
            ("sac-n", {"num_critics": 3}),
        )
    },
    **{
        name: (name, "CartPole-v1", dict(_OFFLINE, dataset=CARTPOLE_DATA))
        for name in ("cql-discrete", "bc")
    },
    # RLPD online with the dataset mixed in; and fine-tuning from the rebrac canary's
    # run (the offline-to-online chain: both learners' code moves its numbers).
    "rlpd": ("rlpd", "Pendulum-v1", dict(_AC, dataset=PENDULUM_DATA, gradient_steps=2)),
    "rlpd-from-rebrac": (
        "rlpd",
        "Pendulum-v1",
        dict(
            _AC,
            dataset=PENDULUM_DATA,
            gradient_steps=2,
            init_from=TinyRun("rebrac"),
            actor_layer_norm=True,
        ),
    ),
    "dreamer": (
        "dreamer",
        "CartPole-v1",
        dict(
            total_steps=64,
            num_envs=2,
            train_every=4,
            train_ratio=2.0,
            batch_size=2,
            batch_length=8,
            buffer_size=64,
            learning_starts=16,  # learning from update 2 on
            imagination_starts=8,
            horizon=3,
            num_bins=31,
            model_size="debug",
        ),
    ),
    "sft": (
        "sft",
        None,
        {
            **_LM,
            "batch_size": 8,
            "total_steps": 8 * UPDATES,
            "lr": 3e-3,
            "warmup": 0.0,
            "lr_schedule": "constant",
            "stop_at_train_accuracy": None,
            "num_eval": 16,
            "eval_batch_size": 16,
        },
    ),
    "dpo": (
        "dpo",
        None,
        {
            **_LM,
            "batch_size": 8,
            "total_steps": 8 * UPDATES,
            "lr": 3e-3,
            "warmup": 0.0,
            "num_eval": 16,
            "eval_batch_size": 16,
        },
    ),
    "prm": (
        "prm",
        None,
        {
            **_LM,
            "task": "addition_steps",
            "digits": 1,
            "batch_size": 8,
            "total_steps": 8 * UPDATES,
            "lr": 3e-3,
            "warmup": 0.0,
            "num_eval": 16,
            "eval_batch_size": 16,
        },
    ),
    "grpo": (
        "grpo",
        None,
        dict(
            _LM,
            num_prompts=4,
            group_size=4,
            total_steps=16 * UPDATES,
            eval_samples=4,
            reward="correct+length:3:2",
        ),
    ),
    "ppo-lm": (
        "ppo-lm",
        None,
        dict(
            _LM,
            num_prompts=4,
            group_size=2,
            total_steps=8 * UPDATES,
            eval_samples=4,
            reward="correct+length:3:2",
        ),
    ),
}


def _numbers(value: Any) -> list[float]:
    """A metric's per-agent value as a flat list of floats."""
    if isinstance(value, list | tuple):
        return [x for v in value for x in _numbers(v)]
    return [math.nan if value is None else float(value)]  # None: no episode ended yet


def compute(name: str) -> dict[str, list[list[float]]]:
    """The canary `name`: metric -> one list of numbers per logged update, for the last
    `UPDATES` updates of its tiny run of a few updates (one seed, seed 0)."""
    with tempfile.TemporaryDirectory() as tmp:
        rows = _train(name, pathlib.Path(tmp)).metrics[-UPDATES:]
    keys = sorted({k for row in rows for k in row} - TIMING - {"update"})
    return {k: [_numbers(row[k]) for row in rows if k in row] for k in keys}


def _train(name: str, directory: pathlib.Path, run_dir: str | None = None) -> Any:
    """The canary's run (one seed, seed 0, a log row per update), its `TinyDataset` and
    `TinyRun` overrides made in `directory` first."""
    import jaxrl

    algorithm, env, overrides = CANARIES[name]
    made = {}
    for field, value in overrides.items():
        if isinstance(value, TinyDataset):
            value = value.write(directory)
        elif isinstance(value, TinyRun):
            run = str(directory / f"run-{value.canary}")
            _train(value.canary, directory, run_dir=run)
            value = run
        made[field] = value
    kwargs = {"env": env} if env else {}
    if run_dir is not None:
        kwargs["run_dir"] = run_dir
    return jaxrl.train(
        algorithm, num_seeds=1, seed=0, progress=False, log_every=1, **kwargs, **made
    )


def close(new: float, old: float) -> bool:
    """Whether two canary numbers agree within the CPU-to-CPU rounding tolerance."""
    if math.isnan(old) or math.isnan(new):
        return math.isnan(old) and math.isnan(new)
    return abs(new - old) <= ATOL + RTOL * abs(old)


def compare(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    """The differences between a recomputed canary and a recorded one, as short lines
    (empty when they agree)."""
    problems = []
    if sorted(new) != sorted(old):
        problems.append(f"metrics differ: {sorted(set(new) ^ set(old))}")
    for key in sorted(set(new) & set(old)):
        a, b = new[key], old[key]
        if [len(r) for r in a] != [len(r) for r in b]:
            problems.append(f"{key}: shape {[len(r) for r in a]} != {[len(r) for r in b]}")
            continue
        for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
            for x, y in zip(ra, rb, strict=True):
                if not close(x, y):
                    problems.append(f"{key}[update {i + 1}]: {x!r} != recorded {y!r}")
                    break
    return problems
