"""Number guessing, a multi-turn task: guess a hidden number, told "higher" or "lower".

Prompt `"#0421 guess 1-8:"`; the hidden number of game 421 is fixed by a hash of the
game's id and `split_seed` (uniform over 1..max_number from the model's point of view:
nothing in the prompt reveals it). The model replies with a number; a hit earns 1 and
ends the game, a miss is answered with `" higher:"` or `" lower:"` (0 reward), anything
else ends the game with 0. A game has `ceil(log2(max_number + 1))` turns, exactly enough
for binary search to always win; a player that ignores the feedback wins far less often
(max_number 8: 4 turns; at most 4/8 of games never repeating a guess, 1 - (7/8)^4 = 0.41
guessing uniformly). So the game measures whether a policy uses the environment's
feedback.

Held-out games are `num_eval` game ids chosen by `split_seed`, never trained on. An
example's `answer` is the hidden number (`is_correct`: the reply is that number), so
SFT on the examples teaches the reply format and, since the number is unpredictable,
nothing else: a warm start for RL on the game.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from jaxrl.errors import ConfigError

from .base import Example
from .multiturn import MultiTurnTask, Turn

KNOBS = {"max_number": 8, "num_eval": 256, "split_seed": 0}
MULTI_TURN = True
GAMES = 10_000  # game ids 0000..9999
MAX_NUMBER = 99  # replies of at most two digits


class Guess(MultiTurnTask):
    """Guess a number in 1..`max_number` with higher/lower feedback (module docstring)."""

    name = "guess"

    def __init__(self, max_number: int = 8, num_eval: int = 256, split_seed: int = 0) -> None:
        if not (isinstance(max_number, int) and 2 <= max_number <= MAX_NUMBER):
            raise ConfigError(
                f"invalid max_number={max_number!r}: must be an integer in [2, {MAX_NUMBER}]"
            )
        if not (isinstance(num_eval, int) and 1 <= num_eval <= GAMES // 2):
            raise ConfigError(
                f"invalid num_eval={num_eval!r}: must be an integer in [1, {GAMES // 2}]"
            )
        self.max_number = max_number
        self.max_turns = math.ceil(math.log2(max_number + 1))
        self._seed = int(split_seed)
        self._held_out = np.random.default_rng(split_seed).choice(GAMES, num_eval, replace=False)

    @property
    def alphabet(self) -> str:
        return "0123456789#-: \nghilorsuew"

    def secret(self, game: int) -> int:
        """The hidden number of game `game`: a fixed hash of the id and the split seed."""
        x = (game + self._seed * 0x9E3779B9) & 0xFFFFFFFF  # "lowbias32" (C. Wellons)
        x = ((x ^ (x >> 16)) * 0x7FEB352D) & 0xFFFFFFFF
        x = ((x ^ (x >> 15)) * 0x846CA68B) & 0xFFFFFFFF
        return (x ^ (x >> 16)) % self.max_number + 1

    def _example(self, game: int) -> Example:
        return Example(f"#{game:04d} guess 1-{self.max_number}:", str(self.secret(game)))

    def sample_train(self, rng: np.random.Generator, n: int) -> list[Example]:
        games: list[int] = []
        while len(games) < n:  # rejection sampling; held-out ids are at most half
            draw = rng.integers(0, GAMES, size=2 * (n - len(games)))
            games.extend(draw[~np.isin(draw, self._held_out)][: n - len(games)].tolist())
        return [self._example(g) for g in games]

    def eval_examples(self) -> list[Example]:
        return [self._example(int(g)) for g in self._held_out]

    def longest_examples(self) -> Sequence[Example]:
        return [Example(f"#9999 guess 1-{self.max_number}:", str(self.max_number))]

    def is_correct(self, completion: str, answer: str) -> bool:
        """The reply is the hidden number (leading zeros and spaces allowed)."""
        guess = completion.strip()
        return guess.isdigit() and len(guess) <= 2 and int(guess) == int(answer)

    def step(self, example: Example, history: Sequence[str], reply: str) -> Turn:
        guess = reply.strip()
        if not (guess.isdigit() and len(guess) <= 2):
            return Turn(None, 0.0)  # not a number: the game is lost
        if self.is_correct(reply, example.answer):
            return Turn(None, 1.0)
        word = "higher" if int(guess) < int(example.answer) else "lower"
        return Turn(f" {word}:", 0.0)

    def longest_feedback(self) -> Sequence[str]:
        return [" higher:"]


def make(arg: str | None, **knobs: int) -> Guess:
    """`guess` takes no argument after a colon; knobs: `max_number`, `num_eval`, `split_seed`."""
    if arg is not None:
        raise ConfigError(f"invalid task='guess:{arg}': guess takes no ':' argument")
    return Guess(**knobs)
