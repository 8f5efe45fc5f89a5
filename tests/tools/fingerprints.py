"""The `params_fingerprint` of a tiny two-seed run of every algorithm and main variant.

A refactor must keep every fingerprint bit-exact (same summation order, PRNG splits and
dtypes). Fingerprints depend on the CPU model, so they are compared between two
commits on one machine, not checked in:

    git worktree add /tmp/before <commit>; ln -s ../envs /tmp/before/jaxrl/envs
    PYTHONPATH=/tmp/before python tests/tools/fingerprints.py /tmp/before.json
    python tests/tools/fingerprints.py /tmp/after.json [case ...]

(the `jaxrl/envs` link lets `jaxrl.envs` import from the other tree.)

Each case is an algorithm, an environment (or None for a task) and config overrides
small enough to train in seconds, chosen so that the parameters move (the GRPO cases
add a length penalty, so that a random model's rewards differ within a group). The
offline learners' `dataset` is a `Random` recipe: uniformly random actions (seed 0),
written to a temporary directory with APIs older commits have too; `grpo-tool` starts
from an SFT warm start on the tool's demonstrations (`ToolWarmStart`), made the same way.
"""

import json
import pathlib
import sys
import tempfile
import time
from typing import NamedTuple

import jaxrl
from jaxrl import algorithms
from jaxrl.training.driver import RunConfig, train

LM = dict(
    digits=2,
    num_eval=8,
    num_layers=1,
    hidden_size=32,
    num_heads=2,
    num_kv_heads=2,
    mlp_size=64,
    eval_batch_size=32,
)
OFF = dict(
    total_steps=256,
    num_envs=2,
    train_frequency=4,
    gradient_steps=2,
    batch_size=16,
    buffer_size=128,
    learning_starts=64,
    hidden_sizes=(16,),
)
AC = dict(total_steps=96, batch_size=8, buffer_size=64, learning_starts=16, hidden_sizes=(16, 16))
DREAMER = dict(
    total_steps=64,
    num_envs=2,
    train_every=4,
    train_ratio=2.0,
    batch_size=2,
    batch_length=8,
    buffer_size=64,
    learning_starts=16,
    imagination_starts=8,
    horizon=3,
    num_bins=31,
    model_size="debug",
    transformer_window=4,
    transformer_heads=2,
)
# A random model's completions differ in length, so the length penalty gives every group
# rewards that differ and the policy moves (with "correct" alone, nothing would).
GRPO = dict(
    LM,
    num_prompts=4,
    group_size=4,
    total_steps=16 * 3,
    eval_samples=4,
    reward="correct+length:3:2",
)
# The multi-agent algorithms: four updates of 16 steps in 4 environments.
MARL = dict(total_steps=4 * 16 * 4, num_envs=4, num_steps=16, num_minibatches=2, hidden_sizes=(16,))
CASES = {
    "ppo": ("ppo", "CartPole-v1", dict(total_steps=4096, num_envs=4, num_steps=64)),
    "ppo-cont": (
        "ppo",
        "Pendulum-v1",
        dict(total_steps=2048, num_envs=4, num_steps=64, normalize_obs=True, normalize_reward=True),
    ),
    "ppo-rnn": (
        "ppo",
        "CartPole-v1",
        dict(total_steps=2048, num_envs=4, num_steps=32, recurrent=True, rnn_hidden_size=16),
    ),
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
    "ippo": ("ippo", "SimpleSpread-MPE", MARL),
    "ippo-rnn-separate": (
        "ippo",
        "SimpleSpread-MPE",
        {**MARL, "recurrent": True, "rnn_hidden_size": 8, "parameter_sharing": "separate"},
    ),
    "mappo": ("mappo", "SimpleSpread-MPE", MARL),
    "pqn-vdn": ("pqn-vdn", "SimpleSpread-MPE", MARL),
    "dqn": ("dqn", "CartPole-v1", OFF),
    "dqn-per-n3": ("dqn", "CartPole-v1", {**OFF, "prioritised": True, "n_step": 3}),
    "c51": ("c51", "CartPole-v1", {**OFF, "num_atoms": 11, "v_min": 0.0, "v_max": 20.0}),
    "sac": ("sac", "Pendulum-v1", AC),
    "td3": ("td3", "Pendulum-v1", AC),
    "dreamer-gru": ("dreamer", "CartPole-v1", DREAMER),
    "dreamer-ssm": ("dreamer", "CartPole-v1", {**DREAMER, "backbone": "ssm"}),
    "sft": (
        "sft",
        None,
        {
            **LM,
            "batch_size": 8,
            "total_steps": 8 * 6,
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
            **LM,
            "batch_size": 8,
            "total_steps": 8 * 3,
            "lr": 3e-3,
            "warmup": 0.0,
            "num_eval": 16,
            "eval_batch_size": 16,
        },
    ),
    "grpo": (
        "grpo",
        None,
        GRPO,
    ),
    "grpo-kl": (
        "grpo",
        None,
        {
            **GRPO,
            "kl_coef": 0.1,
            "ent_coef": 0.01,
            "advantage": "rloo",
            "loss_agg": "token_mean",
            "num_minibatches": 2,
            "num_epochs": 2,
        },
    ),
    # The sampler-learner mismatch and the host-side rollout options of lm_rollout.py:
    # a bfloat16 sampler with truncated IS, partial rollouts (completions cut at 2
    # tokens and carried on) and PRIME's implicit PRM.
    "grpo-bf16-tis": (
        "grpo",
        None,
        {**GRPO, "sampler_dtype": "bfloat16", "rollout_correction": "token_tis"},
    ),
    "grpo-partial": (
        "grpo",
        None,
        {
            **GRPO,
            "continuous_batching": True,
            "partial_rollouts": True,
            "rollout_token_budget": 2,
        },
    ),
    "grpo-implicit-prm": ("grpo", None, {**GRPO, "process_reward": "implicit"}),
    "grpo-guess": (
        "grpo",
        None,
        {
            "task": "guess",
            "max_number": 8,
            "num_eval": 8,
            "num_layers": 1,
            "hidden_size": 32,
            "num_heads": 2,
            "num_kv_heads": 2,
            "mlp_size": 64,
            "eval_batch_size": 32,
            "num_prompts": 4,
            "group_size": 4,
            "total_steps": 16 * 2,
            "eval_samples": 4,
            "ent_coef": 0.01,
        },
    ),
    # Multi-turn episodes whose turns hold tool calls (the turn's calls run together,
    # jaxrl/tools/runner.py's run_many): GRPO from an SFT warm start on the tool's
    # demonstrations (`ToolWarmStart`, below), so that the model's calls run; and
    # multi-turn PPO-LM.
    "grpo-tool": (
        "grpo",
        None,
        {
            "task": "tool_multiply",
            "digits": 2,
            "num_eval": 8,
            "num_prompts": 4,
            "group_size": 4,
            "total_steps": 16 * 3,
            "eval_samples": 4,
            "eval_batch_size": 32,
            "ent_coef": 0.01,
        },
    ),
    "ppo-lm-guess": (
        "ppo-lm",
        None,
        {
            **LM,
            "task": "guess",
            "max_number": 8,
            "num_prompts": 4,
            "group_size": 2,
            "total_steps": 8 * 2,
            "eval_samples": 4,
        },
    ),
    "ppo-lm": (
        "ppo-lm",
        None,
        {
            **LM,
            "num_prompts": 4,
            "group_size": 2,
            "total_steps": 8 * 3,
            "eval_samples": 4,
            "reward": "correct+length:3:2",
        },
    ),
}


class Random(NamedTuple):
    """An offline case's dataset: `steps` steps of uniformly random actions in
    `num_envs` copies of `env`, PRNG seed 0, the complete episodes."""

    env: str
    steps: int
    num_envs: int = 1

    def write(self, directory: pathlib.Path) -> str:
        import jax

        from jaxrl import datasets, envs
        from jaxrl.datasets import collect

        env, params = envs.make(self.env)
        policy, carry = collect.random_policy(env, params)
        data = collect.rollout(
            env, params, policy, carry, jax.random.key(0), self.steps, self.num_envs
        )
        data = data.with_metadata(env=self.env, random_return=-1200.0, expert_return=-150.0)
        return str(datasets.save(data, directory / f"{self.env}.npz"))


class ToolWarmStart(NamedTuple):
    """`grpo-tool`'s model: SFT on `tool_multiply:demos` (2 digits), long enough that
    most of its replies are calls the calculator runs; seed 0."""

    updates: int = 800

    def write(self, directory: pathlib.Path) -> str:
        run_dir = directory / "tool-sft"
        jaxrl.train(
            "sft", task="tool_multiply:demos", digits=2, num_eval=8, num_layers=2,
            hidden_size=128, num_heads=4, num_kv_heads=4, mlp_size=256, batch_size=32,
            total_steps=32 * self.updates, warmup=0.0, eval_batch_size=8,
            stop_at_train_accuracy=None, run_dir=str(run_dir), progress=False,
        )  # fmt: skip
        return str(run_dir / "model")


CASES["grpo-tool"][2]["model"] = ToolWarmStart()

OFFLINE = dict(total_steps=48, eval_interval=16, eval_episodes=1, batch_size=16, hidden_sizes=(16,))
PENDULUM = Random("Pendulum-v1", 400)
CARTPOLE = Random("CartPole-v1", 200, 2)
CASES.update(
    {
        name: (algo, env, dict(OFFLINE, dataset=data, **extra))
        for name, algo, env, data, extra in (
            ("iql", "iql", "Pendulum-v1", PENDULUM, {}),
            ("td3-bc", "td3-bc", "Pendulum-v1", PENDULUM, {}),
            ("rebrac", "rebrac", "Pendulum-v1", PENDULUM, {}),
            ("cql", "cql", "Pendulum-v1", PENDULUM, {"num_sampled_actions": 2}),
            ("sac-n", "sac-n", "Pendulum-v1", PENDULUM, {"num_critics": 3}),
            ("cql-discrete", "cql-discrete", "CartPole-v1", CARTPOLE, {}),
            ("bc", "bc", "CartPole-v1", CARTPOLE, {}),
            ("bc-cont", "bc", "Pendulum-v1", PENDULUM, {}),
        )
    }
)
CASES["rlpd"] = ("rlpd", "Pendulum-v1", dict(AC, dataset=PENDULUM, gradient_steps=2))

out = {}
names = sys.argv[2:] or list(CASES)
tmp = pathlib.Path(tempfile.mkdtemp())
for name in names:
    algo_name, env, over = CASES[name]
    over = {
        k: v.write(tmp) if isinstance(v, Random | ToolWarmStart) else v for k, v in over.items()
    }
    t = time.time()
    try:
        config = jaxrl.make_config(algo_name, env, **over)
        algo = algorithms.get(algo_name).make(config)
        res = train(algo, RunConfig(num_seeds=2, progress=False))
        out[name] = res.summary["params_fingerprint"]
    except Exception as err:  # noqa: BLE001 - report every case, then the failures
        out[name] = f"ERROR {type(err).__name__}: {err}"
    print(name, out[name], f"{time.time() - t:.0f}s", flush=True)
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
