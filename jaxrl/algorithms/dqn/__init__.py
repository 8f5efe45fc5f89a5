"""DQN (Mnih et al. 2015) with Double-Q, dueling heads, n-step targets and prioritised
replay, on the shared Q-learning agent (`jaxrl/algorithms/qlearning.py`: its network,
exploration and target network) and replay base (`jaxrl/algorithms/offpolicy.py`):
`config.py` hyperparameters and presets, `losses.py` the TD loss, `train.py` the
algorithm."""

from .config import PRESETS, SWEEPABLE, DQNConfig, QLearningConfig, default_config
from .train import DQN, QLearner, make

Config = DQNConfig  # every algorithm module exposes its config class as `Config`

__all__ = [
    "Config",
    "DQN",
    "DQNConfig",
    "PRESETS",
    "QLearner",
    "QLearningConfig",
    "SWEEPABLE",
    "default_config",
    "make",
]
