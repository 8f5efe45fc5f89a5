"""The offline datasets of the published offline results and of the offline learning
tests, written by a deterministic recipe (fixed seeds) from runs trained here.

Pendulum medium-replay (D4RL's recipe, Fu et al. 2020, sec. 5): SAC with its Pendulum
preset, stopped after `medium_steps` environment steps; its whole replay buffer (every
transition it collected, random warm-up included) is the dataset. The expert is SAC
trained for the preset's full budget; its deterministic mean return over 10 episodes is
the normalised score's 100, uniformly random actions' the 0 (`jaxrl.datasets.collect`).

Breakout-MinAtar DQN replay (as the DQN Replay Dataset of Agarwal, Schuurmans & Norouzi
2020, which CQL's Atari experiments subsample, Kumar et al. 2020, sec. 6.2): DQN with its
MinAtar preset for `BREAKOUT_STEPS` environment steps, its buffer as large as the run, so
every transition it collected (epsilon-greedy, from random to its final policy) is in
the dataset; the same run's greedy policy is the expert (the normalised score's 100).

Hopper medium-replay (D4RL's recipe on Brax's Hopper, `HOPPER_ENV`; needs the brax
extra): SAC with `HOPPER_SAC` for `HOPPER_MEDIUM_STEPS` environment steps, its whole
replay buffer the dataset; the expert is the same run continued (resumed from a copy) to
`HOPPER_EXPERT_STEPS`, smaller than D4RL's 1M-step expert so that the recipe runs in
minutes here (normalised scores are relative to this expert). D4RL stops its medium run
at about a third of the expert's return; `HOPPER_MEDIUM_STEPS` is where this run is
there (docs/offline.md), and the dataset's metadata records the medium policy's return
(`medium_return`, deterministic, as the expert's).

    python -m benchmarks.offline_datasets OUT_DIR [--expert] [--recipe NAME]
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import shutil
import sys
from typing import Any

import jax

from jaxrl import config as cfg
from jaxrl import datasets
from jaxrl.algorithms import get
from jaxrl.datasets import collect
from jaxrl.training.driver import RunConfig, train

MEDIUM_STEPS = 4_000
"""SAC's environment steps on Pendulum before its buffer becomes the dataset (20
episodes: the warm-up's random ones, then a policy on its way to medium)."""

REFERENCE_EPISODES = 10


BREAKOUT_STEPS = 200_000
"""DQN's environment steps on Breakout-MinAtar (16 environments; the replay buffer holds
all of them): a policy on its way, as D4RL's medium-replay, in minutes here."""


def breakout_dqn_replay(directory: str | pathlib.Path, expert: bool = True) -> pathlib.Path:
    """Writes `breakout_dqn_replay.npz` in `directory` from one DQN run (see above); with
    `expert`, its metadata has the run's greedy return as the normalised score's 100."""
    directory = pathlib.Path(directory)
    entry = get("dqn")
    config = cfg.replace(
        entry.default_config("Breakout-MinAtar"),
        total_steps=BREAKOUT_STEPS,
        buffer_size=BREAKOUT_STEPS,
    )
    run_dir = directory / "dqn"
    train(entry.make(config), RunConfig(run_dir=str(run_dir), seed=0, progress=False))
    data = collect.collect(
        [f"replay:{run_dir}"],
        steps=1,
        expert=str(run_dir) if expert else None,
        reference_episodes=REFERENCE_EPISODES,
    )
    return datasets.save(data, directory / "breakout_dqn_replay.npz")


def sac_run(run_dir: pathlib.Path, total_steps: int | None, seed: int = 0) -> pathlib.Path:
    """One SAC agent on Pendulum with the preset, `total_steps` (None: the preset's)."""
    entry = get("sac")
    overrides = {} if total_steps is None else {"total_steps": total_steps}
    config = cfg.replace(entry.default_config("Pendulum-v1"), **overrides)
    if total_steps is not None:
        config = cfg.replace(config, buffer_size=max(config.buffer_size, total_steps))
    train(entry.make(config), RunConfig(run_dir=str(run_dir), seed=seed, progress=False))
    return run_dir


def pendulum_medium_replay(directory: str | pathlib.Path, expert: bool = True) -> pathlib.Path:
    """Writes `pendulum_medium_replay.npz` in `directory` (runs in subfolders); with
    `expert`, its metadata has the expert's return (another SAC run, the full preset)."""
    directory = pathlib.Path(directory)
    medium = sac_run(directory / "sac_medium", MEDIUM_STEPS)
    expert_dir = sac_run(directory / "sac_expert", None) if expert else None
    data = collect.collect(
        [f"replay:{medium}"],
        steps=1,
        expert=None if expert_dir is None else str(expert_dir),
        reference_episodes=REFERENCE_EPISODES,
    )
    return datasets.save(data, directory / "pendulum_medium_replay.npz")


HOPPER_ENV = "brax:hopper@positional"
"""Brax's Hopper through jaxrl's adapter on its `positional` backend, the fastest on this
CPU of those that run it (benchmarks/brax_backends.py; docs/offline.md says why)."""

HOPPER_SAC: dict[str, Any] = {
    "hidden_sizes": (128, 128),
    "num_envs": 4,
    "gradient_steps": 2,
    "learning_starts": 5_000,
}
"""SAC's fields for Hopper, sized for this 2-core CPU: its defaults (learning rates 3e-4,
batches of 256, Polyak 0.005, autotuned temperature) with 128-unit layers (the paper's
256 cost about four times as much per gradient step here) and four environments stepped
together with two gradient steps per four environment steps (an update-to-data ratio of
0.5, where the paper has 1: the gradient steps are what this CPU pays for, the
environment steps are cheap); CleanRL's 5k random warm-up steps. The replay buffer holds
the whole run."""

HOPPER_MEDIUM_STEPS = 12_000
"""SAC's environment steps on Hopper before its buffer becomes the dataset."""

HOPPER_EXPERT_STEPS = 120_000
"""The expert: the medium run continued to this many environment steps."""


def missing_extra(recipe: str) -> str | None:
    """One line naming the extra `recipe` needs when this Python lacks it, else None."""
    extra = RECIPE_EXTRAS.get(recipe)
    if extra is None or importlib.util.find_spec(extra) is not None:
        return None
    return f"the {recipe} recipe needs the {extra} extra: pip install 'jaxrl[{extra}]'"


def sac_hopper(run_dir: pathlib.Path, total_steps: int, buffer_size: int, resume: bool) -> None:
    """SAC with `HOPPER_SAC` on `HOPPER_ENV` for `total_steps` (seed 0); with `resume`,
    continues the run in `run_dir` to `total_steps`."""
    entry = get("sac")
    config = cfg.replace(
        entry.default_config(HOPPER_ENV),
        **HOPPER_SAC,
        total_steps=total_steps,
        buffer_size=buffer_size,
    )
    run = RunConfig(run_dir=str(run_dir), seed=0, progress=False, resume=resume)
    train(entry.make(config), run)


def hopper_medium_replay(
    directory: str | pathlib.Path,
    expert: bool = True,
    medium_steps: int = HOPPER_MEDIUM_STEPS,
    expert_steps: int = HOPPER_EXPERT_STEPS,
) -> pathlib.Path:
    """Writes `hopper_medium_replay.npz` in `directory` (runs in subfolders): the replay of
    SAC's first `medium_steps` steps; with `expert`, its metadata has the expert's return
    (the run continued to `expert_steps`). Needs brax (`pip install 'jaxrl[brax]'`)."""
    if expert and expert_steps <= medium_steps:
        raise cfg.ConfigError(
            f"invalid expert_steps={expert_steps}: must be more than medium_steps="
            f"{medium_steps} (the expert continues the medium run)"
        )
    problem = missing_extra("hopper_medium_replay")
    if problem is not None:
        raise ImportError(problem)
    directory = pathlib.Path(directory)
    medium = directory / "sac_medium"
    buffer_size = max(medium_steps, expert_steps)  # the medium run's buffer keeps every step
    sac_hopper(medium, medium_steps, buffer_size, resume=False)
    expert_dir = None
    if expert:
        expert_dir = directory / "sac_expert"
        shutil.copytree(medium, expert_dir)
        sac_hopper(expert_dir, expert_steps, buffer_size, resume=True)
    data = collect.collect(
        [f"replay:{medium}"],
        steps=1,
        expert=None if expert_dir is None else str(expert_dir),
        reference_episodes=REFERENCE_EPISODES,
    )
    # Where the medium run stopped, on the expert's scale (D4RL's medium: about a third).
    data = data.with_metadata(medium_return=policy_return(medium))
    return datasets.save(data, directory / "hopper_medium_replay.npz")


def policy_return(run_dir: pathlib.Path) -> float:
    """Mean return of `REFERENCE_EPISODES` fresh episodes of a run's deterministic policy
    (how `collect` measures the expert's)."""
    algo, policy, carry = collect.run_policy(str(run_dir), deterministic=True)
    key = jax.random.key(1)
    return collect.reference_return(
        algo.env, algo.env_params, policy, carry, key, REFERENCE_EPISODES
    )


RECIPES = {
    "pendulum_medium_replay": pendulum_medium_replay,
    "breakout_dqn_replay": breakout_dqn_replay,
    "hopper_medium_replay": hopper_medium_replay,
}

RECIPE_EXTRAS = {"hopper_medium_replay": "brax"}
"""The optional extra (pyproject) a recipe needs; checked before anything runs."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--expert", action="store_true", help="record the expert reference too")
    parser.add_argument(
        "--recipe", choices=sorted(RECIPES), default="pendulum_medium_replay", help="the dataset"
    )
    args = parser.parse_args(argv)
    problem = missing_extra(args.recipe)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    path = RECIPES[args.recipe](args.out_dir, expert=args.expert)
    print(datasets.summary(datasets.load(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
