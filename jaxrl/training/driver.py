"""The training driver's public names, gathered from the modules that implement them.

`train(algo, run)` is one loop for every algorithm, fused or staged; its parts live
in modules with one job each:

    loop.py        `train`: the story of a run, the chunk loop, clean stops on signals
    steppers.py    the compiled programs of an update (`lower_phase`, shared with
                   `jaxrl plan`) and the fused and staged steppers that run them
    agents.py      the agents (seeds x sweep points) and their initial state
    run_config.py  `RunConfig`, its chunking, `TrainResult`
    run_dir.py     config.json, metrics.jsonl on resume, checkpoints
    summary.py     metrics rows, the NaN check, summary.json, TensorBoard
    progress.py    the progress bar and the clocks

Import from here (`from jaxrl.training.driver import RunConfig, train`); the module
names above are for reading the code.
"""

from __future__ import annotations

from .agents import Agents, init_agents, initial_state, make_agents
from .loop import TrainingInterrupted, train
from .run_config import AGENT_EXECUTIONS, RunConfig, TrainResult, chunk_length, run_dict
from .run_dir import checkpointed_fields
from .steppers import agents_fn, agents_update, lower_phase, scan_updates
from .summary import FINAL_RETURN_WINDOW, NaNLossError, final_returns_summary, mean_std

__all__ = [
    "AGENT_EXECUTIONS",
    "FINAL_RETURN_WINDOW",
    "Agents",
    "NaNLossError",
    "RunConfig",
    "TrainResult",
    "TrainingInterrupted",
    "agents_fn",
    "agents_update",
    "checkpointed_fields",
    "chunk_length",
    "final_returns_summary",
    "init_agents",
    "initial_state",
    "lower_phase",
    "make_agents",
    "mean_std",
    "run_dict",
    "scan_updates",
    "train",
]
