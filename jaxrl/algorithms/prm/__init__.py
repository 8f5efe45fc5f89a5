"""Process reward models: `config.py` hyperparameters, `losses.py` the binary
cross-entropy at step-end tokens, `train.py` the staged algorithm (host loader of a step
task's labelled solutions, jitted learning step, held-out step accuracy and the exported
`model/` that GRPO and PPO-LM score steps with, `--process-reward RUN_DIR`)."""

from .config import SWEEPABLE, PRMConfig, default_config
from .losses import solution_accuracy, step_accuracy, step_bce
from .train import PRM, PRMState

Config = PRMConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "PRM",
    "SWEEPABLE",
    "Config",
    "PRMConfig",
    "PRMState",
    "default_config",
    "solution_accuracy",
    "step_accuracy",
    "step_bce",
]
