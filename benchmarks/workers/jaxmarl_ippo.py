"""JaxMARL's own IPPO worker for benchmarks/marl_throughput.py (runs in the jaxmarl peer
venv: jaxmarl, distrax, pyyaml; see benchmarks/_harness.py's JAXMARL_REQUIREMENTS).

    python jaxmarl_ippo.py '{"repo": "/path/to/JaxMARL", "seeds": 5, "total_steps": 2000000}'

Runs `make_train` of JaxMARL's `baselines/IPPO/ippo_ff_mpe.py` from a checkout of its
repository (`repo`; the baselines are not in the jaxmarl package) with its own
`config/ippo_ff_mpe.yaml`, only `TOTAL_TIMESTEPS`, `NUM_SEEDS` and `SEED` replaced: the
seeds vmapped in one program, as its `main` does (`jax.vmap` of the jitted `train`).
The script imports hydra, omegaconf and wandb at module level but uses them only in
`main` and in the per-update `wandb.log` callback, which its config disables
(`WANDB_MODE: disabled`); they are stand-ins here (`wandb.log` does nothing), so the
per-update host callback still runs as in the original.

Compilation (`lower().compile()`) is timed apart from training; steps/s = environment
steps of all seeds / training seconds. Returns: its `MPELogWrapper` logs each agent's
return times the number of agents ("as per on-policy codebase"), so
`final_return_per_seed` is that divided by the number of agents (each agent's own
return, what jaxrl reports), averaged over the episodes that ended in the last 10% of
updates; `logged_return_per_seed` keeps its own number.

Prints ONE JSON line on stdout.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types
from pathlib import Path


def _stand_ins() -> None:
    """Modules the baseline imports but does not use in `make_train` (see the docstring)."""
    hydra = types.ModuleType("hydra")
    hydra.main = lambda **_: lambda fn: fn
    omegaconf = types.ModuleType("omegaconf")
    omegaconf.OmegaConf = types.SimpleNamespace(to_container=lambda c: c)
    wandb = types.ModuleType("wandb")
    wandb.log = lambda *_, **__: None
    wandb.init = lambda *_, **__: None
    for module in (hydra, omegaconf, wandb):
        sys.modules.setdefault(module.__name__, module)


def load_baseline(repo: Path) -> tuple[types.ModuleType, dict]:
    """JaxMARL's `ippo_ff_mpe` module and its yaml config, from a checkout at `repo`."""
    import yaml

    script = repo / "baselines" / "IPPO" / "ippo_ff_mpe.py"
    config_file = repo / "baselines" / "IPPO" / "config" / "ippo_ff_mpe.yaml"
    if not script.is_file() or not config_file.is_file():
        raise FileNotFoundError(
            f"no JaxMARL checkout at {repo}: {script} and {config_file} are needed "
            "(git clone https://github.com/FLAIROx/JaxMARL)"
        )
    _stand_ins()
    spec = importlib.util.spec_from_file_location("ippo_ff_mpe", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, yaml.safe_load(config_file.read_text())


def main(args: dict) -> dict:
    import jax
    import jaxmarl
    import numpy as np

    module, config = load_baseline(Path(args["repo"]))
    seeds, seed = int(args.get("seeds", 1)), int(args.get("seed", 0))
    config.update(TOTAL_TIMESTEPS=int(args["total_steps"]), NUM_SEEDS=seeds, SEED=seed)
    rngs = jax.random.split(jax.random.PRNGKey(seed), seeds)
    start = time.perf_counter()
    train = jax.jit(jax.vmap(module.make_train(config))).lower(rngs).compile()
    compile_seconds = time.perf_counter() - start
    start = time.perf_counter()
    out = jax.block_until_ready(train(rngs))
    train_seconds = time.perf_counter() - start

    metrics = out["metrics"]
    logged = np.asarray(metrics["returned_episode_returns"])  # (seeds, updates, steps, actors)
    ended = np.asarray(metrics["returned_episode"]).astype(bool)
    updates = logged.shape[1]
    tail = slice(updates - max(1, updates // 10), updates)
    per_seed = [float(logged[s, tail][ended[s, tail]].mean()) for s in range(seeds)]
    num_agents = jaxmarl.make(config["ENV_NAME"], **config["ENV_KWARGS"]).num_agents
    steps = updates * config["NUM_STEPS"] * config["NUM_ENVS"]
    return {
        "library": "jaxmarl",
        "jaxmarl_version": jaxmarl.__version__ if hasattr(jaxmarl, "__version__") else None,
        "jax_version": jax.__version__,
        "seeds": seeds,
        "total_steps": steps,
        "num_updates": updates,
        "compile_seconds": compile_seconds,
        "train_seconds": train_seconds,
        "steps_per_second": steps * seeds / train_seconds,
        "final_return_per_seed": [r / num_agents for r in per_seed],
        "logged_return_per_seed": per_seed,
        "config": config,
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
