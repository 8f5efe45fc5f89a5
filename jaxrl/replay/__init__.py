"""Replay buffers held in the jitted training state: pure functions over `flax.struct` pytrees.

- `buffer`: the uniform ring buffer (`init`, `add`, `sample`, `sample_sequences`,
  `can_sample`), one column per parallel environment.
- `prioritised`: proportional prioritised replay on the same ring (`set_priorities`,
  importance weights; Schaul et al. 2016).
- `sum_tree`: the sum tree behind it.
- `nstep`: the `Transition` item and n-step targets that respect `terminated` versus
  `truncated`.

Every function takes one buffer; `jax.vmap` them for one buffer per agent.
"""

from . import buffer, nstep, prioritised, sum_tree
from .buffer import ReplayState, Sample
from .nstep import NStepBatch, Transition
from .prioritised import PrioritisedSample, PrioritisedState

__all__ = [
    "buffer",
    "nstep",
    "prioritised",
    "sum_tree",
    "ReplayState",
    "Sample",
    "NStepBatch",
    "Transition",
    "PrioritisedSample",
    "PrioritisedState",
]
