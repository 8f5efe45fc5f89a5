"""GRPO on multi-turn episodes: the model and a Python environment take turns.

A multi-turn task (`jaxrl/tasks/multiturn.py`) answers each model turn with feedback
(a checker's verdict, tool output) and a turn reward. The environment runs on the host
between compiled sampling rounds, so one update uses the driver's rounds (`respond` in
`jaxrl/training/contract.py`), all inside the update:

  * `prepare` (host): the prompts as single-turn GRPO draws them, each repeated
    `group_size` times: one row per episode, its context the first prompt.
  * `collect` (jitted, once per turn, one program for every turn): one model turn of
    every row, continuing its context (left-padded to the fixed length C) with
    `generate`, at most `max_new_tokens` tokens, ended by eos.
  * `respond` (host, after each turn): decodes each live row's turn, asks the task for
    feedback and the turn's reward (`task.turn`), appends the model's tokens and the
    environment's; returns the next contexts, or None once every episode has ended (at
    the latest after `task.max_turns` turns).
  * `process` (host): one token row per episode, the model-token mask, the turn rewards,
    dynamic sampling and metrics.
  * `learn` (jitted): re-scores the whole rows with the parameters that sampled them
    (the trainer's log-probs, the ratio's denominator; entropies; the reference's
    log-probs), then runs GRPO's learning step (`learning.py`) unchanged.

One episode is one token row (P = the longest first prompt, T = `max_new_tokens` per
turn, F = the longest feedback, N = `task.max_turns`; width after the prompt
W = N T + (N - 1) F; C = P + W - T):

    [pad .. prompt][turn 1 .. eos][feedback 1][turn 2 .. eos] .. [pad ..]
    <- P, left-padded -><---------- W, padded on the right --------------->

`completion_mask` is 1 on the model's tokens only, so the environment's tokens are in
the context (attended to) but out of the loss, the KL and the entropy terms; the policy
ratio and every aggregation count model tokens only (the masks of `jaxrl.objectives`
allow such holes). Rewards: each turn's reward sits on that turn's last token
(`token_rewards`). The group estimators (grpo, dr_grpo, rloo) sum a row's token rewards,
so they see the episode's return, the sum of its turn rewards; `reinforce_pp` takes
the reward-to-go over model tokens, so a turn's tokens are credited with the rewards of
that turn and the turns after it, not those before (Hu 2025; `jaxrl.objectives.masked_gae`
steps over the environment's tokens).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import prng, tasks
from jaxrl.algorithms.lm_common import encode_example, left_pad
from jaxrl.algorithms.lm_rollout import PASS_AT_KS, RolloutAlgorithm, select_groups
from jaxrl.config import ConfigError
from jaxrl.lm.tokenizer import Tokenizer
from jaxrl.tasks.metrics import pass_at_k
from jaxrl.tasks.multiturn import MultiTurnTask

from . import learning
from .config import SWEEPABLE, GRPOConfig
from .learning import GRPOState


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
) -> None:
    """Records one sampled turn in every live row (in place): the model's tokens (through
    eos) and their log-probs, the task's reward on the turn's last token, and the
    feedback's tokens, or the end of the episode.

    `turn`: `tokens`, `completion_mask` and `sampler_logp` (rows, T), `finished` (rows,),
    as `generate` returns them. Feedback longer than `feedback_len` tokens (the task's
    `longest_feedback` was wrong) raises `ValueError`.
    """
    for i, row in enumerate(rows):
        if row.done:
            continue
        keep = turn["completion_mask"][i]
        ids = turn["tokens"][i][keep].tolist()
        logp = turn["sampler_logp"][i][keep].tolist()
        reply = tokenizer.decode(ids)  # drops the eos
        feedback, reward, reply_end = task.turn(row.example, row.history, reply)
        if reply_end is not None:  # a tool call ended the turn: drop what came after it
            kept = tokens_covering(tokenizer, ids, reply_end)
            ids, logp, reply = ids[:kept], logp[:kept], reply[:reply_end]
        row.turn_of_token += [len(row.rewards)] * len(ids)
        row.tokens += ids
        row.model += [True] * len(ids)
        row.sampler_logp += logp
        row.token_rewards += [0.0] * len(ids)
        if ids:
            row.token_rewards[-1] = reward
        row.history.append(reply)
        row.rewards.append(reward)
        row.clipped += int(not turn["finished"][i])
        if feedback is None:
            row.done = True
            continue
        feedback_ids = encode_text(tokenizer, feedback)
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


def step_groups(
    rows: Sequence[EpisodeRow], group_size: int, width: int, max_turns: int
) -> dict[str, np.ndarray]:
    """What GiGPO's step-level advantages need (`objectives.step_group_advantages`), for
    rows in prompt-major groups of `group_size`: `step_returns` (rows, max_turns), each
    turn's return to the episode's end; `step_groups`, ids equal for turns that start
    from the same context (anchor state) within one prompt's group; `step_mask`, the
    turns played; and `turn_of_token` (rows, width), aligned with the completion part of
    `episode_batch`'s rows (-1 off the model's tokens)."""
    n = len(rows)
    returns = np.zeros((n, max_turns), np.float32)
    groups = np.zeros((n, max_turns), np.int32)
    mask = np.zeros((n, max_turns), np.float32)
    turn_of_token = np.full((n, width), -1, np.int32)
    ids: dict[tuple, int] = {}
    for i, row in enumerate(rows):
        turns = len(row.rewards)
        returns[i, :turns] = np.cumsum(row.rewards[::-1])[::-1]
        mask[i, :turns] = 1.0
        after = row.turn_of_token[row.prompt_len :]
        turn_of_token[i, : len(after)] = after
        for k in range(turns):
            start = row.turn_of_token.index(k) if k in row.turn_of_token else len(row.tokens)
            anchor = (i // group_size, tuple(row.tokens[:start]))
            groups[i, k] = ids.setdefault(anchor, len(ids))
    return {
        "step_returns": returns,
        "step_groups": groups,
        "step_mask": mask,
        "turn_of_token": turn_of_token,
    }


def later_turn_accuracy(rows: Sequence[EpisodeRow], success: np.ndarray) -> float:
    """Of the episodes that went past their first turn, the fraction solved (`success`:
    the last reply correct) in a later turn; 0 when every episode ended at turn 1."""
    later = np.asarray([len(row.rewards) > 1 for row in rows])
    return float(success[later].mean()) if later.any() else 0.0


class MultiTurnGRPO(RolloutAlgorithm):
    """GRPO whose completions are multi-turn episodes (see the module docstring): the
    episodes' rollout here, GRPO's state and update from `learning.py`.

    `max_new_tokens` is the budget of one model turn; `self.max_new_tokens` becomes the
    width W of a row after its prompt (model and environment tokens), which is also the
    constant L of `loss_agg=seq_mean_token_sum_norm`.

    The episodes being played live in the host state's `rollout` (`{"episodes": one
    list of `EpisodeRow`s per agent, "turn": turns played}`) from `prepare` to
    `process`, which removes them: nothing of an update outlives it.
    """

    name = "grpo"
    trains_on = "task"
    headline_metric = "accuracy"
    eval_metric = "pass@1"
    sweepable = SWEEPABLE
    multi_turn = True

    def __init__(self, config: GRPOConfig):
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

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> GRPOState:
        """GRPO's policy (and reference), as single-turn GRPO's `init`."""
        return learning.init_state(self, key, hparams, params)

    # ------------------------------------------------------------------ sampling rounds
    def prepare(self, host_state: dict[str, Any]) -> tuple[dict[str, np.ndarray], dict]:
        """Every agent's new episodes (`group_size` per prompt) and their first contexts:
        `{"tokens", "mask"}`, each (agents, rows, C)."""
        examples, host_state = self.draw_examples(host_state)
        episodes = [
            start_episodes(self.task, self.tokenizer, e, self.config.group_size) for e in examples
        ]
        rollout = {"episodes": episodes, "turn": 0}
        return self._contexts(episodes), {**host_state, "rollout": rollout}

    def _contexts(self, episodes: Sequence[Sequence[EpisodeRow]]) -> dict[str, np.ndarray]:
        padded = [contexts(rows, self.context_len, self.tokenizer.pad_id) for rows in episodes]
        return {
            "tokens": np.stack([t for t, _ in padded]),
            "mask": np.stack([m for _, m in padded]),
        }

    def collect(self, state: GRPOState, contexts: dict[str, jax.Array]):
        """One model turn of every row of one agent, continuing its context."""
        key, k_sample = prng.split(state.key)
        params = self.model_params(state.params, state.base_params)
        turn = self._sample_turn(params, contexts["tokens"], contexts["mask"], k_sample)
        return state.replace(key=key), jax.tree.map(jax.lax.stop_gradient, turn)

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

    def respond(self, collected: dict[str, np.ndarray], host_state: dict[str, Any]):
        """The environment's answer to the turn just sampled; the next contexts, or None
        when every episode has ended (at the latest after `task.max_turns` turns)."""
        episodes = host_state["rollout"]["episodes"]
        for i, rows in enumerate(episodes):
            turn = {name: value[i] for name, value in collected.items()}
            add_turn(self.task, self.tokenizer, rows, turn, self.feedback_len)
        turns = host_state["rollout"]["turn"] + 1
        host_state = {**host_state, "rollout": {"episodes": episodes, "turn": turns}}
        live = any(not row.done for rows in episodes for row in rows)
        if not live or turns >= self.task.max_turns:
            return None, host_state
        return self._contexts(episodes), host_state

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

    def _episode_agent(self, rows: Sequence[EpisodeRow]):
        """One agent's kept rows and metrics."""
        c, g = self.config, self.config.group_size
        returns = np.asarray([sum(row.rewards) for row in rows], np.float32)
        keep = select_groups(returns, g, c.num_prompts)
        kept = [rows[j] for j in (keep[:, None] * g + np.arange(g)).reshape(-1)]
        batch = episode_batch(kept, self.prompt_len, self.max_new_tokens, self.tokenizer.pad_id)
        if c.step_advantage_weight:  # GiGPO: the turns' anchor-state groups
            batch.update(step_groups(kept, g, self.max_new_tokens, self.task.max_turns))
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
    def learn(self, state: GRPOState, batch: dict[str, jax.Array]) -> tuple[GRPOState, dict]:
        """GRPO's update (`learning.learn`) on the episode rows, after re-scoring them
        whole with the parameters that sampled them (nothing has changed them since);
        each turn's reward sits on the turn's last token (made by `episode_batch`)."""
        params = self.model_params(state.params, state.base_params)
        scored = self.rescore(state, params, batch["tokens"], batch["mask"])
        batch = {**batch, **jax.tree.map(jax.lax.stop_gradient, scored)}
        cmask = batch["completion_mask"].astype(jnp.float32)
        return learning.learn(self, state, batch, batch["token_rewards"] * cmask)

    # ------------------------------------------------------------------ evaluation
    def play(
        self, params: Any, examples: Sequence[tasks.Example], key: jax.Array, samples: int
    ) -> list[EpisodeRow]:
        """`samples` episodes per example at `temperature` (one agent's plain model
        parameters), example-major, in batches of about `eval_batch_size` rows."""
        size = max(1, self.config.eval_batch_size // samples)
        played: list[EpisodeRow] = []
        for start in range(0, len(examples), size):
            chunk = list(examples[start : start + size])
            padded = chunk + [chunk[0]] * (size - len(chunk))  # one shape: compiled once
            rows = start_episodes(self.task, self.tokenizer, padded, samples)
            for _ in range(self.task.max_turns):
                tokens, mask = contexts(rows, self.context_len, self.tokenizer.pad_id)
                key, k_sample = jax.random.split(key)
                turn = jax.device_get(self._sample_turn(params, tokens, mask, k_sample))
                add_turn(self.task, self.tokenizer, rows, turn, self.feedback_len)
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
