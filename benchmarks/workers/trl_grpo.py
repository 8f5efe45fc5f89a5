"""TRL GRPOTrainer worker for benchmarks/grpo_step.py (runs in benchmarks/.venvs/trl).

    python trl_grpo.py '{"model_dir": DIR, "prompts": FILE, "max_new_tokens": 8,
                         "warmup": 3, "steps": 20, "threads": 2, "seed": 0}'

Trains TRL's `GRPOTrainer` (torch CPU, float32) for `warmup + steps` steps on the model
in `model_dir` (Hugging Face layout, written by the benchmark from jaxrl's weights) and
the prompts in `prompts` (JSON list of [prompt, answer]), then prints ONE JSON line:

    {"library": "trl", "max_new_tokens": 8, "step_seconds": [...], "phases": {...},
     "completion_tokens": [...], "learn_flops": ..., ...}

Configuration (`grpo_config`): 8 prompts x 8 completions per step
(`per_device_train_batch_size=64`, `num_generations=8`), one optimiser step per
generation (`gradient_accumulation_steps=1`, `num_iterations=1`, so TRL computes no
separate old log-probs), `beta=0` (no reference model), temperature 1 with no top-k /
top-p, `loss_type="grpo"`, float32 (`bf16=False`) and no gradient checkpointing (TRL's
GRPO defaults are bf16 and checkpointing on; jaxrl's run is float32 without remat),
AdamW at a constant learning rate. The reward is exact match after stripping, the same
test as jaxrl's addition task (`jaxrl.tasks.base.exact_match`).

Timing: a step is the wall time between consecutive `on_step_end` callbacks (the whole
Trainer step: prompts from the dataloader, generation, rewards, advantages, forward,
backward, optimiser); the first `warmup` steps are excluded. Phases, by wrapping the
trainer's own methods: `sampling` = `_generate` (prompt tokenisation,
`model.generate`, decoding), `rewards` = `_calculate_rewards`, `advantages_batch` = the
rest of `_generate_and_score_completions` (padding, advantages, metrics), `learning` =
the rest of the step (forward, backward, optimiser step, Trainer bookkeeping).

FLOPs: in the first warm-up step, torch's own `FlopCounterMode` counts the learning
part of `training_step` (the loss forward and the backward; generation runs outside
the counter), with the padded sequence length of that step. The benchmark uses it as a
check only: the counter has no entry for torch's CPU attention kernel, so it misses
attention's FLOPs. The counted pass covers all of the process's rows even with
micro-batches: the model is not yet in training mode when the worker prepares its
inputs, so TRL's `_prepare_inputs` takes its evaluation path (one batch, no split).

Data-parallel (`torchrun --nproc_per_node N trl_grpo.py ARGS`): each process generates
and learns on 64 / N rows (TRL's global batch is per-device x processes) and DDP
averages the gradients; the phases are rank 0's, the completion tokens the sum over
ranks, and rank 0 alone prints the line (labelled `trl-pN`). Give each process
`threads` = cores / N. `"micro_batches": M` (default 1): one generation of all rows,
then M accumulated backward passes and one optimiser step
(`gradient_accumulation_steps = steps_per_generation = M`, so still no separate old
log-probs; labelled `trl-mbM`).

Keep this file free of jaxrl imports: it runs in another virtualenv.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from _layouts import layout_label  # stdlib only, beside this file


def grpo_config(args: dict, output_dir: str):
    """TRL's GRPOConfig for the benchmark (see the module docstring)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        # Data-parallel under torchrun: each of WORLD_SIZE processes generates and learns
        # on its share of the rows (TRL's global batch is per-device x processes).
        # With `micro_batches` M, one generation of all rows feeds M accumulated backward
        # passes and one optimiser step (steps_per_generation = M).
        per_device_train_batch_size=args["prompts_per_step"]
        * args["group_size"]
        // (_world() * _micro_batches(args)),
        ddp_find_unused_parameters=False,  # every parameter gets a gradient
        num_generations=args["group_size"],
        gradient_accumulation_steps=_micro_batches(args),
        steps_per_generation=_micro_batches(args),
        num_iterations=1,
        max_completion_length=args["max_new_tokens"],
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="group",
        epsilon=0.2,
        learning_rate=args.get("lr", 2e-4),
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-8,
        max_grad_norm=1.0,
        max_steps=args["warmup"] + args["steps"],
        logging_steps=args["warmup"] + args["steps"],
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        seed=args.get("seed", 0),
        dataloader_num_workers=0,
        log_completions=False,
    )


def _micro_batches(args: dict) -> int:
    """Backward passes accumulated into each optimiser step (default 1)."""
    return int(args.get("micro_batches", 1))


def _world() -> int:
    """Processes of this run: torchrun's WORLD_SIZE, 1 without it."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def _gather_tokens(clock: dict) -> None:
    """Under torchrun, replaces this process's completion-token counts with the sum over
    all processes (each sampled its share of the rows) and the padded lengths with the
    maximum, step by step; a no-op in a single process."""
    if _world() == 1:
        return
    import torch.distributed as dist

    gathered = [None] * _world()
    dist.all_gather_object(gathered, (clock["completion_tokens"], clock["padded_completion_len"]))
    clock["completion_tokens"] = [sum(t) for t in zip(*(g[0] for g in gathered), strict=True)]
    clock["padded_completion_len"] = [max(n) for n in zip(*(g[1] for g in gathered), strict=True)]


def exact_match_reward(completions, answer, **kwargs) -> list[float]:
    """1.0 when the completion equals the answer once whitespace is stripped, else 0.0
    (jaxrl's addition reward, `jaxrl.tasks.base.exact_match`)."""
    return [float(c.strip() == a.strip()) for c, a in zip(completions, answer, strict=True)]


def main(args: dict) -> dict:
    import numpy as np
    import torch
    import transformers
    import trl
    from datasets import Dataset
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback

    threads = int(args.get("threads", 2))
    torch.set_num_threads(threads)
    torch.manual_seed(int(args.get("seed", 0)))
    model_dir = args["model_dir"]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)

    # Same weights and tokens as jaxrl: prompt ids and logits against the benchmark's.
    with open(args["prompts"]) as f:
        examples = json.load(f)
    check = np.load(args["check_logits"])
    ids = tokenizer([examples[0][0]])["input_ids"][0]
    if ids != args["check_ids"]:
        raise RuntimeError(f"TRL's prompt ids {ids} differ from jaxrl's {args['check_ids']}")
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0].numpy()
    logits_diff = float(np.abs(logits - check).max())

    dataset = Dataset.from_list([{"prompt": p, "answer": a} for p, a in examples])
    clock: dict[str, list] = {
        "step_end": [],
        "sampling": [],
        "rewards": [],
        "generate_and_score": [],
        "completion_tokens": [],
        "padded_completion_len": [],
    }

    class StepClock(TrainerCallback):
        def on_step_end(self, *_, **__):
            clock["step_end"].append(time.perf_counter())

    with tempfile.TemporaryDirectory() as out:
        trainer = trl.GRPOTrainer(
            model=model,
            reward_funcs=exact_match_reward,
            args=grpo_config(args, out),
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[StepClock()],
        )

        def timed(name, fn, after=None):
            def wrapper(*a, **kw):
                t0 = time.perf_counter()
                result = fn(*a, **kw)
                clock[name].append(time.perf_counter() - t0)
                if after is not None:
                    after(result)
                return result

            return wrapper

        def count_tokens(result):
            completion_ids = result[1]
            lengths = [len(c) for c in completion_ids]
            clock["completion_tokens"].append(sum(lengths))
            clock["padded_completion_len"].append(max(lengths))

        trainer._generate = timed("sampling", trainer._generate, count_tokens)
        trainer._calculate_rewards = timed("rewards", trainer._calculate_rewards)
        trainer._generate_and_score_completions = timed(
            "generate_and_score", trainer._generate_and_score_completions
        )

        # FLOPs of one learning step (first warm-up step): generate outside the counter,
        # then run training_step with _prepare_inputs as the identity, under the counter.
        flops = {}
        training_step = trainer.training_step

        def counted_training_step(model, inputs, num_items_in_batch=None):
            if flops:
                return training_step(model, inputs, num_items_in_batch)
            prepare = trainer._prepare_inputs
            prepared = prepare(inputs)
            trainer._prepare_inputs = lambda batch: batch
            try:
                with FlopCounterMode(display=False) as counter:
                    out = training_step(model, prepared, num_items_in_batch)
            finally:
                trainer._prepare_inputs = prepare
            flops["learn_flops"] = int(counter.get_total_flops())
            flops["padded_completion_len_counted"] = int(prepared["completion_ids"].shape[1])
            flops["prompt_len"] = int(prepared["prompt_ids"].shape[1])
            return out

        trainer.training_step = counted_training_step
        t0 = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - t0

    _gather_tokens(clock)
    warmup, steps = int(args["warmup"]), int(args["steps"])
    ends = clock["step_end"]
    if len(ends) != warmup + steps:
        raise RuntimeError(f"expected {warmup + steps} steps, saw {len(ends)}")
    step_seconds = [b - a for a, b in zip(ends[warmup - 1 : -1], ends[warmup:], strict=True)]
    measured = slice(warmup, warmup + steps)
    sampling = clock["sampling"][measured]
    rewards = clock["rewards"][measured]
    scored = clock["generate_and_score"][measured]
    phases = {
        "sampling": sampling,
        "rewards": rewards,
        "advantages_batch": [g - s - r for g, s, r in zip(scored, sampling, rewards, strict=True)],
        "learning": [t - g for t, g in zip(step_seconds, scored, strict=True)],
    }
    return {
        "library": layout_label("trl", processes=_world(), micro_batches=_micro_batches(args)),
        "processes": _world(),
        "micro_batches": _micro_batches(args),
        "max_new_tokens": int(args["max_new_tokens"]),
        "warmup": warmup,
        "steps": steps,
        "step_seconds": step_seconds,
        "phases": phases,
        "completion_tokens": clock["completion_tokens"][measured],
        "padded_completion_len": clock["padded_completion_len"][measured],
        "warmup_seconds": ends[warmup - 1] - t0,
        "train_seconds": train_seconds,
        **flops,
        "logits_max_abs_diff": logits_diff,
        "threads": torch.get_num_threads(),
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "trl": trl.__version__,
        },
        "pid": os.getpid(),
    }


if __name__ == "__main__":
    result = main(json.loads(sys.argv[1]))
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun, one line from rank 0
        print(json.dumps(result), flush=True)
    import torch.distributed as dist

    if dist.is_initialized():
        # Leaving the process group to interpreter exit sometimes aborted rank 0
        # ("terminate called without an active exception") after its result was printed.
        dist.barrier()
        dist.destroy_process_group()
