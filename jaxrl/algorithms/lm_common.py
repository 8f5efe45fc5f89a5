"""What every language-model algorithm shares: its config fields, the model, the mesh.

SFT and the token-rollout RL algorithms (GRPO and its family) differ in their steps and
losses; everything around them is the same and lives here once:

* `LMConfig`: the task, the model (a random tiny Llama with a character tokenizer, or a
  Hugging Face directory / run directory), LoRA, the `data x fsdp x tensor` mesh, the
  AdamW optimiser and its schedule, evaluation batch size. An algorithm's config
  subclasses it, adds its own fields and may change defaults.
* `LMAlgorithm`: an `Algorithm` base that builds the tokenizer, model and LoRA config
  from an `LMConfig`, loads warm-start weights (`load_params`), initialises trainable
  parameters and the frozen LoRA base, builds the optimiser, shards states and batches
  by the LM rules (`jaxrl.lm.sharding`), samples completions (`sample`), measures
  held-out greedy exact match and exports a model in Hugging Face layout.
* Pure helpers: `run_mesh`, `lr_schedule`, `encode_example`, `encode_rows`,
  `random_model_config`, `resolve_model_dir`, `left_pad`, `agent`.

Subclasses implement the staged step (`process`/`learn`, and for RL `prepare`/`collect`;
the token-rollout RL algorithms share theirs in `lm_rollout.py`). An algorithm object
holds configuration only: the mesh its jitted steps use is the one the driver sets in
JAX's context (`run_mesh`), and host data lives in the host state.
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import shutil
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.experimental import multihost_utils
from jax.sharding import AbstractMesh, Mesh, NamedSharding, PartitionSpec

from jaxrl import config as cfg
from jaxrl import tasks
from jaxrl.config import ConfigError
from jaxrl.lm import (
    CharTokenizer,
    LoRAConfig,
    ModelConfig,
    SampleOutput,
    Tokenizer,
    Transformer,
    apply_lora,
    decode_completions,
    from_pretrained,
    generate,
    init_lora,
    load_tokenizer,
    merge_lora,
    save_char_tokenizer,
    save_pretrained,
)
from jaxrl.lm import sharding as lm_sharding
from jaxrl.lm.checkpoint import param_shapes, read_hf_config
from jaxrl.lm.config import SUPPORTED_DTYPES
from jaxrl.lm.lora import LINEAR_TARGETS
from jaxrl.training import mesh as mesh_lib
from jaxrl.training.contract import Algorithm, ConfigChange

MODEL_DIR = "model"  # the exported policy inside a run directory
LR_SCHEDULES = ("cosine", "constant")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """Fields shared by every language-model algorithm (see `jaxrl/algorithms/lm_common.py`).

    Model: `model=None` builds a small random Llama with a character tokenizer from the
    size fields below; a directory in Hugging Face layout (config.json, safetensors,
    tokenizer.json), or a run directory holding one in `model/`, is loaded instead and
    the size fields are ignored. `lora_rank=0` trains every parameter; `> 0` trains LoRA
    adapters (Hu et al. 2021) on `lora_targets` and keeps the base frozen.
    """

    # -- data
    task: str = "addition"
    """Task: addition, addition_steps (column by column, with step labels), multiply,
    countdown, strings, repeat (answers of skewed lengths, up to 255 characters;
    repeat:N up to N), jsonl:PATH, or the multi-turn addition_retry, guess,
    tool_multiply (with a calculator) and tool_lookup (with a document search; see
    `jaxrl/tasks/`)."""
    digits: int = 3
    """Addition: digits of each operand (the difficulty knob)."""
    numbers: int = 3
    """Countdown: how many numbers the expression must use, each exactly once."""
    max_number: int = 25
    """Countdown: the largest given number; guess: the largest hidden number."""
    max_target: int = 999
    """Countdown: the largest target."""
    depth: int = 1
    """Strings: 1 asks for f(x), 2 for compositions f(g(x))."""
    word_len: int = 8
    """Strings: the longest input word."""
    held_out_pairs: int = 20
    """Strings: function pairs (f, g) never composed in training (held out)."""
    num_eval: int = 256
    """Held-out prompts for evaluation (jsonl: at most a fifth of the file)."""
    split_seed: int = 0
    """Which prompts are held out; independent of the run's seed."""
    # -- model
    model: str | None = None
    """HF-layout model directory or run directory to start from (None: random tiny Llama)."""
    num_layers: int = 2
    """Random model: transformer layers."""
    hidden_size: int = 128
    """Random model: hidden size."""
    num_heads: int = 4
    """Random model: attention heads."""
    num_kv_heads: int = 4
    """Random model: key/value heads (grouped-query attention when fewer)."""
    mlp_size: int = 512
    """Random model: MLP intermediate size."""
    context_len: int = 128
    """Random model: max_position_embeddings."""
    dtype: str = "float32"
    """Compute dtype (parameters stay float32)."""
    remat: bool = False
    """Recompute layer activations in the backward pass (less memory, more compute)."""
    logprob_chunk: int = 512
    """Tokens per vocabulary-projection block of the loss (no full logits)."""
    # -- optimiser: clip(global norm) -> Adam -> decoupled weight decay -> -lr * schedule
    lr: float = 2e-3
    """Peak learning rate (AdamW)."""
    weight_decay: float = 0.1
    """Decoupled weight decay (AdamW)."""
    max_grad_norm: float = 1.0
    """Global gradient-norm clip."""
    adam_b1: float = 0.9
    """Adam beta1."""
    adam_b2: float = 0.98
    """Adam beta2."""
    adam_eps: float = 1e-8
    """Adam epsilon."""
    warmup: float = 0.05
    """Fraction of the updates with a linear learning-rate warmup."""
    lr_schedule: str = "cosine"
    """After warmup: "cosine" (to 0 at the last update) or "constant"."""
    # -- LoRA
    lora_rank: int = 0
    """LoRA rank (0: full fine-tuning; > 0: adapters on a frozen base)."""
    lora_alpha: float = 16.0
    """LoRA scale numerator (the update is alpha / rank * B A)."""
    lora_targets: tuple[str, ...] = ("all-linear",)
    """Modules that get adapters ("all-linear" or projection names)."""
    # -- mesh: data x fsdp x tensor; data gets the devices fsdp and tensor leave
    mesh_fsdp: int = 1
    """Devices of the mesh's fsdp axis (parameters sharded ZeRO-3 style)."""
    mesh_tensor: int = 1
    """Devices of the mesh's tensor axis (heads and MLP split); data gets the rest."""
    # -- evaluation
    eval_batch_size: int = 256
    """Prompts per decoding batch in evaluation."""

    def validate(self) -> LMConfig:
        """Raises `ConfigError` naming the first invalid shared field; returns self."""
        cfg.check(isinstance(self.task, str) and bool(self.task), "task", self.task, "a task name")
        cfg.check_positive(self, "digits", "num_eval")
        cfg.check(self.split_seed >= 0, "split_seed", self.split_seed, "an integer >= 0")
        cfg.check_positive(self, "num_layers", "hidden_size", "num_heads", "num_kv_heads")
        cfg.check_positive(self, "mlp_size", "context_len", "logprob_chunk", "eval_batch_size")
        cfg.check(
            self.hidden_size % self.num_heads == 0
            and (self.hidden_size // self.num_heads) % 2 == 0,
            "num_heads",
            self.num_heads,
            f"a divisor of hidden_size={self.hidden_size} leaving an even head size",
        )
        cfg.check(
            self.num_heads % self.num_kv_heads == 0,
            "num_kv_heads",
            self.num_kv_heads,
            f"a divisor of num_heads={self.num_heads}",
        )
        cfg.check_choice(self, "dtype", SUPPORTED_DTYPES)
        cfg.check_positive(self, "lr", "max_grad_norm", "adam_eps")
        cfg.check(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        cfg.check_range(self, "adam_b1", 0.0, 1.0, closed=False)
        cfg.check_range(self, "adam_b2", 0.0, 1.0, closed=False)
        cfg.check(0 <= self.warmup < 1, "warmup", self.warmup, "a fraction in [0, 1)")
        cfg.check_choice(self, "lr_schedule", LR_SCHEDULES)
        cfg.check(self.lora_rank >= 0, "lora_rank", self.lora_rank, ">= 0 (0: full fine-tuning)")
        cfg.check_positive(self, "lora_alpha")
        allowed = ("all-linear", *LINEAR_TARGETS)
        cfg.check(
            len(self.lora_targets) > 0
            and all(t in allowed for t in self.lora_targets)
            and ("all-linear" not in self.lora_targets or len(self.lora_targets) == 1),
            "lora_targets",
            self.lora_targets,
            f"'all-linear' or a list of {list(LINEAR_TARGETS)}",
        )
        cfg.check_positive(self, "mesh_fsdp", "mesh_tensor")
        return self


class LMAlgorithm(Algorithm):
    """Base of the language-model algorithms: model, LoRA, optimiser, mesh, export.

    Subclasses call `super().__init__(config)` first; they then have `task`, `tokenizer`,
    `model`, `lora` (None for full fine-tuning) and `model_dir` (None for a random
    model). `batch_rows` (set by the subclass) is the number of rows of a learning
    batch, which the mesh's `data x fsdp` devices must divide; `batch_field` names the
    config field that sets it, for the error message.
    """

    progress_unit = "samples"
    batch_rows: int
    batch_field: str = "batch_size"  # the config field that sets batch_rows (for errors)

    def __init__(self, config: LMConfig):
        c = self.config = config.validate()
        self.task = self.make_task(c)
        self.model_dir = resolve_model_dir(c.model) if c.model is not None else None
        if self.model_dir is None:
            alphabet = tasks.BASE_ALPHABET + "".join(
                sorted(set(self.task.alphabet) - set(tasks.BASE_ALPHABET))
            )
            self.tokenizer: Tokenizer = CharTokenizer(alphabet)
            model_config = random_model_config(c, self.tokenizer.vocab_size)
        else:
            self.tokenizer, model_config = _load_model_config(self.model_dir, c.dtype)
        self.model = Transformer(model_config, remat=c.remat)
        self.lora = (
            LoRAConfig(
                targets="all-linear" if c.lora_targets == ("all-linear",) else c.lora_targets,
                rank=c.lora_rank,
                alpha=c.lora_alpha,
            )
            if c.lora_rank
            else None
        )

    def held_out_size(self) -> int:
        """The task's held-out prompts (`num_eval` of them, or fewer when the task has
        fewer)."""
        return len(self.task.eval_examples())

    def make_task(self, config: LMConfig) -> tasks.Task:
        """The task `config.task` names, with its knobs from the config. An algorithm whose
        data comes from elsewhere (DPO's `data` file of preference pairs) overrides it;
        the character tokenizer's alphabet is the returned task's."""
        return tasks.make_task(
            config.task, **{k: getattr(config, k) for k in tasks.knobs(config.task)}
        )

    def fit_lengths(
        self, examples: Sequence[tasks.Example], max_len: int | None, source: str
    ) -> tuple[int, int, int]:
        """`(row length, longest prompt, longest answer + eos)` in tokens of `examples`
        (at least as long as any training row); `max_len=None` is the longest row.
        Raises `ConfigError` when a row does not fit `max_len` or the model's context;
        `source` says where the examples come from (e.g. "task 'addition'")."""
        c, context = self.config, self.model.config.max_position_embeddings
        longest = prompt_len = answer_len = 0
        for example in examples:
            prompt, answer = encode_example(self.tokenizer, *example)
            if len(prompt) + len(answer) > longest:
                longest, longest_example = len(prompt) + len(answer), example
            prompt_len, answer_len = max(prompt_len, len(prompt)), max(answer_len, len(answer))
        row_len = longest if max_len is None else max_len
        if longest > row_len:
            raise ConfigError(
                f"invalid max_len={max_len}: {source} has an example of {longest} tokens "
                f"(prompt + answer + eos), e.g. {tuple(longest_example)}"
            )
        if max(row_len, prompt_len + answer_len) > context:
            field = "context_len" if self.model_dir is None else "model"
            raise ConfigError(
                f"invalid {field}={getattr(c, field)!r}: the model's context is {context} "
                f"tokens but {source} needs {max(row_len, prompt_len + answer_len)} "
                f"(max_len={row_len}; e.g. {tuple(longest_example)})"
            )
        return row_len, prompt_len, answer_len

    # ------------------------------------------------------------------ parameters
    def load_params(self) -> Any:
        """The `model` directory's weights as host arrays (None for a random model); a
        model with a value head (a reward model) gets a zero one if the directory has none."""
        if self.model_dir is None:
            return None
        _, params = from_pretrained(
            self.model_dir, dtype=self.config.dtype, value_head=self.model.config.value_head
        )
        return jax.device_get(params)

    def init_model(self, key: jax.Array, params: Any = None) -> tuple[Any, Any]:
        """`(trainable, frozen_base)`: the model from `params` (a warm start) or from `key`,
        and LoRA adapters from `key` on top of it (then the model is the frozen base;
        without LoRA the base is None). Pure: the same key and params give the same."""
        k_model, k_lora = jax.random.split(key)
        if params is None:
            base = self.model.init(k_model, jnp.zeros((1, 1), jnp.int32))
        else:
            _check_params(self.model.config, params)
            base = jax.tree.map(jnp.asarray, params)
        if self.lora is None:
            return base, None
        return init_lora(k_lora, self.model.config, self.lora, base), base

    def optimizer(self, hp: Any, lr_scale: jax.Array | float) -> optax.GradientTransformation:
        """clip(global norm) -> Adam -> decoupled weight decay on matrices (AdamW,
        Loshchilov & Hutter 2019) -> -lr * schedule. Built from the (possibly swept,
        traced) hyperparameters each step; its state layout does not depend on them."""
        c = self.config
        return optax.chain(
            optax.clip_by_global_norm(hp.max_grad_norm),
            optax.scale_by_adam(b1=c.adam_b1, b2=c.adam_b2, eps=c.adam_eps),
            optax.add_decayed_weights(
                hp.weight_decay, mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p)
            ),
            optax.scale(-hp.lr * lr_scale),
        )

    def lr_scale(self, update_step: jax.Array) -> jax.Array:
        """The learning-rate multiplier of `lr_schedule` at `update_step`."""
        c = self.config
        return lr_schedule(update_step, self.num_updates, c.warmup, c.lr_schedule)

    @property
    def schedule_follows_total(self) -> bool:
        """A cosine decay ends at the last update and the warmup is a fraction of the
        updates: both move when `total_steps` is extended (see `Algorithm.check_resume`)."""
        c = self.config
        return c.lr_schedule == "cosine" or c.warmup > 0

    def model_params(self, trainable: Any, base: Any) -> Any:
        """The parameters the model runs with: the trained ones, or base + LoRA."""
        return trainable if self.lora is None else apply_lora(base, trainable, self.lora)

    def merged_params(self, state: Any) -> Any:
        """One agent's plain model parameters (LoRA merged into the base)."""
        if self.lora is None:
            return state.params
        return merge_lora(state.base_params, state.params, self.lora)

    # ------------------------------------------------------------------ mesh hooks
    def make_mesh(self, num_devices: int | None) -> Mesh:
        """`data x fsdp x tensor` over the first `num_devices` devices (`mesh_on`)."""
        return self.mesh_on(mesh_lib.select_devices(num_devices))

    def mesh_on(self, devices: Sequence[Any]) -> Mesh:
        """`data x fsdp x tensor` over `devices`; `mesh_fsdp` and `mesh_tensor` from the
        config, `data` the rest."""
        c = self.config
        cfg.check(
            len(devices) % (c.mesh_fsdp * c.mesh_tensor) == 0,
            "mesh_fsdp",
            c.mesh_fsdp,
            f"such that mesh_fsdp * mesh_tensor={c.mesh_fsdp * c.mesh_tensor} divides the "
            f"{len(devices)} devices",
        )
        mesh = lm_sharding.make_mesh(-1, c.mesh_fsdp, c.mesh_tensor, devices=devices)
        rows = mesh.shape["data"] * mesh.shape["fsdp"]
        cfg.check(
            self.batch_rows % rows == 0,
            self.batch_field,
            getattr(c, self.batch_field),
            f"such that the {self.batch_rows} rows of a batch are a multiple of data x fsdp "
            f"= {rows} (the batch rows are split over them)",
        )
        return mesh

    def plan_suggestions(self, num_devices: int) -> list[ConfigChange]:
        """`jaxrl plan`'s changes to try when a step does not fit, in the order they are
        combined: a larger fsdp axis (each size that divides the devices), remat, LoRA,
        more micro-batches (those that divide a GRPO update's completions)."""
        c = self.config
        changes = []
        per_replica = c.mesh_tensor
        replicas = num_devices // per_replica
        for fsdp in (d for d in range(1, replicas + 1) if replicas % d == 0):
            if fsdp > c.mesh_fsdp:
                tensor = f",tensor={per_replica}" if per_replica > 1 else ""
                changes.append(
                    ConfigChange(
                        "mesh",
                        f"--mesh fsdp={fsdp}{tensor}",
                        f"parameters and optimizer state sharded over {fsdp} devices",
                        {"mesh_fsdp": fsdp},
                    )
                )
        if not c.remat:
            changes.append(
                ConfigChange(
                    "remat",
                    "--remat",
                    "layer activations recomputed in the backward pass",
                    {"remat": True},
                )
            )
        if c.lora_rank == 0:
            changes.append(
                ConfigChange(
                    "lora",
                    "--lora-rank 16",
                    "LoRA adapters on a frozen base: no Adam moments for the base",
                    {"lora_rank": 16},
                )
            )
        if hasattr(c, "micro_batches"):  # the algorithms that accumulate gradients
            rows = getattr(c, "completions_per_update", None)
            for m in (2, 4, 8, 16):
                micro = c.micro_batches * m
                if rows is None or rows % (c.num_minibatches * micro) == 0:
                    changes.append(
                        ConfigChange(
                            "micro_batches",
                            f"--micro-batches {micro}",
                            f"gradient accumulated over {micro} smaller micro-batches",
                            {"micro_batches": micro},
                        )
                    )
        return changes

    def keep_rows_sharded(self, tree: Any) -> Any:
        """Constrains every leaf's first axis (batch rows of one agent) to the batch
        sharding (`data x fsdp`) of the mesh in context (`run_mesh`); a no-op on one
        device or outside a mesh.

        Why: a gather by a traced index (`x[permutation]`, the shuffle before
        minibatches) has no sharding XLA can infer from its operand, and XLA's SPMD
        partitioner then replicates the result, so every later activation of the
        learning step would be computed in full on every device. Inside `vmap` over
        agents the agent axis stays unconstrained."""
        mesh = run_mesh()
        if mesh is None or mesh.size == 1:
            return tree
        return jax.tree.map(
            lambda x: jax.lax.with_sharding_constraint(x, lm_sharding.batch_sharding(mesh, x.ndim)),
            tree,
        )

    def accumulated_gradient(
        self,
        loss: Callable[[Any, Any, Any], tuple[jax.Array, dict[str, Any]]],
        params: Any,
        context: Any,
        rows: Any,
        micro_batches: int = 1,
    ) -> tuple[Any, dict[str, jax.Array]]:
        """Gradient of `loss(params, context, rows)` with respect to `params`, and its
        metrics, computed in slices: over the devices' row shards of a data-parallel
        mesh (`sum_over_row_shards`) and, on each, over `micro_batches` slices of rows
        (gradient accumulation: one slice's activations in memory at a time).

        `loss` returns `(value, metrics)` for a slice of rows. Its value must divide by
        the whole batch's normaliser (pass it in `context`), so that the slices' values
        and gradients add up to the batch's; its metrics must be sums or `TokenMean`s,
        which add up too (`finish_metrics` makes the means). `rows` is a pytree of
        arrays whose first axis is the batch row.
        """
        grad_fn = jax.grad(loss, has_aux=True)

        def summed(replicated: Any, rows: Any) -> Any:
            params, context = replicated
            pieces = jax.tree.map(lambda x: split_rows(x, micro_batches), rows)

            def add_piece(total: Any, piece: Any) -> tuple[Any, None]:
                return jax.tree.map(jnp.add, total, grad_fn(params, context, piece)), None

            first = jax.tree.map(lambda x: x[0], pieces)
            shapes = jax.eval_shape(grad_fn, params, context, first)
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
            return jax.lax.scan(add_piece, zeros, pieces)[0]

        grads, stats = self.sum_over_row_shards(
            summed, (params, context), rows, rows_multiple=micro_batches
        )
        return grads, finish_metrics(stats)

    def sum_over_row_shards(
        self, fn: Callable[[Any, Any], Any], replicated: Any, rows: Any, rows_multiple: int = 1
    ) -> Any:
        """`fn(replicated, rows)`, computed as the sum of `fn` over shards of the rows.

        `fn` must return a pytree that adds up over rows: the gradient of a loss whose
        normaliser is the whole batch's (passed in `replicated`), sums, `TokenMean`s.
        `rows` is a pytree of arrays whose first axis is the batch row.

        On a data-parallel mesh (`data` > 1 and `fsdp` = `tensor` = 1, so the parameters
        are replicated) each device runs `fn` on its own rows inside `shard_map` and
        the results are summed with one flat all-reduce (`mesh.psum_in_buckets`), when
        every device's rows are a multiple of `rows_multiple` (`fn`'s micro-batches).
        Otherwise `fn` runs on all the rows and XLA's SPMD partitioner places the
        collectives; with the parameters sharded (`fsdp`, `tensor`) that is where they
        belong. Both give the same sums; the first is faster on CPU devices, whose
        runtime costs one rendezvous per leaf of the gradient otherwise. The mesh is the
        one in context (`run_mesh`); outside a mesh `fn` runs on all the rows.
        """
        mesh = run_mesh()
        if mesh is None or mesh.shape["fsdp"] * mesh.shape["tensor"] > 1:
            return fn(replicated, rows)
        devices = mesh.shape["data"]
        num_rows = jax.tree.leaves(rows)[0].shape[0]
        if devices == 1 or num_rows % (devices * rows_multiple):
            return fn(replicated, rows)

        def shard(replicated: Any, rows: Any) -> Any:
            return mesh_lib.psum_in_buckets(fn(replicated, rows), "data")

        # check_vma=False: `fn` may start a scan from a zero (device-invariant) carry
        # that its body makes device-varying; the psum makes every output invariant.
        return jax.shard_map(
            shard,
            mesh=None,  # the mesh in context
            in_specs=(PartitionSpec(), PartitionSpec("data")),
            out_specs=PartitionSpec(),
            check_vma=False,
        )(replicated, rows)

    def state_sharding(self, abstract_state: Any, mesh: Mesh, num_agents: int) -> Any:
        """Parameters and optimiser moments by the LM rules (`jaxrl.lm.sharding`: FSDP
        over `embed`, tensor parallelism over heads/mlp/vocab), read from each leaf's
        parameter path; counters, hyperparameters and LoRA adapters replicated; the
        leading agent axis unsharded."""
        del num_agents
        return jax.tree_util.tree_map_with_path(
            lambda path, leaf: _lm_leaf_sharding(path, leaf, mesh), abstract_state
        )

    def batch_sharding(self, abstract_batch: Any, mesh: Mesh, num_agents: int) -> Any:
        """Batch rows over `data x fsdp` (the LM's batch rule), agent axis unsharded."""
        del num_agents
        return jax.tree.map(
            lambda x: mesh_lib.with_agent_axis(lm_sharding.batch_sharding(mesh, x.ndim - 1)),
            abstract_batch,
        )

    # ------------------------------------------------------------------ evaluation, export
    def sample(
        self,
        params: Any,
        tokens: jax.Array,
        mask: jax.Array,
        key: jax.Array,
        *,
        max_new_tokens: int,
        temperature: float,
        num_samples: int = 1,
        model: Transformer | None = None,
        stop_sequences: Sequence[Sequence[int]] | None = None,
    ) -> SampleOutput:
        """`num_samples` completions of each left-padded prompt row (`tokens`, `mask`) by
        the model with `params` (`jaxrl.lm.generate`, with the KV cache), each ended by
        the tokenizer's eos or at `max_new_tokens`; `temperature` 0 is greedy. `model`
        replaces `self.model` (a sampler with another compute dtype); `stop_sequences`
        (token ids) also end a completion, e.g. a tool call's end marker."""
        return generate(
            self.model if model is None else model,
            params,
            tokens,
            key,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            eos_id=self.tokenizer.eos_id,
            prompt_mask=mask,
            num_samples=num_samples,
            pad_id=self.tokenizer.pad_id,
            stop_sequences=stop_sequences,
        )

    def prompt_tokens(self, examples: Sequence[tasks.Example], length: int) -> tuple[Any, Any]:
        """Left-padded prompt tokens and mask of `examples`, (len(examples), length)."""
        prompts = [encode_example(self.tokenizer, *e)[0] for e in examples]
        return left_pad(prompts, length, self.tokenizer.pad_id)

    def accuracy(
        self,
        params: Any,
        examples: Sequence[tasks.Example],
        prompt_len: int,
        max_new_tokens: int,
    ) -> float:
        """Exact-match accuracy of greedy completions of `examples`' prompts (one agent's
        plain model parameters)."""
        size = self.config.eval_batch_size
        correct = 0
        for start in range(0, len(examples), size):
            chunk = list(examples[start : start + size])
            padded = chunk + [chunk[0]] * (size - len(chunk))  # one shape: compiled once
            tokens, mask = self.prompt_tokens(padded, prompt_len)
            out = self.sample(
                params,
                tokens,
                mask,
                jax.random.key(0),  # unused: greedy
                max_new_tokens=max_new_tokens,
                temperature=0.0,
            )
            texts = decode_completions(self.tokenizer, out.tokens, out.completion_mask)
            correct += sum(
                self.task.is_correct(text, e.answer) for text, e in zip(texts, chunk, strict=False)
            )
        return correct / len(examples)

    def export(self, state: Any, directory: str | pathlib.Path) -> None:
        """Writes one agent's model (LoRA merged) and tokenizer in Hugging Face layout."""
        directory = pathlib.Path(directory)
        params = jax.device_get(self.merged_params(state))
        save_pretrained(directory, self.model.config, params)
        if isinstance(self.tokenizer, CharTokenizer):
            save_char_tokenizer(self.tokenizer, directory)
        else:
            for name in _TOKENIZER_FILES:
                if (self.model_dir / name).exists():
                    shutil.copyfile(self.model_dir / name, directory / name)

    def export_agent0(self, state: Any, run_dir: Any) -> dict[str, str]:
        """With a run directory, agent 0's model in `run_dir/model/` (`{"model_dir": ...}`)."""
        if run_dir is None or jax.process_index() != 0:
            return {}
        model_dir = pathlib.Path(run_dir) / MODEL_DIR
        self.export(agent(state, 0), model_dir)
        return {"model_dir": str(model_dir)}


# ---------------------------------------------------------------------- pure helpers
def run_mesh() -> AbstractMesh | None:
    """The mesh of the run, as the driver sets it around every phase's compile and call
    (`jax.set_mesh`); None outside one. Jitted code reads it from this context rather
    than from the algorithm object, so the object holds no state of its own."""
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty else mesh


def lr_schedule(step: jax.Array, num_updates: int, warmup: float, schedule: str) -> jax.Array:
    """Learning-rate multiplier at update `step`: linear warmup over the first
    `warmup * num_updates` updates, then constant or a cosine decay to 0 at the end
    (Loshchilov & Hutter 2017, SGDR, without restarts)."""
    step = jnp.asarray(step, jnp.float32)
    warm = max(1.0, warmup * num_updates)
    ramp = jnp.minimum(1.0, (step + 1.0) / warm)
    if schedule == "constant":
        return ramp
    progress = jnp.clip((step + 1.0 - warm) / max(1.0, num_updates - warm), 0.0, 1.0)
    return ramp * 0.5 * (1.0 + jnp.cos(math.pi * progress))


def encode_example(tokenizer: Tokenizer, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """`(prompt ids, answer ids + eos)`. The prompt gets the tokenizer's special prefix
    (a character tokenizer's bos; a Hugging Face tokenizer's post-processor), the answer
    none, so the model sees the prompt as it will at generation time."""
    if isinstance(tokenizer, CharTokenizer):
        prompt_ids = tokenizer.encode(prompt, add_bos=True)
        answer_ids = tokenizer.encode(answer)
    else:
        prompt_ids = tokenizer.encode(prompt)
        answer_ids = tokenizer.encode(answer, add_special_tokens=False)
    return prompt_ids, [*answer_ids, tokenizer.eos_id]


def encode_rows(
    tokenizer: Tokenizer, examples: Sequence[tasks.Example], max_len: int
) -> dict[str, np.ndarray]:
    """Right-padded `prompt + answer + eos` rows of teacher forcing: `tokens` int32,
    `mask` (real tokens) and `loss_mask` (answer and eos tokens) bool, each
    (len(examples), max_len)."""
    shape = (len(examples), max_len)
    tokens = np.full(shape, tokenizer.pad_id, np.int32)
    mask = np.zeros(shape, bool)
    loss_mask = np.zeros(shape, bool)
    for row, example in enumerate(examples):
        prompt, answer = encode_example(tokenizer, *example)
        end = len(prompt) + len(answer)
        tokens[row, :end] = prompt + answer
        mask[row, :end] = True
        loss_mask[row, len(prompt) : end] = True
    return {"tokens": tokens, "mask": mask, "loss_mask": loss_mask}


def random_model_config(config: LMConfig, vocab_size: int) -> ModelConfig:
    """The small Llama a `model=None` run trains from scratch."""
    return ModelConfig(
        model_type="llama",
        vocab_size=vocab_size,
        hidden_size=config.hidden_size,
        intermediate_size=config.mlp_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.hidden_size // config.num_heads,
        rope_theta=10_000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=config.context_len,
        tie_word_embeddings=False,
        attention_bias=False,
        qk_norm=False,
        dtype=config.dtype,
    )


def resolve_model_dir(model: str) -> pathlib.Path:
    """The Hugging Face model directory `model` names: itself, or a run directory's
    `model/`. `ConfigError` naming `model` when there is none."""
    path = pathlib.Path(model)
    for candidate in (path / MODEL_DIR, path):  # a run directory has a config.json too
        if (candidate / "config.json").is_file():
            if not any(candidate.glob("*.safetensors")):
                raise ConfigError(f"invalid model={model!r}: {candidate} has no *.safetensors")
            return candidate
    what = "does not exist" if not path.exists() else "has no config.json (nor model/config.json)"
    raise ConfigError(f"invalid model={model!r}: {path} {what}; expected a Hugging Face model")


def _load_model_config(model_dir: pathlib.Path, dtype: str) -> tuple[Tokenizer, ModelConfig]:
    """The tokenizer and architecture of a model directory, as `ConfigError`s naming it."""
    try:
        model_config = ModelConfig.from_hf(read_hf_config(model_dir), dtype=dtype)
    except (ValueError, KeyError, json.JSONDecodeError) as err:
        raise ConfigError(f"invalid model={str(model_dir)!r}: bad config.json ({err})") from None
    if not (model_dir / "tokenizer.json").is_file():
        raise ConfigError(f"invalid model={str(model_dir)!r}: no tokenizer.json beside it")
    tokenizer = load_tokenizer(model_dir)
    if tokenizer.eos_id is None:
        raise ConfigError(
            f"invalid model={str(model_dir)!r}: its tokenizer has no eos token (set eos_token "
            "in tokenizer_config.json); training teaches the model to stop with it"
        )
    if tokenizer.vocab_size > model_config.vocab_size:
        raise ConfigError(
            f"invalid model={str(model_dir)!r}: tokenizer vocabulary ({tokenizer.vocab_size}) "
            f"is larger than the model's ({model_config.vocab_size})"
        )
    return tokenizer, model_config


def _check_params(model_config: ModelConfig, params: Any) -> None:
    """Warm-start parameters must have exactly the model's parameter paths and shapes."""
    expected = param_shapes(model_config)
    given = {
        k: tuple(np.shape(v))
        for k, v in flax.traverse_util.flatten_dict(params.get("params", {})).items()
    }
    if given != expected:
        diff = sorted(set(expected.items()) ^ set(given.items()))[:3]
        raise ConfigError(
            f"invalid params: the warm-start parameters do not match the model "
            f"(first differences, path and shape: {diff})"
        )


def _lm_leaf_sharding(path: tuple[Any, ...], leaf: Any, mesh: Mesh) -> NamedSharding:
    """One stacked state leaf's sharding: the LM rule of its parameter path (the trailing
    dict keys, so Adam's moments follow their parameters), agent axis unsharded."""
    names = tuple(k.key for k in path if isinstance(k, jax.tree_util.DictKey))
    shape = tuple(leaf.shape[1:])
    axes = lm_sharding.logical_axes(names, len(shape)) if names else (None,) * len(shape)
    per_agent = NamedSharding(mesh, lm_sharding.spec_for(axes, shape, mesh))
    return mesh_lib.with_agent_axis(per_agent)


class TokenMean(NamedTuple):
    """A metric averaged over tokens (or rows), kept as its sum and count so that the
    pieces of a batch (micro-batches, the devices' row shards) combine by addition into
    the whole batch's mean; `finish_metrics` divides. A mean of the pieces' means would
    weigh a piece with few tokens like one with many."""

    total: jax.Array
    count: jax.Array

    @classmethod
    def of(cls, mean: jax.Array, count: jax.Array) -> TokenMean:
        """The piece's `mean` over its `count` tokens (a mean over none is 0)."""
        count = jnp.asarray(count, jnp.float32)
        return cls(mean * count, count)

    @classmethod
    def over(cls, values: jax.Array, mask: jax.Array) -> TokenMean:
        """The mean of `values` over the tokens where `mask` is set (as
        `masked_token_mean`), kept as their sum and number."""
        total = jnp.sum(jnp.where(mask, values, 0.0))
        return cls(total, jnp.sum(mask.astype(jnp.float32)))


def finish_metrics(stats: dict[str, Any]) -> dict[str, jax.Array]:
    """`stats` summed over a batch's pieces -> metrics: a `TokenMean`'s total divided
    by its count (0 for no tokens, as `masked_token_mean`); other entries (sums, such as
    a loss whose every piece divides by the whole batch's normaliser) as they are."""
    return {
        name: value.total / jnp.maximum(value.count, 1.0) if isinstance(value, TokenMean) else value
        for name, value in stats.items()
    }


def split_rows(x: jax.Array, pieces: int) -> jax.Array:
    """`(rows, ...) -> (pieces, rows // pieces, ...)`, piece i holding rows i, i + pieces,
    i + 2 pieces, ... (minibatches, gradient-accumulation micro-batches).

    Strided rather than contiguous: batch rows are sharded in contiguous blocks over the
    mesh's `data x fsdp` devices, so a strided piece keeps an equal share of rows on
    every device and a scan over pieces uses all of them at every step, with no
    resharding; a contiguous piece would live on a few devices only. Which rows share a
    piece does not matter to the results: minibatches come from a random permutation,
    and micro-batch gradients are summed."""
    return jnp.swapaxes(x.reshape(-1, pieces, *x.shape[1:]), 0, 1)


def agent(state: Any, i: int) -> Any:
    """Agent `i` of an agent-stacked pytree, as arrays this process can read.

    Held-out evaluation, decoding and export run on the host, outside the compiled steps.
    In a multi-process run the state's arrays span every process's devices, and neither
    a value fetched from them nor the output of a computation on them is readable by one
    process; so each process takes its own copy of the agent (a replicated array's local
    shard, a sharded one gathered from all processes) and evaluates it on its own
    devices, every process alike."""
    return jax.tree.map(lambda x: _process_local(x[i]), state)


def _process_local(x: Any) -> Any:
    """`x` as an array of this process: itself when it lives on this process's devices
    only, else its local copy (replicated) or all its shards gathered (sharded)."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return x
    if x.is_fully_replicated:
        return x.addressable_data(0)
    return multihost_utils.process_allgather(x, tiled=True)


def left_pad(rows: Sequence[Sequence[int]], length: int, pad_id: int) -> tuple[Any, Any]:
    """Left-padded `(tokens int32, mask bool)` of shape (len(rows), length)."""
    tokens = np.full((len(rows), length), pad_id, np.int32)
    mask = np.zeros((len(rows), length), bool)
    for i, ids in enumerate(rows):
        tokens[i, length - len(ids) :] = ids
        mask[i, length - len(ids) :] = True
    return tokens, mask
