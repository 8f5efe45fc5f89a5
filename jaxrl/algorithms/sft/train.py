"""SFT as a staged algorithm (`jaxrl/training/contract.py`): data on the host, learning jitted.

One update:
  * `process(None, host_state)` (host Python) draws `batch_size` examples per agent from
    the task, encodes `prompt + answer + eos` and right-pads every row to `max_len`, so
    the batch has one fixed shape and `learn` compiles once. Agent `i`'s batch `k` is
    drawn from `numpy.random.default_rng((seed, i, k))`: the host state is just
    `{"seed", "num_agents", "batches"}`, and a resumed run redraws exactly the batches
    an uninterrupted one would have seen.
  * `learn(state, batch)` (jitted, one agent) takes one optimiser step on the masked
    token cross-entropy (`losses.py`).

State: `params` are the trained parameters (the whole model, or the LoRA adapters),
`base_params` the frozen base model under LoRA (None otherwise; not checkpointed: `init`
rebuilds it from the same key or warm-start parameters on resume).

After training, `finish` measures held-out exact match with greedy decoding and writes
agent 0's model, LoRA merged, to `run_dir/model/` in Hugging Face layout (config.json,
model.safetensors, tokenizer.json, tokenizer_config.json), which `from_pretrained` and
`SFTConfig(model=...)` load.
"""

from __future__ import annotations

import json
import math
import pathlib
import shutil
from collections.abc import Sequence
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh, NamedSharding

from jaxrl import config as cfg
from jaxrl import tasks
from jaxrl.config import ConfigError
from jaxrl.lm import (
    CharTokenizer,
    LoRAConfig,
    ModelConfig,
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
    token_logprobs,
)
from jaxrl.lm import sharding as lm_sharding
from jaxrl.lm.checkpoint import param_shapes, read_hf_config
from jaxrl.training import mesh as mesh_lib
from jaxrl.training.contract import Algorithm

from . import losses
from .config import SWEEPABLE, SFTConfig

SFTHyperParams = cfg.make_hyperparams_class("SFTHyperParams", SWEEPABLE)
MODEL_DIR = "model"  # the exported policy inside a run directory
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@struct.dataclass
class SFTState:
    params: Any  # trained parameters: the model's, or the LoRA adapters
    opt_state: Any
    update_step: jax.Array  # int32, completed updates
    hparams: Any  # SFTHyperParams (float32 leaves, sweepable)
    base_params: Any = None  # LoRA: the frozen base model (not checkpointed)


class SFT(Algorithm):
    """Supervised fine-tuning of a causal LM on a task (see the module docstring)."""

    name = "sft"
    sweepable = SWEEPABLE
    progress_unit = "samples"
    checkpoint_exclude = ("base_params",)

    def __init__(self, config: SFTConfig):
        c = self.config = config.validate()
        self.steps_per_update = c.batch_size
        self.num_updates = c.num_updates
        self.task = tasks.make_task(c.task, **{k: getattr(c, k) for k in tasks.knobs(c.task)})
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
        self.max_len, self.prompt_len, self.answer_len = self._check_lengths()

    # ------------------------------------------------------------------ construction
    def _check_lengths(self) -> tuple[int, int, int]:
        """(row length, longest prompt, longest answer + eos) in tokens; raises
        `ConfigError` when an example does not fit `max_len` or the model's context."""
        c, context = self.config, self.model.config.max_position_embeddings
        longest = prompt_len = answer_len = 0
        for example in self.task.longest_examples():
            prompt, answer = encode_example(self.tokenizer, *example)
            if len(prompt) + len(answer) > longest:
                longest, longest_example = len(prompt) + len(answer), example
            prompt_len, answer_len = max(prompt_len, len(prompt)), max(answer_len, len(answer))
        max_len = longest if c.max_len is None else c.max_len
        if longest > max_len:
            raise ConfigError(
                f"invalid max_len={c.max_len}: task {c.task!r} has an example of {longest} "
                f"tokens (prompt + answer + eos), e.g. {tuple(longest_example)}"
            )
        if max(max_len, prompt_len + answer_len) > context:
            field = "context_len" if self.model_dir is None else "model"
            raise ConfigError(
                f"invalid {field}={getattr(c, field)!r}: the model's context is {context} "
                f"tokens but task {c.task!r} needs {max(max_len, prompt_len + answer_len)} "
                f"(max_len={max_len}; e.g. {tuple(longest_example)})"
            )
        return max_len, prompt_len, answer_len

    def hyperparams(self, **overrides: float) -> Any:
        """Sweepable hyperparameters of this config, with optional overrides."""
        config = cfg.replace(self.config, **overrides).validate() if overrides else self.config
        return cfg.hyperparams_from(config, SFTHyperParams, SWEEPABLE)

    def load_params(self) -> Any:
        """The `model` directory's weights as host arrays (None for a random model)."""
        if self.model_dir is None:
            return None
        _, params = from_pretrained(self.model_dir, dtype=self.config.dtype)
        return jax.device_get(params)

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> SFTState:
        """Initial state: the model from `params` (a warm start) or from `key`; LoRA adapters
        from `key` on top of it. Pure; the same key and params give the same state."""
        k_model, k_lora = jax.random.split(key)
        if params is None:
            base = self.model.init(k_model, jnp.zeros((1, 1), jnp.int32))
        else:
            _check_params(self.model.config, params)
            base = jax.tree.map(jnp.asarray, params)
        if self.lora is None:
            trainable, frozen = base, None
        else:
            trainable = init_lora(k_lora, self.model.config, self.lora, base)
            frozen = base
        return SFTState(
            params=trainable,
            opt_state=self._optimizer(hparams, 1.0).init(trainable),
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
            base_params=frozen,
        )

    # ------------------------------------------------------------------ staged step
    def init_host_state(self, seed: int, num_agents: int) -> dict[str, int]:
        """The data loader's position: batch `k` of agent `i` is drawn from `(seed, i, k)`."""
        return {"seed": int(seed), "num_agents": int(num_agents), "batches": 0}

    def process(
        self, collected: Any, host_state: dict[str, int]
    ) -> tuple[dict[str, np.ndarray], dict[str, int], dict[str, Any]]:
        """The next batch of every agent, `{"tokens", "mask", "loss_mask"}` each
        (agents, batch_size, max_len); `collected` is unused (SFT collects nothing)."""
        del collected
        seed, k = host_state["seed"], host_state["batches"]
        rows = [
            self.encode_batch(
                self.task.sample_train(np.random.default_rng((seed, i, k)), self.config.batch_size)
            )
            for i in range(host_state["num_agents"])
        ]
        batch = {name: np.stack([r[name] for r in rows]) for name in rows[0]}
        return batch, {**host_state, "batches": k + 1}, {}

    def encode_batch(self, examples: Sequence[tasks.Example]) -> dict[str, np.ndarray]:
        """Right-padded `prompt + answer + eos` rows: `tokens` int32, `mask` (real tokens)
        and `loss_mask` (answer and eos tokens) bool, each (len(examples), max_len)."""
        shape = (len(examples), self.max_len)
        tokens = np.full(shape, self.tokenizer.pad_id, np.int32)
        mask = np.zeros(shape, bool)
        loss_mask = np.zeros(shape, bool)
        for row, example in enumerate(examples):
            prompt, answer = encode_example(self.tokenizer, *example)
            end = len(prompt) + len(answer)
            tokens[row, :end] = prompt + answer
            mask[row, :end] = True
            loss_mask[row, len(prompt) : end] = True
        return {"tokens": tokens, "mask": mask, "loss_mask": loss_mask}

    def learn(self, state: SFTState, batch: dict[str, jax.Array]) -> tuple[SFTState, dict]:
        """One optimiser step on the batch's masked token cross-entropy (one agent)."""
        hp = state.hparams
        lr_scale = lr_schedule(
            state.update_step, self.num_updates, self.config.warmup, self.config.lr_schedule
        )
        loss_mask = batch["loss_mask"][:, 1:]  # token_logprobs scores tokens 1..L-1

        def loss_fn(trainable):
            logprobs, entropy = token_logprobs(
                self.model,
                self._model_params(trainable, state.base_params),
                batch["tokens"],
                attention_mask=batch["mask"],
                chunk_size=self.config.logprob_chunk,
                return_entropy=True,
            )
            loss, num_tokens = losses.masked_token_nll(logprobs, loss_mask)
            return loss, (logprobs, entropy, num_tokens)

        (loss, (logprobs, entropy, num_tokens)), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            state.params
        )
        optimizer = self._optimizer(hp, lr_scale)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        state = state.replace(
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
            update_step=state.update_step + 1,
        )
        metrics = {
            "loss": loss,
            "tokens": num_tokens,
            "entropy": losses.masked_token_mean(jax.lax.stop_gradient(entropy), loss_mask),
            "answer_prob": losses.answer_probability(logprobs, loss_mask),
            "grad_norm": optax.tree.norm(grads),
            "lr": hp.lr * lr_scale,
        }
        return state, metrics

    def _optimizer(self, hp: Any, lr_scale: jax.Array | float) -> optax.GradientTransformation:
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

    def _model_params(self, trainable: Any, base: Any) -> Any:
        """The parameters the model runs with: the trained ones, or base + LoRA."""
        return trainable if self.lora is None else apply_lora(base, trainable, self.lora)

    def merged_params(self, state: SFTState) -> Any:
        """One agent's plain model parameters (LoRA merged into the base)."""
        if self.lora is None:
            return state.params
        return merge_lora(state.base_params, state.params, self.lora)

    # ------------------------------------------------------------------ mesh hooks
    def make_mesh(self, num_devices: int | None) -> Mesh:
        """`data x fsdp x tensor` over the first `num_devices` devices; `mesh_fsdp` and
        `mesh_tensor` from the config, `data` the rest."""
        c = self.config
        devices = mesh_lib.select_devices(num_devices)
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
            c.batch_size % rows == 0,
            "batch_size",
            c.batch_size,
            f"a multiple of data x fsdp = {rows} (the batch rows are split over them)",
        )
        return mesh

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

    # ------------------------------------------------------------------ evaluation
    def accuracy(self, params: Any, examples: Sequence[tasks.Example]) -> float:
        """Exact-match accuracy of greedy completions of `examples`' prompts (one agent's
        plain model parameters)."""
        size = self.config.eval_batch_size
        correct = 0
        for start in range(0, len(examples), size):
            chunk = examples[start : start + size]
            prompts = [encode_example(self.tokenizer, *e)[0] for e in chunk]
            prompts += [prompts[0]] * (size - len(prompts))  # one shape: compiled once
            tokens, mask = _left_pad(prompts, self.prompt_len, self.tokenizer.pad_id)
            out = generate(
                self.model,
                params,
                tokens,
                jax.random.key(0),  # unused: greedy
                max_new_tokens=self.answer_len,
                temperature=0.0,
                eos_id=self.tokenizer.eos_id,
                prompt_mask=mask,
                pad_id=self.tokenizer.pad_id,
            )
            texts = decode_completions(self.tokenizer, out.tokens, out.completion_mask)
            correct += sum(
                self.task.is_correct(text, e.answer) for text, e in zip(texts, chunk, strict=False)
            )
        return correct / len(examples)

    def evaluate(self, state: SFTState, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """Held-out greedy exact match per agent on the first `num_episodes` held-out
        prompts (all when None or 0). `key` is unused: greedy decoding is deterministic."""
        del key
        examples = self.task.eval_examples()
        examples = examples[:num_episodes] if num_episodes else examples
        return {"eval_accuracy": np.asarray(self._per_agent_accuracy(state, examples))}

    def finish(self, state: SFTState, run_dir: Any) -> dict[str, Any]:
        """Held-out accuracy (mean and per agent) and, with a run directory, agent 0's
        model exported to `run_dir/model/` (LoRA merged; Hugging Face layout)."""
        per_agent = self._per_agent_accuracy(state, self.task.eval_examples())
        summary: dict[str, Any] = {
            "eval_accuracy": float(np.mean(per_agent)),
            "eval_accuracy_per_agent": per_agent,
        }
        if run_dir is not None and jax.process_index() == 0:
            model_dir = pathlib.Path(run_dir) / MODEL_DIR
            self.export(_agent(state, 0), model_dir)
            summary["model_dir"] = str(model_dir)
        return summary

    def _per_agent_accuracy(
        self, state: SFTState, examples: Sequence[tasks.Example]
    ) -> list[float]:
        num_agents = int(state.update_step.shape[0])
        return [
            self.accuracy(self.merged_params(_agent(state, i)), examples) for i in range(num_agents)
        ]

    def export(self, state: SFTState, directory: str | pathlib.Path) -> None:
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


def make(config: SFTConfig) -> SFT:
    """The SFT algorithm for `config` (validated; bad input raises `ConfigError`)."""
    return SFT(config)


# ---------------------------------------------------------------------- pure helpers
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


def random_model_config(config: SFTConfig, vocab_size: int) -> ModelConfig:
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
    for candidate in (path, path / MODEL_DIR):
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
            "in tokenizer_config.json); SFT teaches the model to stop with it"
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


def _agent(state: Any, i: int) -> Any:
    """Agent `i` of an agent-stacked pytree."""
    return jax.tree.map(lambda x: x[i], state)


def _left_pad(rows: Sequence[Sequence[int]], length: int, pad_id: int) -> tuple[Any, Any]:
    """Left-padded `(tokens int32, mask bool)` of shape (len(rows), length)."""
    tokens = np.full((len(rows), length), pad_id, np.int32)
    mask = np.zeros((len(rows), length), bool)
    for i, ids in enumerate(rows):
        tokens[i, length - len(ids) :] = ids
        mask[i, length - len(ids) :] = True
    return tokens, mask
