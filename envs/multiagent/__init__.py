"""Multi-agent environments: the contract (`core.py`: stacked per-agent observations,
actions and rewards, a global state, an `alive` mask, the single-agent API's
truncation and auto-reset), the built-in MPE simple_spread (`simple_spread.py`) and the
JaxMARL adapter (`jaxmarl.py`, ids `"jaxmarl:<id>"`, optional extra `[jaxmarl]`).

Registered ids are listed by `jaxrl.envs.registered(multi_agent=True)` and built with
`jaxrl.envs.make` like any other.
"""

from .core import MultiAgentEnvironment, agent_left, from_dict, to_dict
from .simple_spread import SimpleSpread, SimpleSpreadParams, SimpleSpreadState

__all__ = [
    "MultiAgentEnvironment",
    "SimpleSpread",
    "SimpleSpreadParams",
    "SimpleSpreadState",
    "agent_left",
    "from_dict",
    "to_dict",
]
