"""jaxrl GRPO worker for benchmarks/grpo_step.py (runs in the project venv).

    python jaxrl_grpo.py '{"model_dir": DIR, "max_new_tokens": 8, "warmup": 3, "steps": 20}'

Runs jaxrl's GRPO (`jaxrl.algorithms.grpo`) for `warmup + steps` updates from the
weights in `model_dir` (the benchmark's tiny Llama, the same file TRL loads) and prints
ONE JSON line with per-step wall times, per-phase times, completion tokens, compile
times and XLA's FLOP count of the compiled learning step.

The step is the driver's staged step (`jaxrl/training/steppers.py`, `StagedStepper.run`)
on one agent, call for call: `prepare` (host: this update's prompts), the jitted
`collect` (sampling with the KV cache; results copied to the host; the trainer's
log-probs come from the loss's forward pass, see `rescoring_seconds`), `process` (host: decoding,
rewards, the learning batch) and the jitted `learn` (advantages, one AdamW step; its
metrics copied to the host). Both jitted phases are compiled ahead of time by the
driver's own staged stepper (`steppers.StagedStepper`: its shardings, the state
donated), so the timed steps contain no compilation; `compile_seconds` reports
`init`, `collect` and `learn` separately. `learn_flops` is XLA's cost analysis of the
compiled `learn`, loop-weighted as `jaxrl plan` does it (`_learn_flops`). Phases:
`sampling` = prepare + collect, `rewards` = process, `learning` = learn (the three add
up to the step).

`rescoring_seconds` times, outside the step, a separate re-scoring pass over the
completions (`jaxrl.lm.token_logprobs` with entropies over the same tokens, jitted
alone). With one AdamW step per update `collect` skips it (`rescores_in_loss`: the
loss's forward pass provides those log-probs, as TRL does when it samples and learns
with the same weights), so it is the time that saves; otherwise it is part of `collect`.

`matmul_floor` (unless `"floor": false`): the matrix products of `collect` and `learn`,
each timed alone on this machine and summed with their trip counts
(`benchmarks/matmul_floor.py`): the time neither phase can go below with XLA's kernels
for these shapes. The decode loop's trip count is its bound, `max_new_tokens`. Not
reported on more than one device (the products are timed on one device).

Layout (`layout_label`; the default, 1 device and 1 micro-batch, is labelled `jaxrl`):

* `"cpu_devices": N` (default 1) splits this machine's CPU into N XLA devices
  (`--xla_force_host_platform_device_count`, set before jax is imported) and runs GRPO
  on an N-way `data` mesh, as `jaxrl train grpo` does on N devices: each device samples
  and learns on 64 / N of the rows and the gradients are averaged across devices
  (label `jaxrl-dN`).
* `"processes": P` (default 1) runs the worker as P JAX processes on this machine, each
  pinned to one core with one device (`launch_processes`: a multi-controller run over
  gloo, as on P hosts); rank 0 prints the line, and the re-scoring pass is not timed
  (label `jaxrl-pP`).
* `"micro_batches": M` (default 1): the update's gradient is accumulated over M slices
  of the rows (`GRPOConfig.micro_batches`; the same update, tests/algorithms/test_grpo.py)
  (label `jaxrl-mbM`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: matmul_floor

from _harness import minor_faults  # noqa: E402
from _layouts import layout_label  # noqa: E402

# The task and the model's context of each workload of benchmarks/grpo_step.py (`--workload`):
# the repetition task's prompts (up to 9 tokens with bos) and 256 new tokens fit in 272.
WORKLOADS = {
    "addition": {"task": "addition"},
    "skewed": {"task": "repeat", "context_len": 272},
}


def grpo_config(
    max_new_tokens: int,
    updates: int,
    prompts: int = 8,
    group: int = 8,
    micro_batches: int = 1,
    workload: str = "addition",
) -> dict:
    """jaxrl's GRPOConfig fields for the benchmark: the tiny Llama (4 layers, hidden 128,
    MLP 256, 4 heads, 2 KV heads, character vocabulary), 8 prompts x 8 completions,
    one AdamW step per update (its gradient accumulated over `micro_batches` slices of
    the rows: the same update, computed in pieces), no KL term, temperature 1,
    exact-match reward; the task and context of `workload` (`WORKLOADS`)."""
    return dict(
        **WORKLOADS[workload],
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
        micro_batches=micro_batches,
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


def _learn_flops(compiled, jaxpr, matmul_cost, devices: int = 1) -> dict:
    """The learning step's FLOPs as `jaxrl plan` counts them: XLA's cost analysis (which
    counts a loop body once) scaled by the loop-weighted / once-counted matmul FLOPs of
    the step's jaxpr (`jaxrl.plan.matmul_cost`; here the loops are the length-1 epoch,
    minibatch and micro-batch scans and the vocabulary-chunk map of the log-probs). On
    `devices` > 1 XLA's count is one device's share of the partitioned program, so it is
    multiplied by the device count (the jaxpr's count is the whole step's)."""
    xla = _xla_flops(compiled)
    xla = None if xla is None else xla * devices
    looped, once = matmul_cost(jaxpr, loops=True), matmul_cost(jaxpr, loops=False)
    scale = looped.flops / once.flops if once.flops else 1.0
    return {
        "learn_flops": None if xla is None else xla * scale,
        "learn_flops_xla": xla,
        "learn_matmul_flops": looped.flops,
        "learn_loops_exact": looped.exact,
    }


def launch_processes(args: dict, processes: int) -> dict:
    """Runs this worker as `processes` JAX processes on this machine (a multi-controller
    run, as on several hosts: `JAXRL_COORDINATOR` on a free local port, gloo
    collectives), each pinned to its own core; returns rank 0's result."""
    import socket
    import subprocess
    import tempfile

    with socket.socket() as sock:
        sock.bind(("localhost", 0))
        port = sock.getsockname()[1]
    # Each child writes to its own files, not pipes: waiting on rank 0 while rank 1
    # blocks on a full pipe would deadlock them in their next collective.
    with tempfile.TemporaryDirectory() as tmp:
        logs = Path(tmp)
        children = []
        for rank in range(processes):
            env = {
                **os.environ,
                "JAXRL_COORDINATOR": f"localhost:{port}",
                "JAXRL_NUM_PROCESSES": str(processes),
                "JAXRL_PROCESS_ID": str(rank),
            }
            with open(logs / f"{rank}.out", "w") as out, open(logs / f"{rank}.err", "w") as err:
                children.append(
                    subprocess.Popen(
                        [sys.executable, __file__, json.dumps(args)],
                        env=env,
                        stdout=out,
                        stderr=err,
                    )
                )
        codes = [child.wait() for child in children]
        for rank, code in enumerate(codes):
            if code != 0:
                err = (logs / f"{rank}.err").read_text()[-4000:]
                raise RuntimeError(f"process {rank} failed (exit {code}):\n{err}")
        stdout = (logs / "0.out").read_text()
    lines = [line for line in stdout.splitlines() if line.startswith('{"')]
    return json.loads(lines[-1])


def main(args: dict) -> dict:
    devices = int(args.get("cpu_devices", 1))
    processes = int(args.get("processes", 1))
    if processes > 1 and "JAXRL_PROCESS_ID" not in os.environ:
        return launch_processes(args, processes)
    if processes > 1:  # one core per process: XLA sizes its thread pools to the affinity
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[int(os.environ["JAXRL_PROCESS_ID"]) % len(cores)]})
    if devices > 1:  # before jax is imported: the host CPU split into `devices` XLA devices
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
        )
    import jax
    import numpy as np

    from jaxrl.algorithms.grpo.config import GRPOConfig
    from jaxrl.algorithms.grpo.train import GRPO
    from jaxrl.lm import from_pretrained, token_logprobs
    from jaxrl.plan import matmul_cost
    from jaxrl.training import driver, progress, steppers
    from jaxrl.training.mesh import initialize_distributed

    initialize_distributed()  # the JAXRL_* variables of a multi-process layout; else nothing

    warmup, steps = int(args["warmup"]), int(args["steps"])
    micro_batches = int(args.get("micro_batches", 1))
    config = GRPOConfig(
        **grpo_config(
            int(args["max_new_tokens"]),
            warmup + steps,
            micro_batches=micro_batches,
            workload=args.get("workload", "addition"),
        )
    )
    algo = GRPO(config)
    run = driver.RunConfig(seed=int(args.get("seed", 0)), progress=False)
    agents = driver.make_agents(algo, run)
    mesh = algo.make_mesh(None)  # every device of every process
    _, params = from_pretrained(args["model_dir"])
    params = jax.device_get(params)

    compile_seconds = {}
    t0 = time.perf_counter()
    state, shardings = driver.initial_state(algo, agents, mesh, params)
    jax.block_until_ready(state)
    compile_seconds["init"] = time.perf_counter() - t0
    host = algo.init_host_state(run.seed, agents.num_agents)
    # The driver's staged stepper compiles both phases (its shardings, state donated).
    stepper = steppers.StagedStepper(algo, agents.num_agents, mesh, shardings, progress.Clock())

    inputs, host = algo.prepare(host)
    stepper._compile_collect(state, inputs)
    compile_seconds["collect"] = stepper.compile_clock.last
    state, collected = stepper._collect(state, (inputs,))
    batch, host, _ = algo.process(collected, host)
    learn_jaxpr = jax.make_jaxpr(driver.agents_fn(algo.learn, 1))(state, batch)
    stepper._compile_learn(state, batch)
    compile_seconds["learn"] = stepper.compile_clock.last
    learn = stepper.learn_fn
    state, metrics = learn(state, jax.device_put(batch, stepper.batch_shardings))
    jax.tree.map(np.asarray, metrics)

    phases = {"sampling": [], "rewards": [], "learning": []}
    faults = {"sampling": [], "learning": []}  # minor page faults: fresh pages touched
    step_seconds, tokens = [], []
    for i in range(warmup - 1 + steps):  # the compile pass above was warm-up step 1
        t0, f0 = time.perf_counter(), minor_faults()
        inputs, host = algo.prepare(host)
        state, collected = stepper._collect(state, (inputs,))  # results on the host
        t1, f1 = time.perf_counter(), minor_faults()
        batch, host, _ = algo.process(collected, host)
        t2, f2 = time.perf_counter(), minor_faults()
        state, metrics = learn(state, jax.device_put(batch, stepper.batch_shardings))
        metrics = jax.tree.map(np.asarray, metrics)  # host sync
        t3, f3 = time.perf_counter(), minor_faults()
        if i < warmup - 1:
            continue
        faults["sampling"].append(f1 - f0)
        faults["learning"].append(f3 - f2)
        step_seconds.append(t3 - t0)
        phases["sampling"].append(t1 - t0)
        phases["rewards"].append(t2 - t1)
        phases["learning"].append(t3 - t2)
        tokens.append(int(collected["lengths"].sum()))

    # Re-scoring alone: the forward pass collect adds after sampling (one process).
    rescoring = None
    c = algo.config
    one = jax.tree.map(lambda x: x[0], jax.device_get(state.params))
    if processes == 1:
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
        seqs, mask = collected["tokens"][0], collected["mask"][0]
        jax.block_until_ready(rescore(one, seqs, mask))
        rescoring = []
        for _ in range(5):
            t0 = time.perf_counter()
            jax.block_until_ready(rescore(one, seqs, mask))
            rescoring.append(time.perf_counter() - t0)

    floor = None
    if args.get("floor", True) and jax.device_count() == 1:  # products timed on one device
        from matmul_floor import matmul_floor

        collect_jaxpr = jax.make_jaxpr(driver.agents_fn(algo.collect, 1))(state, inputs)
        floor = {"learning": matmul_floor(learn_jaxpr), "collect": matmul_floor(collect_jaxpr)}

    return {
        "library": layout_label("jaxrl", processes, devices, micro_batches),
        "cpu_devices": devices,
        "processes": processes,
        "micro_batches": micro_batches,
        "max_new_tokens": algo.max_new_tokens,
        "warmup": warmup,
        "steps": steps,
        "step_seconds": step_seconds,
        "phases": phases,
        "minor_faults": faults,
        "completion_tokens": tokens,
        "padded_completion_len": [algo.max_new_tokens] * steps,
        "prompt_len": algo.prompt_len,
        "compile_seconds": compile_seconds,
        **_learn_flops(learn, learn_jaxpr, matmul_cost, jax.device_count()),
        "collect_flops_xla": _xla_flops(stepper.collect_fn),
        "rescoring_seconds": None if rescoring is None else statistics.median(rescoring),
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
    result = main(json.loads(sys.argv[1]))
    if os.environ.get("JAXRL_PROCESS_ID", "0") == "0":  # one line, from rank 0
        print(json.dumps(result), flush=True)
