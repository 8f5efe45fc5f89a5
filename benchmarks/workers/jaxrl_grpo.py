"""jaxrl GRPO worker for benchmarks/grpo_step.py (runs in the project venv).

    python jaxrl_grpo.py '{"model_dir": DIR, "max_new_tokens": 8, "warmup": 3, "steps": 20}'

Runs jaxrl's GRPO (`jaxrl.algorithms.grpo`) for `warmup + steps` updates from the
weights in `model_dir` (the benchmark's tiny Llama, the same file TRL loads) and prints
ONE JSON line with per-step wall times, per-phase times, completion tokens, compile
times and XLA's FLOP count of the compiled learning step.

The step is the driver's staged step (`jaxrl/training/driver.py`, `_StagedStepper.run`)
on one agent, call for call: `prepare` (host: this update's prompts), the jitted
`collect` (sampling with the KV cache; results copied to the host; the trainer's
log-probs come from the loss's forward pass, see `rescoring_seconds`), `process` (host: decoding,
rewards, the learning batch) and the jitted `learn` (advantages, one AdamW step; its
metrics copied to the host). Both jitted phases are built as the driver builds them
(`driver.agents_fn` for one agent, the state donated) and compiled ahead of time, so the
timed steps contain no compilation; `compile_seconds` reports `init`, `collect` and
`learn` separately. `learn_flops` is XLA's cost analysis of the compiled `learn`,
loop-weighted as `jaxrl plan` does it (`_learn_flops`). Phases: `sampling` = prepare +
collect, `rewards` = process, `learning` = learn (the three add up to the step).

`rescoring_seconds` times, outside the step, a separate re-scoring pass over the
completions (`jaxrl.lm.token_logprobs` with entropies over the same tokens, jitted
alone). With one AdamW step per update `collect` skips it (`rescores_in_loss`: the
loss's forward pass provides those log-probs, as TRL does when it samples and learns
with the same weights), so it is the time that saves; otherwise it is part of `collect`.

`matmul_floor` (unless `"floor": false`): the matrix products of `collect` and `learn`,
each timed alone on this machine and summed with their trip counts
(`benchmarks/matmul_floor.py`): the time neither phase can go below with XLA's kernels
for these shapes. The decode loop's trip count is its bound, `max_new_tokens`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: matmul_floor


def grpo_config(max_new_tokens: int, updates: int, prompts: int = 8, group: int = 8) -> dict:
    """jaxrl's GRPOConfig fields for the benchmark: the tiny Llama (4 layers, hidden 128,
    MLP 256, 4 heads, 2 KV heads, character vocabulary), 8 prompts x 8 completions,
    one AdamW step per update, no KL term, temperature 1, exact-match reward."""
    return dict(
        task="addition",
        reward="correct",
        num_layers=4,
        hidden_size=128,
        mlp_size=256,
        num_heads=4,
        num_kv_heads=2,
        num_prompts=prompts,
        group_size=group,
        max_new_tokens=max_new_tokens,
        temperature=1.0,
        total_steps=prompts * group * updates,
        num_epochs=1,
        num_minibatches=1,
        micro_batches=1,
        kl_coef=0.0,
        advantage="grpo",
        loss_agg="seq_mean_token_mean",
        lr=2e-4,
        lr_schedule="constant",
        warmup=0.0,
        weight_decay=0.0,
        adam_b2=0.98,
        max_grad_norm=1.0,
    )


def _xla_flops(compiled) -> float | None:
    """`flops` of XLA's cost analysis of a compiled program (None if unavailable)."""
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0] if analysis else None
    return None if not analysis else float(analysis.get("flops", 0.0)) or None


def _learn_flops(compiled, jaxpr, matmul_cost) -> dict:
    """The learning step's FLOPs as `jaxrl plan` counts them: XLA's cost analysis (which
    counts a loop body once) scaled by the loop-weighted / once-counted matmul FLOPs of
    the step's jaxpr (`jaxrl.plan.matmul_cost`; here the loops are the length-1 epoch,
    minibatch and micro-batch scans and the vocabulary-chunk map of the log-probs)."""
    xla = _xla_flops(compiled)
    looped, once = matmul_cost(jaxpr, loops=True), matmul_cost(jaxpr, loops=False)
    scale = looped.flops / once.flops if once.flops else 1.0
    return {
        "learn_flops": None if xla is None else xla * scale,
        "learn_flops_xla": xla,
        "learn_matmul_flops": looped.flops,
        "learn_loops_exact": looped.exact,
    }


def main(args: dict) -> dict:
    import jax
    import numpy as np

    from jaxrl.algorithms.grpo.config import GRPOConfig
    from jaxrl.algorithms.grpo.train import GRPO
    from jaxrl.lm import from_pretrained, token_logprobs
    from jaxrl.plan import matmul_cost
    from jaxrl.training import driver

    warmup, steps = int(args["warmup"]), int(args["steps"])
    config = GRPOConfig(**grpo_config(int(args["max_new_tokens"]), warmup + steps))
    algo = GRPO(config)
    run = driver.RunConfig(seed=int(args.get("seed", 0)), progress=False)
    agents = driver.make_agents(algo, run)
    mesh = algo.make_mesh(None)
    _, params = from_pretrained(args["model_dir"])
    params = jax.device_get(params)

    compile_seconds = {}
    t0 = time.perf_counter()
    state, _ = driver.initial_state(algo, agents, mesh, params)
    jax.block_until_ready(state)
    compile_seconds["init"] = time.perf_counter() - t0
    host = algo.init_host_state(run.seed, agents.num_agents)

    inputs, host = algo.prepare(host)
    t0 = time.perf_counter()
    collect = (
        jax.jit(driver.agents_fn(algo.collect, 1), donate_argnums=0).lower(state, inputs).compile()
    )
    compile_seconds["collect"] = time.perf_counter() - t0
    state, collected = collect(state, inputs)
    collected = jax.tree.map(np.asarray, collected)
    batch, host, _ = algo.process(collected, host)
    learn_jaxpr = jax.make_jaxpr(driver.agents_fn(algo.learn, 1))(state, batch)
    t0 = time.perf_counter()
    learn = jax.jit(driver.agents_fn(algo.learn, 1), donate_argnums=0).lower(state, batch).compile()
    compile_seconds["learn"] = time.perf_counter() - t0
    state, metrics = learn(state, batch)
    jax.tree.map(np.asarray, metrics)

    phases = {"sampling": [], "rewards": [], "learning": []}
    step_seconds, tokens = [], []
    for i in range(warmup - 1 + steps):  # the compile pass above was warm-up step 1
        t0 = time.perf_counter()
        inputs, host = algo.prepare(host)
        state, collected = collect(state, inputs)
        collected = jax.tree.map(np.asarray, collected)  # host sync, as the driver does
        t1 = time.perf_counter()
        batch, host, _ = algo.process(collected, host)
        t2 = time.perf_counter()
        state, metrics = learn(state, jax.device_put(batch))
        metrics = jax.tree.map(np.asarray, metrics)  # host sync
        t3 = time.perf_counter()
        if i < warmup - 1:
            continue
        step_seconds.append(t3 - t0)
        phases["sampling"].append(t1 - t0)
        phases["rewards"].append(t2 - t1)
        phases["learning"].append(t3 - t2)
        tokens.append(int(collected["lengths"].sum()))

    # Re-scoring alone: the forward pass collect adds after sampling.
    c = algo.config
    rescore = jax.jit(
        lambda p, t, m: token_logprobs(
            algo.model,
            p,
            t,
            attention_mask=m,
            targets_start=algo.prompt_len,
            chunk_size=c.logprob_chunk,
            temperature=c.temperature,
            return_entropy=True,
        )
    )
    one = jax.tree.map(lambda x: x[0], state.params)
    seqs, mask = collected["tokens"][0], collected["mask"][0]
    jax.block_until_ready(rescore(one, seqs, mask))
    rescoring = []
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(rescore(one, seqs, mask))
        rescoring.append(time.perf_counter() - t0)

    floor = None
    if args.get("floor", True):
        from matmul_floor import matmul_floor

        collect_jaxpr = jax.make_jaxpr(driver.agents_fn(algo.collect, 1))(state, inputs)
        floor = {"learning": matmul_floor(learn_jaxpr), "collect": matmul_floor(collect_jaxpr)}

    return {
        "library": "jaxrl",
        "max_new_tokens": algo.max_new_tokens,
        "warmup": warmup,
        "steps": steps,
        "step_seconds": step_seconds,
        "phases": phases,
        "completion_tokens": tokens,
        "padded_completion_len": [algo.max_new_tokens] * steps,
        "prompt_len": algo.prompt_len,
        "compile_seconds": compile_seconds,
        **_learn_flops(learn, learn_jaxpr, matmul_cost),
        "collect_flops_xla": _xla_flops(collect),
        "rescoring_seconds": statistics.median(rescoring),
        "matmul_floor": floor,
        "rescores_in_loss": c.rescores_in_loss,
        "reward_mean": float(np.mean(batch["rewards"])),
        "params": int(sum(x.size for x in jax.tree.leaves(one))),
        "jax_backend": jax.default_backend(),
        "jax_devices": jax.device_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "versions": {"jax": jax.__version__},
        "pid": os.getpid(),
    }


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
