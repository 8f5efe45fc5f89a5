"""C51 (Bellemare et al. 2017), the categorical distributional DQN, on the Q-learning
agent it shares with DQN (`jaxrl/algorithms/qlearning.py`: network, exploration,
optimiser, target network): `config.py` the support's hyperparameters and presets,
`losses.py` the projection and cross-entropy, `train.py` the algorithm."""

from .config import PRESETS, SWEEPABLE, C51Config, default_config
from .train import C51, make

Config = C51Config  # every algorithm module exposes its config class as `Config`

__all__ = ["C51", "C51Config", "Config", "PRESETS", "SWEEPABLE", "default_config", "make"]
