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

    python -m benchmarks.offline_datasets OUT_DIR [--expert] [--recipe breakout_dqn_replay]
"""

from __future__ import annotations

import argparse
import pathlib

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


RECIPES = {
    "pendulum_medium_replay": pendulum_medium_replay,
    "breakout_dqn_replay": breakout_dqn_replay,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--expert", action="store_true", help="record the expert reference too")
    parser.add_argument(
        "--recipe", choices=sorted(RECIPES), default="pendulum_medium_replay", help="the dataset"
    )
    args = parser.parse_args(argv)
    path = RECIPES[args.recipe](args.out_dir, expert=args.expert)
    print(datasets.summary(datasets.load(path)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
