"""Where process rewards come from, for the PRM trainer and the token-rollout algorithms.

A step task (`jaxrl.tasks.StepTask`, e.g. `addition_steps`) writes completions as steps
joined by a separator. This module finds the token that ends each step and scores steps
on the host, in `process`, between the compiled sampling and learning phases:

* `step_end_positions`: the completion token that ends each step (the one whose text
  holds the step's separator; the last token for the last step).
* `encode_step_rows`: right-padded `prompt + solution + eos` rows with a label at every
  step end: the PRM trainer's batches (`jaxrl/algorithms/prm/`), and the rows a trained
  PRM scores.
* `PRMScorer`: a trained PRM loaded from its run directory (frozen: a reward function,
  like the code sandbox, not training state); each step's score is sigmoid of the value
  head at the step's end token, the probability that the steps so far are correct.
* `StepRewards`: the `process_reward` source of GRPO and PPO-LM, `"verifier"` (the task's
  step labels, 1 or 0) or a PRM run directory, laid out as per-token arrays on the
  policy's completion tokens: `process_rewards` (the step's reward on its end token) and
  `step_ends`.

PRIME's implicit PRM is trained inside the learning step instead (a state of its own);
its rewards are per token (`jaxrl.objectives.implicit_process_rewards`,
`RolloutAlgorithm.implicit_prm_rewards`). The formulas that consume step rewards are in
`jaxrl/objectives/process.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxrl import tasks
from jaxrl.algorithms.lm_common import encode_example, resolve_model_dir
from jaxrl.config import ConfigError
from jaxrl.lm import Transformer, from_pretrained, load_tokenizer
from jaxrl.lm.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

IMPLICIT = "implicit"  # `process_reward` for PRIME's implicit PRM
VERIFIER = "verifier"  # `process_reward` for the task's step verifier


def step_end_positions(
    tokenizer: Tokenizer, completion_ids: Sequence[int], separator: str
) -> list[int]:
    """Index in `completion_ids` of the token that ends each step: for every separator in
    the completion's text, the token whose text holds it; then the last token (the eos of
    a finished completion) for the last step. One entry per step of
    `StepTask.split_steps(text)`; an empty completion has none.

    A token's text is decoded on its own: exact for a character tokenizer, and for a
    BPE vocabulary as long as no token splits the separator (a one-character separator
    never is)."""
    ends = []
    for t, token in enumerate(completion_ids):
        ends.extend([t] * tokenizer.decode([int(token)]).count(separator))
    if len(completion_ids):
        ends.append(len(completion_ids) - 1)
    return ends


def encode_step_rows(
    tokenizer: Tokenizer,
    examples: Sequence[tasks.StepExample],
    separator: str,
    max_len: int,
) -> dict[str, np.ndarray]:
    """Right-padded `prompt + steps + eos` rows: `tokens` int32, `mask` (real tokens),
    `label_mask` (the tokens that end a step, `step_end_positions`) and `labels` (1.0 for
    a correct step, 0.0 otherwise, at those tokens), each (len(examples), max_len).

    The last step ends at the eos, which has read the whole solution."""
    shape = (len(examples), max_len)
    out = {
        "tokens": np.full(shape, tokenizer.pad_id, np.int32),
        "mask": np.zeros(shape, bool),
        "label_mask": np.zeros(shape, bool),
        "labels": np.zeros(shape, np.float32),
    }
    for row, example in enumerate(examples):
        prompt, answer = encode_example(tokenizer, example.prompt, separator.join(example.steps))
        ends = step_end_positions(tokenizer, answer, separator)
        if len(ends) != len(example.labels):
            raise ConfigError(
                f"invalid step example {example!r}: {len(example.labels)} labels for "
                f"{len(ends)} steps separated by {separator!r}"
            )
        out["tokens"][row, : len(prompt) + len(answer)] = prompt + answer
        out["mask"][row, : len(prompt) + len(answer)] = True
        positions = [len(prompt) + e for e in ends]
        out["label_mask"][row, positions] = True
        out["labels"][row, positions] = np.asarray(example.labels, np.float32)
    return out


def step_task(task: tasks.Task, field: str, value: Any) -> tasks.StepTask:
    """`task` if it labels steps, else a `ConfigError` naming `field`."""
    if not isinstance(task, tasks.StepTask):
        raise ConfigError(
            f"invalid {field}={value!r}: task {getattr(task, 'name', task)!r} has no step "
            "verifier (a step task such as addition_steps is needed)"
        )
    return task


class PRMScorer:
    """A trained process reward model (a `jaxrl train prm` run, or its `model/`), frozen.

    `step_scores(prompts, texts)` is, per completion, the PRM's probability that each step
    (and every step before it) is correct: sigmoid of its value head at the step's end
    token, read from rows encoded as the PRM was trained (`encode_step_rows`)."""

    def __init__(self, run_dir: str, separator: str, max_len: int, dtype: str = "float32"):
        field = "process_reward"
        try:
            model_dir = resolve_model_dir(run_dir)
            model, params = from_pretrained(model_dir, dtype=dtype)
            self.tokenizer: Tokenizer = load_tokenizer(model_dir)
        except ConfigError as err:
            raise ConfigError(
                f"invalid {field}={run_dir!r}: must be {VERIFIER!r}, {IMPLICIT!r} or the run "
                f"directory of a PRM ({err})"
            ) from None
        except (OSError, ValueError, KeyError) as err:
            raise ConfigError(
                f"invalid {field}={run_dir!r}: cannot load its model ({err})"
            ) from None
        if not model.config.value_head:
            raise ConfigError(
                f"invalid {field}={run_dir!r}: the model in {model_dir} has no value head, "
                "so it is not a process reward model (train one with `jaxrl train prm`)"
            )
        self.model: Transformer = model
        self.params = params
        self.separator = separator
        self.max_len = max_len
        self._values = jax.jit(
            lambda p, tokens, mask: model.apply(p, tokens, attention_mask=mask, return_hidden=True)[
                1
            ]
        )

    def step_scores(self, prompts: Sequence[str], texts: Sequence[str]) -> list[list[float]]:
        """Per completion, the PRM's score of each of its steps in (0, 1) (see the class
        docstring); a completion the PRM's tokenizer cannot encode scores 0 everywhere."""
        examples, steps_per_row = [], []
        for prompt, text in zip(prompts, texts, strict=True):
            steps = tuple(text.strip().split(self.separator))
            examples.append(tasks.StepExample(prompt, steps, (False,) * len(steps)))
            steps_per_row.append(len(steps))
        rows = []
        for example in examples:  # one at a time: a bad row must not sink the batch
            try:
                rows.append(
                    encode_step_rows(self.tokenizer, [example], self.separator, self.max_len)
                )
            except (ValueError, ConfigError) as err:
                logger.warning("PRM cannot score %r: %s", example, err)
                rows.append(None)
        good = [r for r in rows if r is not None]
        scores: list[list[float]] = []
        if good:
            tokens = np.concatenate([r["tokens"] for r in good])
            mask = np.concatenate([r["mask"] for r in good])
            values = np.asarray(self._values(self.params, tokens, mask))
            probabilities = 1.0 / (1.0 + np.exp(-values))
        k = 0
        for row, count in zip(rows, steps_per_row, strict=True):
            if row is None:
                scores.append([0.0] * count)
                continue
            scores.append(probabilities[k][row["label_mask"][0]].tolist())
            k += 1
        return scores


class StepRewards:
    """`process_reward` = "verifier" or a PRM run directory: per-token step rewards of a
    batch of sampled completions, on the host (see the module docstring)."""

    def __init__(
        self, source: str, task: tasks.Task, tokenizer: Tokenizer, max_len: int, dtype: str
    ):
        self.task = step_task(task, "process_reward", source)
        self.tokenizer = tokenizer
        self.scorer = (
            None if source == VERIFIER else PRMScorer(source, self.task.separator, max_len, dtype)
        )

    def token_rewards(
        self,
        examples: Sequence[tasks.Example],
        texts: Sequence[str],
        completion_tokens: np.ndarray,
        completion_mask: np.ndarray,
    ) -> dict[str, np.ndarray]:
        """`process_rewards` and `step_ends`, each (rows, completion length) float32: each
        step's reward on the completion token that ends it (`step_end_positions`), from
        the task's verifier (1.0 or 0.0) or the PRM (its probability)."""
        if self.scorer is None:
            scores = [
                [float(ok) for ok in self.task.step_labels(text, example)]
                for text, example in zip(texts, examples, strict=True)
            ]
        else:
            scores = self.scorer.step_scores([e.prompt for e in examples], texts)
        rewards = np.zeros(completion_mask.shape, np.float32)
        ends = np.zeros(completion_mask.shape, np.float32)
        for row, (ids, keep) in enumerate(zip(completion_tokens, completion_mask, strict=True)):
            positions = step_end_positions(self.tokenizer, ids[keep].tolist(), self.task.separator)
            # A token holding several separators ends several steps: their rewards add up.
            for position, score in zip(positions, scores[row], strict=False):
                rewards[row, position] += score
                ends[row, position] = 1.0
        return {"process_rewards": rewards, "step_ends": ends}
