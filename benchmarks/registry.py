"""Every published result, by name: what it measures, how to reproduce it, its budget.

A result is a learning result (a score per seed, reported as IQM with a 95% interval,
mean and std), a speed result (a benchmark script's measurement against its peer), or
a duration (how long a command takes here). `python -m benchmarks.reproduce` runs
entries and writes `benchmarks/results/<name>.json`; `benchmarks/docs.py` writes the
tables in README.md and docs/ from those files.

The learning tests (`tests/algorithms/*_learning.py`) read their budgets from here
(`get(name).overrides`), so a test's threshold and the published result are measured on
one configuration. Presets (`jaxrl/algorithms/*/config.py`) are the rest of it.

`minutes` is the wall time of the whole entry on this 2-core CPU: measured (at load 3-6,
so an upper bound) for the results measured so far, estimated for the others from their
lab notes; `--tier full` prints the sum before it starts.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

Kind = Literal["learning", "speed", "plan", "duration"]
Tier = Literal["ci", "full"]

# LM results: completions per update with GRPO's and PPO-LM's defaults (16 prompts x 8).
COMPLETIONS_PER_UPDATE = 16 * 8


@dataclasses.dataclass(frozen=True)
class Entry:
    """One published result.

    `runner` says how it is measured (benchmarks/reproduce.py's RUNNERS):
    * "env": `jaxrl.train(algorithm, env, num_seeds=seeds, seed=0, **overrides)`, the
      seeds vmapped in one program; the value per seed is `summary[metric]`'s entry.
    * "task": the same for a language-model algorithm on its task (no env).
    * "lm_pipeline": per seed s, the default SFT warm start (`jaxrl train sft --task
      addition`, seed s; or with `overrides["sft"]`, a dict of SFT fields), then
      `algorithm` from it with the other `overrides`, seed s; seeds are sequential. With
      `overrides["variants"]`, several runs from each warm start, compared with the
      `"baseline"` one (benchmarks/lm_pipeline.py); with `devices` N > 1, all of it in
      a subprocess with N emulated CPU devices.
    * "prm_pipeline": per seed s, an SFT warm start and a PRM from it (the value: the
      PRM's `metric`), or with a "grpo" stage two GRPO runs from the warm start too,
      outcome-only and with the PRM's step rewards for half the updates (the value: the
      second's held-out pass@1 minus the first's; the details also hold the second's
      pass@1 after each of its segments and its updates-to-threshold; `PRM_PIPELINE`,
      benchmarks/reproduce.py's `run_prm_pipeline`).
    * "offline": an offline learner on a dataset recipe of benchmarks/offline_datasets.py
      (`overrides["dataset"]`), seeds vmapped.
    * "offline_to_online": per seed s, an offline learner (`overrides["offline"]`) on the
      recipe's dataset, then `algorithm` online from its run (`init_from`); the value is
      the environment steps to the `overrides["reference"]` result's return
      (benchmarks/reproduce.py's `run_offline_to_online`).
    * "script": a benchmark script (`command`), its JSON kept whole under `raw`.
    * "pytest": the wall time of `command`.
    """

    name: str
    kind: Kind
    tier: Tier
    measures: str
    command: str
    minutes: float
    runner: str
    canary: str | None = None  # benchmarks/canaries.py's name; None: no algorithm
    algorithm: str | None = None
    env: str | None = None
    seeds: int = 0
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)
    config_file: str | None = None
    metric: str = "final_return_per_agent"
    unit: str = "return"
    peer: str | None = None
    test: str | None = None  # the test asserting a threshold on this configuration
    family: str | None = None  # README's row / the figure it belongs to
    label: str | None = None  # how a table names it (default: the environment)
    extra: str | None = None  # the optional extra (pyproject) it needs; checked before it runs
    devices: int = 1  # "lm_pipeline": CPU devices of the process that runs it (emulated)


def _env(
    name: str,
    algorithm: str,
    env: str,
    seeds: int,
    minutes: float,
    tier: Tier,
    test: str | None = None,
    **overrides: Any,
) -> Entry:
    steps = overrides.get("total_steps")
    budget = f" --total-steps {steps}" if steps else ""
    return Entry(
        name=name,
        kind="learning",
        tier=tier,
        measures=f"{algorithm} on {env}: final return (episodes ending in the last 10% of "
        "updates), per seed",
        command=f"jaxrl train {algorithm} --env {env} --num-seeds {seeds}{budget}",
        minutes=minutes,
        runner="env",
        canary=algorithm,
        algorithm=algorithm,
        env=env,
        seeds=seeds,
        overrides=overrides,
        test=test,
        family=algorithm,
    )


def _offline(
    name: str,
    algorithm: str,
    env: str,
    seeds: int,
    minutes: float,
    tier: Tier,
    dataset: str = "pendulum_medium_replay",
) -> Entry:
    """An offline learner on a generated dataset (`dataset` names the recipe of
    benchmarks/offline_datasets.py, which benchmarks/reproduce.py's "offline" runner
    writes first): the final evaluation's D4RL-normalised score per seed."""
    recipe = "" if dataset == "pendulum_medium_replay" else f" --recipe {dataset}"
    return Entry(
        name=name,
        kind="learning",
        tier=tier,
        measures=f"{algorithm} on {env} medium-replay (benchmarks/offline_datasets.py): "
        "normalised score (0 random, 100 the SAC expert) of 10 final evaluation episodes, "
        "per seed",
        command=f"python -m benchmarks.offline_datasets data --expert{recipe} && jaxrl train "
        f"{algorithm} --env {env} --dataset data/{dataset}.npz --num-seeds {seeds}",
        minutes=minutes,
        runner="offline",
        canary=algorithm,
        algorithm=algorithm,
        env=env,
        seeds=seeds,
        overrides={"dataset": dataset},
        metric="final_eval_normalized_score_per_agent",
        unit="score",
        test="test_offline_learning.py" if algorithm in ("iql", "td3-bc", "rebrac") else None,
        family="offline",
        label=f"{env.removesuffix('-v1')} medium-replay",
    )


def _speed(name: str, script: str, family: str | None, peer: str, measures: str) -> Entry:
    return Entry(
        name=name,
        kind="speed",
        tier="full",
        measures=measures,
        command=f"python benchmarks/{script}",
        minutes=30.0,
        runner="script",
        canary=family,
        peer=peer,
        family=family,
    )


# The process-reward pipeline (`grpo_prm_addition_steps`, benchmarks/reproduce.py's
# `prm_pipeline`): each stage's config overrides, the outcome-only run's updates (the
# step-rewarded run gets half) and the segments of the step-rewarded run (held-out
# pass@1 after each: its updates-to-threshold).
# Both GRPO runs at lr 5e-5: at GRPO's default (2e-4) the outcome-only run collapses on
# this task (held-out pass@1 near 0 on most seeds), which made a comparison against it
# meaningless (benchmarks/notes/2026-11-28-prm-baseline-lr.md).
PRM_PIPELINE: dict[str, Any] = {
    "sft": {"task": "addition_steps"},
    "prm": {"task": "addition_steps"},
    "grpo": {"task": "addition_steps", "lr": 5e-5},
    "updates": 400,
    "segments": 4,
}  # 3-digit; the 2-digit exploration behind it: benchmarks/notes/2026-11-28-process-rewards.md


ENTRIES: tuple[Entry, ...] = (
    # --- PPO: presets (jaxrl/algorithms/ppo/config.py)
    _env("ppo_cartpole", "ppo", "CartPole-v1", 5, 0.5, "ci"),
    _env("ppo_acrobot", "ppo", "Acrobot-v1", 5, 0.5, "ci", "test_ppo_learning.py"),
    dataclasses.replace(
        _env("ppo_pendulum", "ppo", "Pendulum-v1", 5, 1, "ci", "test_ppo_learning.py"),
        config_file="examples/pendulum.toml",
        command="jaxrl train ppo --env Pendulum-v1 --config examples/pendulum.toml --num-seeds 5",
    ),
    _env("ppo_cartpole_pomdp", "ppo", "CartPole-POMDP-v1", 5, 6.5, "full", "test_ppo_learning.py"),
    _env(
        "ppo_breakout",
        "ppo",
        "Breakout-MinAtar",
        5,
        7.5,
        "full",
        "test_ppo_learning.py",
        total_steps=1_000_000,
    ),
    # Recurrent PPO on Craftax-Classic (issue 35 item 4): the preset's budget (three seeds
    # in one program; the minutes predate its optimistic resets, which cut the time);
    # needs the craftax extra. Not measured yet. The side by side with the Craftax
    # baselines' ppo_rnn.py is `ppo_rnn_craftax_side_by_side` below.
    dataclasses.replace(
        _env(
            "ppo_rnn_craftax_classic", "ppo", "craftax:Craftax-Classic-Symbolic-v1", 3, 180, "full"
        ),
        peer="Craftax baselines' ppo_rnn.py, same budget and seeds, its own venv",
        label="Craftax-Classic-Symbolic (recurrent)",
    ),
    # The side by side: both libraries at 2 seeds x 1,048,576 steps (256
    # environments each), each seed a program of its own, one after the other; about half
    # an hour here for both. Needs the craftax extra (ours) and builds the baselines' venv
    # on first use (theirs).
    Entry(
        name="ppo_rnn_craftax_side_by_side",
        kind="speed",
        tier="full",
        measures="recurrent PPO on Craftax-Classic-Symbolic, 2 seeds x 1,048,576 environment "
        "steps, 256 environments: final return and environment steps per second",
        command="python benchmarks/craftax_side_by_side.py",
        minutes=30.0,
        runner="script",
        canary="ppo",
        peer="Craftax baselines' ppo_rnn.py (their repository, their own venv)",
        family="ppo",
        label="Craftax-Classic-Symbolic (recurrent), side by side",
    ),
    # --- value-based
    _env("pqn_cartpole", "pqn", "CartPole-v1", 8, 1, "ci", "test_pqn_learning.py"),
    _env(
        "pqn_breakout",
        "pqn",
        "Breakout-MinAtar",
        5,
        4.5,
        "full",
        "test_pqn_learning.py",
        total_steps=1_000_000,
    ),
    _env("dqn_cartpole", "dqn", "CartPole-v1", 5, 0.5, "ci", "test_dqn_learning.py"),
    _env(
        "dqn_breakout",
        "dqn",
        "Breakout-MinAtar",
        5,
        15,
        "full",
        "test_dqn_learning.py",
        total_steps=500_000,
    ),
    _env("c51_cartpole", "c51", "CartPole-v1", 5, 1, "ci", "test_dqn_learning.py"),
    # --- multi-agent on SimpleSpread-MPE (envs/multiagent/): the defaults (JaxMARL's
    # ippo_ff_mpe.yaml settings; PQN-VDN purejaxql's, scaled down), 1M environment steps.
    # The side-by-side with JaxMARL's own ippo_ff_mpe (2M steps) has no peer
    # script yet.
    _env(
        "ippo_simple_spread",
        "ippo",
        "SimpleSpread-MPE",
        5,
        5,
        "full",
        "test_multiagent_learning.py",
    ),
    _env(
        "mappo_simple_spread",
        "mappo",
        "SimpleSpread-MPE",
        5,
        5,
        "full",
        "test_multiagent_learning.py",
    ),
    _env(
        "pqn_vdn_simple_spread",
        "pqn-vdn",
        "SimpleSpread-MPE",
        5,
        5,
        "full",
        "test_multiagent_learning.py",
    ),
    # MAPPO against IPPO on SMAX's 3m (issue 35: MAPPO above IPPO or level with it), each
    # with its preset (JaxMARL's SMAX baseline settings for it, recurrent actors, 64
    # environments) at 2M steps per seed; the jaxmarl extra (run reproduce with a Python
    # that has it).
    *(
        dataclasses.replace(
            _env(f"{algorithm}_smax_3m", algorithm, "jaxmarl:SMAX-3m", 5, 40, "full"),
            extra="jaxmarl",
            label="SMAX 3m (jaxmarl)",
        )
        for algorithm in ("ippo", "mappo")
    ),
    # --- continuous off-policy: the preset (12k steps)
    _env("sac_pendulum", "sac", "Pendulum-v1", 5, 1.5, "ci", "test_continuous_learning.py"),
    _env("td3_pendulum", "td3", "Pendulum-v1", 5, 1.5, "ci", "test_continuous_learning.py"),
    # --- offline: the Pendulum preset on the medium-replay dataset of
    # benchmarks/offline_datasets.py (SAC stopped at 4k steps; SAC's full preset the expert)
    *(
        _offline(f"{name}_pendulum_medium_replay", algorithm, "Pendulum-v1", 5, minutes, tier)
        for name, algorithm, minutes, tier in (
            ("iql", "iql", 4, "ci"),
            ("td3_bc", "td3-bc", 4, "ci"),
            ("rebrac", "rebrac", 5, "ci"),
            # CQL samples 30 actions per state and SAC-N runs 5 critics: far slower here.
            ("cql", "cql", 60, "full"),
            ("sac_n", "sac-n", 20, "full"),
        )
    ),
    # --- offline on a locomotion task with contact dynamics (issue 34): Brax's Hopper
    # (positional backend) medium-replay of benchmarks/offline_datasets.py (SAC stopped at
    # HOPPER_MEDIUM_STEPS, the same run continued to HOPPER_EXPERT_STEPS the expert), each
    # learner's Hopper preset; the recipe's two SAC runs are part of each entry's minutes.
    *(
        dataclasses.replace(
            _offline(
                f"{name}_hopper_medium_replay",
                algorithm,
                "brax:hopper@positional",
                5,
                minutes,
                "full",
                dataset="hopper_medium_replay",
            ),
            extra="brax",
            test=None,
            label="Hopper (Brax) medium-replay",
        )
        for name, algorithm, minutes in (
            ("iql", "iql", 20),
            ("td3_bc", "td3-bc", 20),
            ("rebrac", "rebrac", 20),
        )
    ),
    # Discrete CQL against behaviour cloning on the same data (issue 34): the replay of a
    # DQN run on Breakout-MinAtar (benchmarks/offline_datasets.py, made in each entry by the
    # same seeded run), both learners' MinAtar presets (the same network and budget).
    *(
        dataclasses.replace(
            _offline(f"{name}_breakout_replay", algorithm, "Breakout-MinAtar", 5, minutes, "full"),
            measures=f"{algorithm} on Breakout-MinAtar, the whole replay of a DQN run "
            "(benchmarks/offline_datasets.py): normalised score (0 random, 100 the DQN run's "
            "greedy policy) of 10 final evaluation episodes, per seed; "
            f"compare {other}_breakout_replay, trained on the same data",
            command="python -m benchmarks.offline_datasets data --expert --recipe "
            f"breakout_dqn_replay && jaxrl train {algorithm} --env Breakout-MinAtar "
            "--dataset data/breakout_dqn_replay.npz --num-seeds 5",
            overrides={"dataset": "breakout_dqn_replay"},
            test=None,
            label=f"Breakout-MinAtar, DQN replay ({algorithm})",
        )
        for name, algorithm, other, minutes in (
            ("cql_discrete", "cql-discrete", "bc", 30),
            ("bc", "bc", "cql_discrete", 20),
        )
    ),
    dataclasses.replace(
        _offline("rlpd_pendulum_medium_replay", "rlpd", "Pendulum-v1", 5, 4, "ci"),
        measures="rlpd on Pendulum-v1 online with the medium-replay dataset "
        "(benchmarks/offline_datasets.py) mixed into every batch, half SAC's preset "
        "environment steps: final return (episodes ending in the last 10% of updates), "
        "per seed, against sac_pendulum",
        metric="final_return_per_agent",
        unit="return",
        test="test_rlpd.py",
        label="Pendulum, online + medium-replay",
    ),
    # --- offline to online (issue 34): ReBRAC's preset on the medium-replay dataset, then
    # RLPD from its networks with the dataset mixed in, for SAC's preset budget; the value
    # is when RLPD's return reaches sac_pendulum's (benchmarks/reproduce.py's runner).
    Entry(
        name="rlpd_from_rebrac_pendulum",
        label="Pendulum, RLPD from an offline ReBRAC run: steps to SAC's final return",
        kind="learning",
        tier="full",
        measures="per seed: rebrac (its Pendulum preset) on the medium-replay dataset "
        "(benchmarks/offline_datasets.py), then rlpd from that run (--init-from) with the "
        "dataset mixed in, SAC's preset budget of environment steps; the environment steps "
        "at which rlpd's return over the last 1,200 steps (the window of SAC's final return) "
        "first reaches sac_pendulum's IQM final return (target: at most half of SAC's 12,000; "
        "a seed that never does counts as 12,000)",
        command="python -m benchmarks.offline_datasets data --expert && jaxrl train rebrac "
        "--env Pendulum-v1 --dataset data/pendulum_medium_replay.npz --seed S --run-dir "
        "runs/rebrac-S && jaxrl train rlpd --env Pendulum-v1 --dataset "
        "data/pendulum_medium_replay.npz --init-from runs/rebrac-S --actor-layer-norm true "
        "--total-steps 12000 --buffer-size 12000 --learning-starts 128 --seed S",
        minutes=40,
        runner="offline_to_online",
        canary="rlpd-from-rebrac",
        algorithm="rlpd",
        env="Pendulum-v1",
        seeds=5,
        overrides={
            "dataset": "pendulum_medium_replay",
            "offline": {"algorithm": "rebrac"},
            "reference": "sac_pendulum",
            "total_steps": 12_000,
            "buffer_size": 12_000,
            # The warm-started policy acts from the start: random actions only until the
            # online half of a batch (128) can be drawn.
            "learning_starts": 128,
            "actor_layer_norm": True,
        },
        metric="steps_to_reference",
        unit="env steps",
        test="test_offline_to_online.py",
        family="offline",
    ),
    # --- Dreamer: presets (100k CartPole; 150k steps, size xs, on MinAtar); 3 seeds, one
    # run takes over 30 minutes here
    *(
        dataclasses.replace(
            _env(
                f"dreamer_cartpole_{backbone}",
                "dreamer",
                "CartPole-v1",
                3,
                120,
                "full",
                "test_dreamer_learning.py",
                **({"backbone": backbone} if backbone != "gru" else {}),
            ),
            command=f"jaxrl train dreamer --env CartPole-v1 --backbone {backbone} --num-seeds 3",
        )
        for backbone in ("gru", "transformer", "ssm")
    ),
    *(
        _env(
            f"dreamer_{game.lower()}",
            "dreamer",
            f"{game}-MinAtar",
            3,
            150,
            "full",
            "test_dreamer_learning.py" if game == "Breakout" else None,
        )
        for game in ("Breakout", "SpaceInvaders", "Asterix", "Freeway")
    ),
    # --- language models (3-digit addition)
    Entry(
        name="sft_addition_default",
        label="addition, the default warm start: held-out exact match",
        kind="learning",
        tier="ci",
        measures="SFT with every default (the warm start for RL, stopped at 0.3 running "
        "training accuracy): held-out greedy exact match, per seed",
        command="jaxrl train sft --task addition --num-seeds 5",
        minutes=3.5,
        runner="task",
        canary="sft",
        algorithm="sft",
        seeds=5,
        metric="eval_accuracy_per_agent",
        unit="exact match",
        family="sft",
    ),
    Entry(
        name="sft_addition_full",
        label="addition, the whole budget: held-out exact match",
        kind="learning",
        tier="full",
        measures="SFT trained for its whole budget (128k samples, no early stop): held-out "
        "greedy exact match, per seed",
        command="jaxrl train sft --task addition --stop-at-train-accuracy none --num-seeds 5",
        minutes=8,
        runner="task",
        canary="sft",
        algorithm="sft",
        seeds=5,
        overrides={"total_steps": 128_000, "stop_at_train_accuracy": None},
        metric="eval_accuracy_per_agent",
        unit="exact match",
        test="test_sft_learning.py",
        family="sft",
    ),
    Entry(
        name="dpo_addition",
        label="addition after the SFT warm start: held-out reward accuracy",
        kind="learning",
        tier="full",
        measures="DPO with its defaults after the default SFT warm start of the same seed: "
        "held-out reward accuracy per seed (and greedy exact match before and after)",
        command="jaxrl train sft --task addition --seed S --run-dir runs/sft-S && "
        "jaxrl train dpo --task addition --model runs/sft-S --seed S",
        minutes=4,
        runner="lm_pipeline",
        canary="dpo",
        algorithm="dpo",
        seeds=5,
        metric="eval_reward_accuracy",
        unit="reward accuracy",
        test="test_dpo_learning.py",
        family="dpo",
    ),
    Entry(
        name="rpo_addition",
        label="addition after the SFT warm start, DPO + NLL (RPO): held-out exact-match gain",
        kind="learning",
        tier="full",
        measures="DPO with its defaults plus RPO's chosen-completion NLL term (nll_weight "
        "1, Pang et al. 2024) after the default SFT warm start of the same seed: held-out "
        "greedy exact match gain (after - before) per seed; compare dpo_addition's details",
        command="jaxrl train sft --task addition --seed S --run-dir runs/sft-S && "
        "jaxrl train dpo --task addition --model runs/sft-S --seed S --nll-weight 1",
        minutes=4,
        runner="lm_pipeline",
        canary="dpo",
        algorithm="dpo",
        seeds=5,
        overrides={"nll_weight": 1.0},
        metric="eval_accuracy_gain",
        unit="exact-match gain",
        test="test_dpo_learning.py",
        family="dpo",
    ),
    Entry(
        name="grpo_addition",
        label="addition after the SFT warm start: held-out pass@1 gain",
        kind="learning",
        tier="full",
        measures="GRPO with every default (1,600 updates) after the default SFT warm start of "
        "the same seed: held-out pass@1 gain (after - before) per seed",
        command="jaxrl train sft --task addition --seed S --run-dir runs/sft-S && "
        "jaxrl train grpo --task addition --model runs/sft-S --seed S",
        minutes=35,
        runner="lm_pipeline",
        canary="grpo",
        algorithm="grpo",
        seeds=5,
        metric="pass@1_gain",
        unit="pass@1 gain",
        test="test_grpo_learning.py",
        family="grpo",
    ),
    # Issue 32's learning targets: asynchronous GRPO and a bfloat16 sampler against
    # synchronous float32 GRPO, from the warm starts of grpo_addition (the SFT stage on one
    # device, as grpo_addition's), with its 1,600 updates; per seed, the headline variant's
    # held-out pass@1 minus the baseline's (benchmarks/lm_pipeline.py, "variants").
    Entry(
        name="grpo_async_addition",
        label="addition, sampler 1 and 2 versions behind (2 devices): pass@1 minus "
        "synchronous GRPO's",
        kind="learning",
        tier="full",
        measures="GRPO with every default (1,600 updates) after the default SFT warm start "
        "of the same seed, on 2 emulated CPU devices: synchronous (both devices "
        "data-parallel) and asynchronous at staleness 1 and 2 (sampler on one device, "
        "learner on the other, token_tis correction); per seed, held-out pass@1 at "
        "staleness 2 minus synchronous (staleness 1 and the wall time to synchronous's "
        "final pass@1 in `variants`)",
        command="export XLA_FLAGS=--xla_force_host_platform_device_count=2; jaxrl train "
        "sft --task addition --num-devices 1 --seed S --run-dir runs/sft-S && jaxrl train "
        "grpo --task addition --model runs/sft-S --seed S, then the same with "
        "--async-staleness K --rollout-correction token_tis for K = 1, 2",
        minutes=40,
        runner="lm_pipeline",
        canary="grpo",
        algorithm="grpo",
        seeds=5,
        overrides={
            "sft": {"num_devices": 1},
            "variants": {
                "sync": {},
                "staleness_1": {"async_staleness": 1, "rollout_correction": "token_tis"},
                "staleness_2": {"async_staleness": 2, "rollout_correction": "token_tis"},
            },
            "baseline": "sync",
            "headline": "staleness_2",
        },
        metric="pass@1_difference",
        unit="pass@1 difference",
        family="grpo",
        devices=2,
    ),
    Entry(
        name="grpo_bf16_sampler_addition",
        label="addition, bfloat16 sampler with truncated IS: pass@1 minus float32 GRPO's",
        kind="learning",
        tier="full",
        measures="GRPO with every default (1,600 updates) after the default SFT warm start "
        "of the same seed: sampling in float32 (the learner's dtype), in bfloat16 with "
        "token-level truncated importance sampling (token_tis, cap 2), and in bfloat16 "
        "uncorrected; per seed, held-out pass@1 of bfloat16 + token_tis minus float32 "
        "(the uncorrected run and the mismatch metrics in `variants`)",
        command="jaxrl train sft --task addition --seed S --run-dir runs/sft-S && "
        "jaxrl train grpo --task addition --model runs/sft-S --seed S [--sampler-dtype "
        "bfloat16 [--rollout-correction token_tis]]",
        minutes=45,
        runner="lm_pipeline",
        canary="grpo",
        algorithm="grpo",
        seeds=5,
        overrides={
            "variants": {
                "float32": {},
                "bf16_token_tis": {"sampler_dtype": "bfloat16", "rollout_correction": "token_tis"},
                "bf16_uncorrected": {"sampler_dtype": "bfloat16"},
            },
            "baseline": "float32",
            "headline": "bf16_token_tis",
        },
        metric="pass@1_difference",
        unit="pass@1 difference",
        family="grpo",
    ),
    *(
        Entry(
            name=f"grpo_tool_multiply{suffix}",
            label=f"4 x 3-digit multiplication{label}, 200 updates after a short SFT: "
            "held-out pass@1",
            kind="learning",
            tier="full",
            measures=f"GRPO on `{task}` (200 updates of 16 prompts x 8) after 120 "
            f"SFT updates of 64 on `{sft_task}` (stop_at_train_accuracy off), same seed: "
            "held-out greedy pass@1 per seed (before and after in the details; "
            "train_seconds is GRPO's wall time, the target's 30 minutes)",
            command=f"jaxrl train sft --task {sft_task} --total-steps 7680 "
            "--stop-at-train-accuracy none --seed S --run-dir runs/sft-S && "
            f"jaxrl train grpo --task {task} --model runs/sft-S --total-steps 25600 --seed S",
            minutes=60,
            runner="lm_pipeline",
            canary="grpo",
            algorithm="grpo",
            seeds=5,
            overrides={
                "sft": {
                    "task": sft_task,
                    "total_steps": 120 * 64,
                    "stop_at_train_accuracy": None,
                },
                "task": task,
                "total_steps": 200 * 16 * 8,
            },
            metric="pass@1_after",
            unit="pass@1",
            test="test_tool_use.py",
            family="grpo",
        )
        for suffix, label, task, sft_task in (
            ("", " with a calculator", "tool_multiply", "tool_multiply:demos"),
            ("_no_tools", " without tools", "multiply", "multiply"),
        )
    ),
    Entry(
        name="ppo_lm_addition",
        label="addition after the SFT warm start, 800 updates: held-out pass@1 gain",
        kind="learning",
        tier="full",
        measures="PPO-LM with its defaults for 800 updates after the default SFT warm start "
        "of the same seed: held-out pass@1 gain (after - before) per seed",
        command="jaxrl train sft --task addition --seed S --run-dir runs/sft-S && "
        "jaxrl train ppo-lm --task addition --model runs/sft-S --seed S "
        f"--total-steps {800 * COMPLETIONS_PER_UPDATE}",
        minutes=25,
        runner="lm_pipeline",
        canary="ppo-lm",
        algorithm="ppo-lm",
        seeds=5,
        overrides={"total_steps": 800 * COMPLETIONS_PER_UPDATE},
        metric="pass@1_gain",
        unit="pass@1 gain",
        test="test_ppo_lm_learning.py",
        family="ppo-lm",
    ),
    # --- process rewards (step-by-step addition, `--task addition_steps`)
    Entry(
        name="prm_addition_steps",
        label="step-by-step addition: held-out step accuracy of a PRM",
        kind="learning",
        tier="full",
        measures="a process reward model with its defaults (3-digit addition_steps) from the "
        "SFT warm start of the same seed: held-out step accuracy (binary step labels), per seed",
        command="jaxrl train sft --task addition_steps --seed S --run-dir runs/sft-S && "
        "jaxrl train prm --model runs/sft-S --seed S",
        minutes=40,
        runner="prm_pipeline",
        canary="prm",
        algorithm="prm",
        seeds=5,
        overrides={"sft": PRM_PIPELINE["sft"], "prm": PRM_PIPELINE["prm"]},
        metric="eval_step_accuracy",
        unit="step accuracy",
        test="test_prm_learning.py",
        family="prm",
    ),
    Entry(
        name="grpo_prm_addition_steps",
        label="step-by-step addition: pass@1 of GRPO with PRM step rewards after half the "
        "updates, minus the outcome-only run's final pass@1",
        kind="learning",
        tier="full",
        measures="per seed: an SFT warm start on addition_steps, a PRM from it, then GRPO from "
        "the warm start twice, outcome reward only for `updates` updates and with the PRM's "
        "step rewards for half as many; the held-out pass@1 of the second minus the first's "
        "(>= 0: the step-rewarded run reached the outcome-only final pass@1 in at most half "
        "the updates); details: the second's pass@1 after each of its `segments` and its "
        "updates-to-threshold",
        command="jaxrl train sft --task addition_steps --seed S --run-dir runs/sft-S && "
        "jaxrl train prm --model runs/sft-S --seed S --run-dir runs/prm-S && "
        "jaxrl train grpo --task addition_steps --model runs/sft-S --seed S --lr 5e-5 "
        "--total-steps N && jaxrl train grpo --task addition_steps --model runs/sft-S "
        "--seed S --lr 5e-5 --process-reward runs/prm-S --total-steps N/2",
        minutes=100,
        runner="prm_pipeline",
        canary="prm",
        algorithm="grpo",
        seeds=5,
        overrides=PRM_PIPELINE,
        metric="pass@1_margin",
        unit="pass@1 gain over outcome-only",
        test="test_prm_learning.py",
        family="prm",
    ),
    # --- speed, against a peer (needs a quiet machine: load average below 1.5)
    _speed(
        "ppo_throughput",
        "ppo_throughput.py",
        "ppo",
        "rejax, Stable-Baselines3",
        "PPO on CartPole-v1, environment steps per second of training",
    ),
    _speed(
        "env_throughput",
        "env_throughput.py",
        None,
        "gymnax",
        "environment steps per second of every environment, vmapped copies",
    ),
    _speed(
        "suite_throughput",
        "suite_throughput.py",
        None,
        "each suite's own stepping (Craftax, Jumanji, XLand-MiniGrid, pgx, MuJoCo Playground)",
        "random-policy steps per second of the suite adapters against the suites' own "
        "auto-resetting programs, vmapped copies (needs the suites installed)",
    ),
    # Issue 35's side-by-side: IPPO on simple_spread at 2M steps and 5 seeds against
    # JaxMARL's own baselines/IPPO/ippo_ff_mpe.py (a checkout of its repository in
    # JAXMARL_REPO; its venv benchmarks/.venvs/jaxmarl).
    _speed(
        "marl_throughput",
        "marl_throughput.py",
        "ippo",
        "JaxMARL's baselines/IPPO/ippo_ff_mpe.py (its repository, jaxmarl 0.2.0), same steps "
        "and seeds",
        "IPPO on MPE simple_spread, 2M steps x 5 seeds: final return per agent and "
        "environment steps per second of training, jaxrl and JaxMARL side by side",
    ),
    # Issue 35's locomotion target: PPO on Playground's CheetahRun (MJX) against Brax's
    # own PPO trainer at the same batch, networks and budget (3 seeds x 4,915,200 steps,
    # one process per seed and library). Needs the playground and brax extras.
    dataclasses.replace(
        _speed(
            "locomotion_side_by_side",
            "locomotion_side_by_side.py",
            "ppo",
            "Brax's PPO trainer (brax.training.agents.ppo) with Playground's DM Control "
            "hyperparameters, same batch, networks and budget",
            "PPO on MuJoCo Playground's CheetahRun (MJX), 3 seeds x 4,915,200 steps: "
            "environment steps per second of training, deterministic final return and "
            "learning curves, jaxrl and Brax side by side",
        ),
        minutes=35.0,
        extra="playground",
        label="CheetahRun (MuJoCo Playground), side by side",
    ),
    _speed(
        "offpolicy_throughput",
        "offpolicy_throughput.py",
        "sac",
        "rejax, sbx, Stable-Baselines3",
        "DQN on CartPole-v1 and SAC on Pendulum-v1, environment steps per second",
    ),
    _speed(
        "offline_throughput",
        "offline_throughput.py",
        None,
        "d3rlpy 2.8.1 (PyTorch, CPU)",
        "gradient steps per second of IQL, TD3+BC and CQL on one Pendulum dataset, same "
        "networks and batch, at 1 and 16 seeds",
    ),
    _speed(
        "agent_execution",
        "agent_execution.py",
        "sac",
        "vmap against map (jaxrl's two agent executions)",
        "environment steps per second of 16 agents, batched or one after another",
    ),
    _speed(
        "dreamer_throughput",
        "dreamer_throughput.py",
        "dreamer",
        "danijar/dreamerv3",
        "seconds per Dreamer training step on matched workloads",
    ),
    _speed(
        "grpo_step",
        "grpo_step.py",
        "grpo",
        "TRL",
        "seconds per GRPO step (sample, score, learn) on 3-digit addition",
    ),
    _speed(
        "multiturn_update",
        "multiturn_update.py",
        "grpo",
        "the same update without KV-cache reuse across turns",
        "seconds per multi-turn GRPO update on guess, with and without KV-cache reuse",
    ),
    _speed(
        "lm_sampling",
        "lm_sampling.py",
        None,
        "Hugging Face transformers",
        "tokens per second of KV-cached sampling",
    ),
    _speed(
        "continuous_batching",
        "lm_sampling.py --workload skewed",
        None,
        "the static sampler (generate) on the same queue",
        "completion tokens per second of continuous batching on a length-skewed queue",
    ),
    _speed(
        "sandbox_overhead",
        "sandbox_overhead.py --before 59f81fc --n 40",
        None,
        "the sandbox before issue 30 (commit 59f81fc)",
        "seconds per sandboxed program, one at a time and in a batch of 16, per mode",
    ),
    _speed(
        "tool_batch",
        "tool_batch.py",
        None,
        "the same turn's calls one after another (ToolUse.step row by row)",
        "host seconds per turn of 128 multi-turn episodes whose replies are tool calls "
        "(calculator, search, a waiting tool; sandboxed Python on 16), the calls concurrent",
    ),
    # --- plans: what `jaxrl plan` prints for TPU slices (needs libtpu: benchmarks/plan_tpu.py)
    Entry(
        name="plan_tpu",
        kind="plan",
        tier="full",
        measures=(
            "per-device memory, FLOPs and roofline of GRPO steps planned for v5e slices "
            "(Llama-3-8B- and Qwen3-0.6B-shaped), and the planner's wall time, CPU and RSS"
        ),
        command="python benchmarks/plan_tpu.py",
        minutes=40.0,
        runner="script",
        peer="none (the compiler's figures; the planner's cost on this CPU)",
    ),
    Entry(
        name="ppo_rnn_craftax_memory",
        kind="plan",
        tier="full",
        measures=(
            "recurrent PPO on Craftax-Classic-Symbolic (its preset): bytes per environment of "
            "the GRU carry, the environment's state, one update's rollout, and the growth of "
            "the compiled update's temporaries (XLA's memory analysis at two sizes)"
        ),
        command="python benchmarks/ppo_rnn_memory.py",
        minutes=5.0,
        runner="script",
        peer="none (the compiler's figures)",
    ),
    # --- durations
    Entry(
        name="default_suite_duration",
        kind="duration",
        tier="full",
        measures="wall time of the default test suite (`pytest`, two workers)",
        command="pytest",
        minutes=15,
        runner="pytest",
    ),
)


def names() -> list[str]:
    """Every result's name, in registry order."""
    return [e.name for e in ENTRIES]


def get(name: str) -> Entry:
    """The entry called `name` (KeyError naming the known ones otherwise)."""
    for entry in ENTRIES:
        if entry.name == name:
            return entry
    raise KeyError(f"unknown result {name!r}; known: {', '.join(names())}")


def tier(which: Tier) -> list[Entry]:
    """The entries of a tier: "ci" (minutes in all) or "full" (every entry)."""
    return [e for e in ENTRIES if which == "full" or e.tier == "ci"]
