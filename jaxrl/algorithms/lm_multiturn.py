"""Multi-turn episodes for the token-rollout algorithms: the model and a Python
environment take turns (multi-turn GRPO, `grpo/multiturn.py`; multi-turn PPO-LM,
`ppo_lm/multiturn.py`).

A multi-turn task (`jaxrl/tasks/multiturn.py`) answers each model turn with feedback
(a checker's verdict, tool output) and a turn reward. The environment runs on the host
between compiled sampling rounds, so one update uses the driver's rounds (`respond` in
`jaxrl/training/contract.py`), all inside the update (`MultiTurnRollout`):

  * `prepare` (host): the prompts as single-turn GRPO draws them, each repeated
    `group_size` times: one row per episode, its context the first prompt.
  * `collect` (jitted, once per turn, one program for every turn): one model turn of
    every row, at most `max_new_tokens` tokens, ended by eos (or a tool call's end).
  * `respond` (host, after each turn): decodes each live row's turn, asks the task for
    feedback and the turn's reward (`task.turns`: every live row of every agent at
    once, so a tool task runs the turn's calls concurrently), appends the model's
    tokens and the environment's; returns the next turn's inputs, or None once every
    episode has ended (at the latest after `task.max_turns` turns).
  * `process` (host): one token row per episode, the model-token mask, the turn rewards,
    dynamic sampling and metrics.
  * `learn` (jitted, each algorithm's own): re-scores the whole rows with the
    parameters that sampled them (`rescored`), then the algorithm's learning step.

One episode is one token row (P = the longest first prompt, T = `max_new_tokens` per
turn, F = the longest feedback, N = `task.max_turns`; width after the prompt
W = N T + (N - 1) F; C = P + W - T):

    [pad .. prompt][turn 1 .. eos][feedback 1][turn 2 .. eos] .. [pad ..]
    <- P, left-padded -><---------- W, padded on the right --------------->

`completion_mask` is 1 on the model's tokens only, so the environment's tokens are in
the context (attended to) but out of the loss, the KL and the entropy terms (and out of
PPO-LM's value loss and GAE); the policy ratio and every aggregation count model tokens
only (the masks of `jaxrl.objectives` allow such holes). Rewards: each turn's reward
sits on that turn's last token (`token_rewards`).

KV-cache reuse across turns (`reuse_kv_cache`, the default). Each agent's episodes keep
one KV cache in the state (`episode_cache`, S slots per row) from turn to turn of an
update; a turn prefills only the tokens the cache does not hold yet (the first turn:
the prompt, P wide, once per group of episodes of one prompt; later turns: the
environment's answer and at most one token of the model's reply, F + 1 wide,
`jaxrl.lm.prefill`), then decodes (`jaxrl.lm.sample_from_cache`).
The host keeps the books (`CacheSlots`): which slots hold a real token of each row
(a block's left padding, the padding stopped rows consume while others decode, and what a
tool call cut off are masked), sent with every turn's inputs as the cache's slot mask.
Rotary positions count a row's real tokens, so a turn computes what re-reading the
whole context would, up to float rounding (tests/algorithms/test_multiturn_cache.py).
S = P + (N - 1)(F + 1) + N (T - 1): a turn's decoding writes at most T - 1 slots (the
last sampled token is written by the next prefill). Without reuse every turn
re-prefills the whole context (C tokens, left-padded) with `generate`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import prng, tasks
from jaxrl.algorithms.lm_common import encode_example, left_pad
from jaxrl.algorithms.lm_rollout import PASS_AT_KS, RolloutAlgorithm, select_groups
from jaxrl.config import ConfigError
from jaxrl.lm import KVCache, cache_sharding, init_cache, prefill, sample_from_cache
from jaxrl.lm.tokenizer import Tokenizer
from jaxrl.tasks.metrics import pass_at_k
from jaxrl.tasks.multiturn import MultiTurnTask
from jaxrl.training import mesh as mesh_lib


# ---------------------------------------------------------------------- episodes on the host
@dataclasses.dataclass
class EpisodeRow:
    """One episode while it is played, on the host: its tokens, who wrote each, and
    the protocol's texts and rewards (`jaxrl/tasks/multiturn.py`)."""

    example: tasks.Example
    prompt_len: int  # tokens of the first prompt (the first tokens of `tokens`)
    tokens: list[int]  # every real token so far: the prompt, then the turns
    model: list[bool]  # which of them the model sampled
    sampler_logp: list[float]  # the sampler's log-prob of each model token (0 elsewhere)
    token_rewards: list[float]  # each turn's reward on its last token (0 elsewhere)
    turn_of_token: list[int]  # the model turn each token belongs to (-1: not the model's)
    history: list[str]  # the texts: prompt, reply, feedback, reply, ...
    rewards: list[float]  # one per model turn
    clipped: int = 0  # turns cut at the token budget (no eos)
    done: bool = False

    @property
    def replies(self) -> list[str]:
        return self.history[1::2]


def encode_text(tokenizer: Tokenizer, text: str) -> list[int]:
    """Token ids of text inside a row (no special prefix, no eos), encoded as an answer is."""
    return encode_example(tokenizer, "", text)[1][:-1]


def start_episodes(
    task: MultiTurnTask, tokenizer: Tokenizer, examples: Sequence[tasks.Example], repeat: int
) -> list[EpisodeRow]:
    """A new episode per example, each `repeat` times in a row (GRPO's groups)."""
    rows = []
    for example in examples:
        prompt = task.reset(example)
        ids = encode_example(tokenizer, prompt, example.answer)[0]
        for _ in range(repeat):
            rows.append(
                EpisodeRow(
                    example=example,
                    prompt_len=len(ids),
                    tokens=list(ids),
                    model=[False] * len(ids),
                    sampler_logp=[0.0] * len(ids),
                    token_rewards=[0.0] * len(ids),
                    turn_of_token=[-1] * len(ids),
                    history=[prompt],
                    rewards=[],
                )
            )
    return rows


def add_turn(
    task: MultiTurnTask,
    tokenizer: Tokenizer,
    rows: Sequence[EpisodeRow],
    turn: dict[str, np.ndarray],
    feedback_len: int,
) -> list[int]:
    """Records one sampled turn in every live row (in place): the model's tokens (through
    eos) and their log-probs, the task's reward on the turn's last token, and the
    feedback's tokens, or the end of the episode. Returns how many sampled tokens each
    row kept (0 for an episode that had already ended; fewer than sampled when a tool
    call ended the reply).

    `turn`: `tokens`, `completion_mask` and `sampler_logp` (rows, T), `finished` (rows,),
    as `generate` returns them. Feedback longer than `feedback_len` tokens (the task's
    `longest_feedback` was wrong) raises `ValueError`.
    """
    return add_turns(task, tokenizer, [rows], [turn], feedback_len)[0]


def add_turns(
    task: MultiTurnTask,
    tokenizer: Tokenizer,
    batches: Sequence[Sequence[EpisodeRow]],
    turns: Sequence[dict[str, np.ndarray]],
    feedback_len: int,
) -> list[list[int]]:
    """`add_turn` for several batches of rows (one per agent) and their turns, with one
    `task.turns` for every live row of all of them: the environment answers the whole
    turn at once (a tool task runs the turn's calls concurrently), in row order, so the
    rows are what `add_turn` row after row would make."""
    replies = []  # (batch, row, sampled ids, their log-probs, the decoded reply)
    for b, (rows, turn) in enumerate(zip(batches, turns, strict=True)):
        for i, row in enumerate(rows):
            if row.done:
                continue
            keep = turn["completion_mask"][i]
            ids = turn["tokens"][i][keep].tolist()
            logp = turn["sampler_logp"][i][keep].tolist()
            replies.append((b, i, ids, logp, tokenizer.decode(ids)))  # decode drops the eos
    answers = task.turns(
        [(batches[b][i].example, batches[b][i].history, reply) for b, i, *_, reply in replies]
    )
    kept_counts = [[0] * len(rows) for rows in batches]  # 0: the episode had ended
    # The environment's answers repeat across rows (guess: " higher:" or " lower:"): each
    # text is encoded once per turn (host work between two compiled turns, per row).
    encoded: dict[str, list[int]] = {}
    for (b, i, ids, logp, reply), (feedback, reward, reply_end) in zip(
        replies, answers, strict=True
    ):
        row = batches[b][i]
        if reply_end is not None:  # a tool call ended the turn: drop what came after it
            kept = tokens_covering(tokenizer, ids, reply_end)
            ids, logp, reply = ids[:kept], logp[:kept], reply[:reply_end]
        kept_counts[b][i] = len(ids)
        row.turn_of_token += [len(row.rewards)] * len(ids)
        row.tokens += ids
        row.model += [True] * len(ids)
        row.sampler_logp += logp
        row.token_rewards += [0.0] * len(ids)
        if ids:
            row.token_rewards[-1] = reward
        row.history.append(reply)
        row.rewards.append(reward)
        row.clipped += int(not turns[b]["finished"][i])
        if feedback is None:
            row.done = True
            continue
        if feedback not in encoded:
            encoded[feedback] = encode_text(tokenizer, feedback)
        feedback_ids = encoded[feedback]
        if len(feedback_ids) > feedback_len:
            raise ValueError(
                f"task {task.name!r} gave feedback of {len(feedback_ids)} tokens, more than "
                f"the {feedback_len} its longest_feedback() promised: {feedback!r}"
            )
        row.tokens += feedback_ids
        row.model += [False] * len(feedback_ids)
        row.sampler_logp += [0.0] * len(feedback_ids)
        row.token_rewards += [0.0] * len(feedback_ids)
        row.turn_of_token += [-1] * len(feedback_ids)
        row.history.append(feedback)
    return kept_counts


def tokens_covering(tokenizer: Tokenizer, ids: Sequence[int], chars: int) -> int:
    """The fewest leading tokens of `ids` whose text holds the first `chars` characters
    of their decoding (a character tokenizer: `chars`)."""
    for n in range(len(ids) + 1):
        if len(tokenizer.decode(ids[:n])) >= chars:
            return n
    return len(ids)


def contexts(rows: Sequence[EpisodeRow], length: int, pad_id: int) -> tuple[Any, Any]:
    """The rows' texts so far, left-padded: `(tokens, mask)`, (rows, length). Ended
    episodes are included (fixed shapes); what is sampled after them is never used."""
    return left_pad([row.tokens for row in rows], length, pad_id)


def episode_batch(
    rows: Sequence[EpisodeRow], prompt_len: int, width: int, pad_id: int
) -> dict[str, np.ndarray]:
    """The learning rows of finished episodes (see the module docstring's layout).

    Returns `tokens` (int32) and `mask` (real tokens), (rows, prompt_len + width);
    `completion_mask` (the model's tokens), `sampler_logp` and `token_rewards`, each
    (rows, width) and aligned with the part after the prompt; `rewards` (rows,), the
    episodes' returns.
    """
    n = len(rows)
    tokens = np.full((n, prompt_len + width), pad_id, np.int32)
    mask = np.zeros((n, prompt_len + width), bool)
    completion_mask = np.zeros((n, width), bool)
    sampler_logp = np.zeros((n, width), np.float32)
    token_rewards = np.zeros((n, width), np.float32)
    for i, row in enumerate(rows):
        start, p, end = prompt_len - row.prompt_len, row.prompt_len, len(row.tokens)
        tokens[i, start : start + end] = row.tokens
        mask[i, start : start + end] = True
        completion_mask[i, : end - p] = row.model[p:]
        sampler_logp[i, : end - p] = row.sampler_logp[p:]
        token_rewards[i, : end - p] = row.token_rewards[p:]
    return {
        "tokens": tokens,
        "mask": mask,
        "completion_mask": completion_mask,
        "sampler_logp": sampler_logp,
        "token_rewards": token_rewards,
        "rewards": np.asarray([sum(row.rewards) for row in rows], np.float32),
    }


def later_turn_accuracy(rows: Sequence[EpisodeRow], success: np.ndarray) -> float:
    """Of the episodes that went past their first turn, the fraction solved (`success`:
    the last reply correct) in a later turn; 0 when every episode ended at turn 1."""
    later = np.asarray([len(row.rewards) > 1 for row in rows])
    return float(success[later].mean()) if later.any() else 0.0


# ---------------------------------------------------------------------- the KV cache's books
@dataclasses.dataclass
class CacheSlots:
    """The host's record of one batch of episodes' KV cache (see the module docstring):
    which slots hold a real token of each row, where the next block goes, and how many
    of each row's tokens the cache holds.

    A turn: `next_inputs` (the tokens each row still has to prefill, left-padded, and
    the slot mask) -> the device prefills and decodes -> `add_turn` -> `record` (the
    block's real slots, then the decoded tokens each row kept)."""

    mask: np.ndarray  # (rows, slots) bool
    cached: np.ndarray  # (rows,) int: leading tokens of `EpisodeRow.tokens` in the cache
    index: int = 0  # the slot the next block is written at
    block: np.ndarray | None = None  # (rows, width) bool: the block sent, until recorded

    @classmethod
    def empty(cls, rows: int, slots: int) -> CacheSlots:
        return cls(np.zeros((rows, slots), bool), np.zeros(rows, np.int64))

    def next_inputs(
        self, rows: Sequence[EpisodeRow], block: int, width: int, decode_slots: int, pad_id: int
    ) -> dict[str, np.ndarray]:
        """The next turn's inputs: each live row's tokens the cache does not hold yet,
        left-padded to `width` (the device prefills the last `block` columns, so the
        rest stays padding), and `cache_mask`, the real slots so far (all False before
        an episode's first turn, which is how the device tells a first turn). A
        `ValueError` when a row has more than `block` new tokens, a `RuntimeError` when
        the block and `decode_slots` decoded tokens would not fit in the cache."""
        new = [[] if row.done else row.tokens[self.cached[i] :] for i, row in enumerate(rows)]
        longest = max(len(ids) for ids in new)
        if longest > block:
            raise ValueError(
                f"a row has {longest} tokens to prefill, more than the block of {block} "
                "(the environment's longest answer plus one token of the reply)"
            )
        if self.index + block + decode_slots > self.mask.shape[1]:
            raise RuntimeError(
                f"the episode KV cache of {self.mask.shape[1]} slots has no room for a block "
                f"of {block} and {decode_slots} decoded tokens at slot {self.index}"
            )
        tokens, mask = left_pad(new, width, pad_id)
        self.block = mask[:, width - block :]
        return {"tokens": tokens, "mask": mask, "cache_mask": self.mask.copy()}

    def record(self, kept: Sequence[int], decode_start: int, cache_index: int) -> None:
        """After a turn: the block's real slots, then the first `kept[i]` decoded tokens
        of row i that the cache holds (slot `decode_start + j` holds the token sampled at
        step j, up to `cache_index`, the cache's index after decoding)."""
        width = self.block.shape[1]
        if decode_start != self.index + width:
            raise RuntimeError(
                f"the device wrote the block at {decode_start - width}, the books say {self.index}"
            )
        self.mask[:, self.index : decode_start] = self.block
        self.cached += self.block.sum(1)
        written = cache_index - decode_start
        held = np.minimum(np.asarray(kept, np.int64), written)  # decoded tokens cached per row
        self.mask[:, decode_start:cache_index] = np.arange(written)[None, :] < held[:, None]
        self.cached += held
        self.index, self.block = int(cache_index), None


# ---------------------------------------------------------------------- the algorithms' part
class MultiTurnRollout(RolloutAlgorithm):
    """The phases of a token-rollout algorithm on multi-turn episodes (see the module
    docstring), all but `init` and `learn`, which each algorithm writes with its own
    state and learning step (`MultiTurnGRPO`, `MultiTurnPPOLM`).

    `max_new_tokens` is the budget of one model turn; `self.max_new_tokens` becomes the
    width W of a row after its prompt (model and environment tokens), which is also the
    constant L of `loss_agg=seq_mean_token_sum_norm`.

    The episodes being played live in the host state's `rollout` (`{"episodes": one
    list of `EpisodeRow`s per agent, "turn": turns played, "slots": one `CacheSlots` per
    agent with KV reuse}`) from `prepare` to `process`, which removes them: nothing of
    an update outlives it. The KV cache is the state's `episode_cache` (None without
    reuse), excluded from checkpoints: every update starts it afresh.
    """

    multi_turn = True  # `episode_cache` is in RolloutAlgorithm.checkpoint_exclude

    def __init__(self, config: Any):
        super().__init__(config)
        c, task = self.config, self.task
        if not isinstance(task, MultiTurnTask):
            raise ConfigError(f"invalid task={c.task!r}: not a multi-turn task")
        if c.reward != "correct":
            raise ConfigError(
                f"invalid reward={c.reward!r}: a multi-turn task's rewards are its turn "
                "rewards (task.step); leave reward at 'correct'"
            )
        if c.overlong_cache:
            raise ConfigError(
                f"invalid overlong_cache={c.overlong_cache}: DAPO's overlong penalty is for "
                "single-turn completions; use 0 with a multi-turn task"
            )
        self.turn_tokens = self.max_new_tokens  # T, one model turn
        # Texts that end a model turn besides eos (a tool call's end marker), as tokens.
        self.turn_stops = [encode_text(self.tokenizer, s) for s in self.task.stop_strings()]
        self.feedback_len = max(
            (len(encode_text(self.tokenizer, f)) for f in task.longest_feedback()), default=0
        )
        n = self.max_rounds = task.max_turns
        self.max_new_tokens = n * self.turn_tokens + (n - 1) * self.feedback_len  # W
        self.context_len = self.prompt_len + self.max_new_tokens - self.turn_tokens  # C
        context = self.model.config.max_position_embeddings
        if self.prompt_len + self.max_new_tokens > context:
            field = "max_new_tokens" if c.max_new_tokens is not None else "context_len"
            raise ConfigError(
                f"invalid {field}={getattr(c, field)!r}: an episode of task {c.task!r} "
                f"needs {self.prompt_len + self.max_new_tokens} tokens (prompt "
                f"{self.prompt_len}, {n} turns of {self.turn_tokens}, {n - 1} feedbacks of "
                f"{self.feedback_len}), more than the model's context of {context}"
            )
        # KV reuse: a later turn's block is the feedback and at most one reply token.
        self.block_len = self.feedback_len + 1
        self.block_width = max(self.prompt_len, self.block_len)  # the inputs' width
        self.cache_len = (
            self.prompt_len + (n - 1) * self.block_len + n * (self.turn_tokens - 1)
        )  # S

    @property
    def reuses_cache(self) -> bool:
        return bool(self.config.reuse_kv_cache)

    def with_episode_cache(self, state: Any) -> Any:
        """`state` with an empty episode KV cache (`reuse_kv_cache`), rows x S slots in
        the sampling model's compute dtype; unchanged without reuse."""
        if not self.reuses_cache:
            return state
        model, _ = self.rollout_model(None)
        rows = self.prompts_per_update * self.config.group_size
        return state.replace(episode_cache=init_cache(model.config, rows, self.cache_len))

    def state_sharding(self, abstract_state: Any, mesh: Any, num_agents: int) -> Any:
        """The LM rules (`LMAlgorithm.state_sharding`), and the episode KV cache's rows
        over `data x fsdp` and its kv heads over `tensor`, as `generate` places a cache."""
        shardings = super().state_sharding(abstract_state, mesh, num_agents)
        cache = abstract_state.episode_cache
        if cache is None:
            return shardings
        model, _ = self.rollout_model(None)
        kv = cache_sharding(model.config, mesh, cache.mask.shape[1])
        rows = jax.sharding.PartitionSpec(kv.spec[0] if len(kv.spec) else None, None)
        placed = KVCache(
            k=tuple(kv for _ in cache.k),
            v=tuple(kv for _ in cache.v),
            index=mesh_lib.replicated(mesh),
            mask=jax.sharding.NamedSharding(mesh, rows),
        )
        return shardings.replace(episode_cache=mesh_lib.with_agent_axis(placed))

    # ------------------------------------------------------------------ sampling rounds
    def prepare(self, host_state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict]:
        """Every agent's new episodes (`group_size` per prompt) and their first turn's
        inputs (`turn_inputs`), each (agents, rows, ...)."""
        examples, host_state = self.draw_examples(host_state)
        episodes = [
            start_episodes(self.task, self.tokenizer, e, self.config.group_size) for e in examples
        ]
        rollout: dict[str, Any] = {"episodes": episodes, "turn": 0}
        if self.reuses_cache:
            rollout["slots"] = [CacheSlots.empty(len(rows), self.cache_len) for rows in episodes]
        inputs = self._stack(
            [self.turn_inputs(rows, rollout, i) for i, rows in enumerate(episodes)]
        )
        return inputs, {**host_state, "rollout": rollout}

    def turn_inputs(self, rows: Sequence[EpisodeRow], rollout: dict, i: int) -> dict:
        """One agent's inputs to its next turn: with KV reuse the tokens its cache does
        not hold yet (`tokens`, `mask`: (rows, max(P, F + 1))) and `cache_mask` (rows,
        S); without, the whole contexts (`tokens`, `mask`: (rows, C))."""
        if not self.reuses_cache:
            tokens, mask = contexts(rows, self.context_len, self.tokenizer.pad_id)
            return {"tokens": tokens, "mask": mask}
        block = self.prompt_len if rollout["turn"] == 0 else self.block_len
        return rollout["slots"][i].next_inputs(
            rows, block, self.block_width, self.turn_tokens - 1, self.tokenizer.pad_id
        )

    @staticmethod
    def _stack(per_agent: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {name: np.stack([x[name] for x in per_agent]) for name in per_agent[0]}

    def collect(self, state: Any, inputs: dict[str, jax.Array]):
        """One model turn of every row of one agent, continuing its context (from the
        episode KV cache, or re-read whole without reuse)."""
        key, k_sample = prng.split(state.key)
        params = self.model_params(state.params, state.base_params)
        if state.episode_cache is None:
            turn = self._sample_turn(params, inputs["tokens"], inputs["mask"], k_sample)
            return state.replace(key=key), jax.tree.map(jax.lax.stop_gradient, turn)
        model, params = self.rollout_model(params)
        cache, turn = self.cached_turn(
            model, params, state.episode_cache, inputs, k_sample, self.config.group_size
        )
        state = state.replace(key=key, episode_cache=cache)
        return state, jax.tree.map(jax.lax.stop_gradient, turn)

    def _sample_turn(self, params, tokens, mask, key) -> dict[str, jax.Array]:
        """`generate` one turn (at most T tokens, eos ends it) after each row's context."""
        out = self.rollout_sample(
            params,
            tokens,
            mask,
            key,
            max_new_tokens=self.turn_tokens,
            temperature=self.config.temperature,
            stop_sequences=self.turn_stops or None,
        )
        return {
            "tokens": out.tokens,
            "completion_mask": out.completion_mask,
            "finished": out.finished,
            "sampler_logp": out.logprobs,
        }

    def cached_turn(
        self,
        model: Any,
        params: Any,
        cache: KVCache,
        inputs: dict[str, jax.Array],
        key: jax.Array,
        group: int,
    ) -> tuple[KVCache, dict[str, jax.Array]]:
        """One turn from the episode KV cache: prefill the new tokens, then decode at
        most T tokens with the same keys as `generate`.

        A first turn (`cache_mask` holds nothing) prefills the prompt once per `group`
        of rows (the rows are prompt-major groups of `group` episodes of one prompt, as
        `start_episodes` lays them out) and writes it into every row of its group from
        slot 0, as `generate` prefills a prompt once for its samples; a later turn
        prefills each row's last F + 1 columns at the cache's index. Returns the cache
        and the turn (as `_sample_turn`, plus `decode_start` and `cache_index`, the
        cache's index before and after decoding, for `CacheSlots.record`)."""
        tokens, mask = inputs["tokens"], inputs["mask"]
        cache = cache.replace(mask=inputs["cache_mask"])
        p, width = self.prompt_len, self.block_len

        def first_turn(cache: KVCache) -> tuple[jax.Array, KVCache]:
            prompts = init_cache(model.config, tokens.shape[0] // group, p)
            logits, prompts = prefill(
                model, params, tokens[::group, -p:], prompts, mask=mask[::group, -p:]
            )
            copy = lambda big, small: jax.lax.dynamic_update_slice(  # noqa: E731
                big, jnp.repeat(small, group, axis=0), (0,) * big.ndim
            )
            cache = cache.replace(
                k=tuple(copy(big, small) for big, small in zip(cache.k, prompts.k, strict=True)),
                v=tuple(copy(big, small) for big, small in zip(cache.v, prompts.v, strict=True)),
                mask=copy(cache.mask, prompts.mask),
                index=prompts.index,
            )
            return jnp.repeat(logits, group, axis=0), cache

        def later_turn(cache: KVCache) -> tuple[jax.Array, KVCache]:
            return prefill(model, params, tokens[:, -width:], cache, mask=mask[:, -width:])

        first = ~jnp.any(inputs["cache_mask"])
        logits, cache = jax.lax.cond(first, first_turn, later_turn, cache)
        decode_start = cache.index
        out, cache = sample_from_cache(
            model,
            params,
            cache,
            logits,
            key,
            max_new_tokens=self.turn_tokens,
            temperature=self.config.temperature,
            eos_id=self.tokenizer.eos_id,
            pad_id=self.tokenizer.pad_id,
            stop_sequences=self.turn_stops or None,
        )
        return cache, {
            "tokens": out.tokens,
            "completion_mask": out.completion_mask,
            "finished": out.finished,
            "sampler_logp": out.logprobs,
            "decode_start": decode_start,
            "cache_index": cache.index,
        }

    def respond(self, collected: dict[str, np.ndarray], host_state: dict[str, Any]):
        """The environment's answer to the turn just sampled; the next turn's inputs, or
        None when every episode has ended (at the latest after `task.max_turns` turns)."""
        rollout = dict(host_state["rollout"])
        episodes = rollout["episodes"]
        turns = [
            {name: value[i] for name, value in collected.items()} for i in range(len(episodes))
        ]
        # Every agent's rows at once: a tool task runs all of the turn's calls together.
        kept = add_turns(self.task, self.tokenizer, episodes, turns, self.feedback_len)
        if self.reuses_cache:
            for i, turn in enumerate(turns):
                rollout["slots"][i].record(
                    kept[i], int(turn["decode_start"]), int(turn["cache_index"])
                )
        rollout["turn"] += 1
        host_state = {**host_state, "rollout": rollout}
        live = any(not row.done for rows in episodes for row in rows)
        if not live or rollout["turn"] >= self.task.max_turns:
            return None, host_state
        inputs = [self.turn_inputs(rows, rollout, i) for i, rows in enumerate(episodes)]
        return self._stack(inputs), host_state

    # ------------------------------------------------------------------ rows and rewards
    def process(self, collected: dict[str, np.ndarray], host_state: dict[str, Any]):
        """The episodes' learning rows (the last turn was recorded by `respond`), with
        dynamic sampling on the episodes' returns; the sampling metrics."""
        del collected
        host_state = dict(host_state)
        episodes = host_state.pop("rollout")["episodes"]
        batches, stats = [], []
        for rows in episodes:
            batch, row_stats = self._episode_agent(rows)
            batches.append(batch)
            stats.append(row_stats)
        batch = {name: np.stack([b[name] for b in batches]) for name in batches[0]}
        metrics = {name: [s[name] for s in stats] for name in stats[0]}
        sampled = sum(sum(row.model) for rows in episodes for row in rows)
        metrics.update(self.clock.metrics(float(sampled)))
        return batch, self.count_stalls(host_state, metrics["zero_advantage_groups"]), metrics

    def episode_fields(self, kept: Sequence[EpisodeRow]) -> dict[str, np.ndarray]:
        """The learning batch of the kept episodes (`episode_batch`); multi-turn GRPO
        adds GiGPO's step groups."""
        return episode_batch(kept, self.prompt_len, self.max_new_tokens, self.tokenizer.pad_id)

    def _episode_agent(self, rows: Sequence[EpisodeRow]):
        """One agent's kept rows and metrics."""
        c, g = self.config, self.config.group_size
        returns = np.asarray([sum(row.rewards) for row in rows], np.float32)
        keep = select_groups(returns, g, c.num_prompts)
        kept = [rows[j] for j in (keep[:, None] * g + np.arange(g)).reshape(-1)]
        batch = self.episode_fields(kept)
        success, first = self._correct(kept)
        kept_returns = batch["rewards"].reshape(-1, g)
        lengths = batch["completion_mask"].sum(1)
        stats = {
            "reward_mean": float(batch["rewards"].mean()),
            "reward_std": float(batch["rewards"].std()),
            "accuracy": float(success.mean()),
            "first_turn_accuracy": float(first.mean()),
            "later_turn_accuracy": later_turn_accuracy(kept, success),
            "sampled_accuracy": float(self._correct(rows)[0].mean()),
            "turns_mean": float(np.mean([len(row.rewards) for row in kept])),
            "response_length_mean": float(lengths.mean()),
            "response_length_max": float(lengths.max()),
            "clipped_fraction": sum(r.clipped for r in kept)
            / max(1, sum(len(r.rewards) for r in kept)),
            "zero_advantage_groups": float(np.mean(kept_returns.max(1) == kept_returns.min(1))),
        }
        return batch, stats

    def _correct(self, rows: Sequence[EpisodeRow]) -> tuple[np.ndarray, np.ndarray]:
        """Whether each episode's last reply, and its first, answers correctly (False
        before any reply: `jaxrl plan` runs `process` on episodes never played)."""
        answer = self.task.is_correct
        last = [bool(r.replies) and answer(r.replies[-1], r.example.answer) for r in rows]
        first = [bool(r.replies) and answer(r.replies[0], r.example.answer) for r in rows]
        return np.asarray(last, np.float64), np.asarray(first, np.float64)

    # ------------------------------------------------------------------ learning
    def rescored(self, state: Any, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
        """`batch` with the whole episode rows re-scored by the parameters that sampled
        them (nothing has changed them since): `rescore`'s trainer and reference
        log-probs. Each algorithm's `learn` starts with it."""
        params = self.model_params(state.params, state.base_params)
        scored = self.rescore(state, params, batch["tokens"], batch["mask"])
        return {**batch, **jax.tree.map(jax.lax.stop_gradient, scored)}

    # ------------------------------------------------------------------ evaluation
    @functools.cached_property
    def _play_turn(self) -> Callable[..., Any]:
        """`cached_turn` by the learner's model, jitted (evaluation's turns)."""
        return jax.jit(functools.partial(self.cached_turn, self.model), static_argnames="group")

    def play(
        self, params: Any, examples: Sequence[tasks.Example], key: jax.Array, samples: int
    ) -> list[EpisodeRow]:
        """`samples` episodes per example at `temperature` (one agent's plain model
        parameters), example-major, in batches of about `eval_batch_size` rows; with KV
        reuse as training does."""
        size = max(1, self.config.eval_batch_size // samples)
        played: list[EpisodeRow] = []
        for start in range(0, len(examples), size):
            chunk = list(examples[start : start + size])
            padded = chunk + [chunk[0]] * (size - len(chunk))  # one shape: compiled once
            rows = start_episodes(self.task, self.tokenizer, padded, samples)
            rollout: dict[str, Any] = {"turn": 0}
            if self.reuses_cache:
                rollout["slots"] = [CacheSlots.empty(len(rows), self.cache_len)]
                cache = init_cache(self.model.config, len(rows), self.cache_len)
            for _ in range(self.task.max_turns):
                inputs = self.turn_inputs(rows, rollout, 0)
                key, k_sample = jax.random.split(key)
                if self.reuses_cache:
                    cache, turn = self._play_turn(params, cache, inputs, k_sample, group=samples)
                else:
                    turn = self._sample_turn(params, inputs["tokens"], inputs["mask"], k_sample)
                turn = jax.device_get(turn)
                kept = add_turn(self.task, self.tokenizer, rows, turn, self.feedback_len)
                if self.reuses_cache:
                    start_slot, end_slot = int(turn["decode_start"]), int(turn["cache_index"])
                    rollout["slots"][0].record(kept, start_slot, end_slot)
                rollout["turn"] += 1
                if all(row.done for row in rows):
                    break
            played += rows[: len(chunk) * samples]
        return played

    def held_out_metrics(
        self, params: Any, examples: Sequence[tasks.Example], key: jax.Array
    ) -> dict[str, float]:
        """What `evaluate` (`jaxrl eval`) and `finish` (`summary.json`'s `_before` and
        `_after`) report, from `eval_samples` episodes per example (`play`): pass@k of
        solving the episode (its last reply correct; k = 1, 2, 4, ... up to
        `eval_samples`), pass@1 of the first turn and of the later turns (of the episodes
        that got there), mean return and turns."""
        n = self.config.eval_samples
        rows = self.play(params, examples, key, n)
        success, first = self._correct(rows)
        counts = np.full(len(examples), n)
        solved = success.reshape(-1, n).sum(1)
        result = {
            f"pass@{k}": float(np.mean(pass_at_k(counts, solved, k))) for k in PASS_AT_KS if k <= n
        }
        result["first_turn_pass@1"] = float(first.mean())
        result["later_turn_pass@1"] = later_turn_accuracy(rows, success)
        result["return_mean"] = float(np.mean([sum(row.rewards) for row in rows]))
        result["turns_mean"] = float(np.mean([len(row.rewards) for row in rows]))
        return result
