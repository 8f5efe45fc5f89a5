"""MAPPO, PPO with a centralised critic for N agents (Yu et al. 2022): `config.py`
hyperparameters and presets, `losses.py` the loss (its formula), `train.py` the `MAPPO`
class on the shared multi-agent PPO of `jaxrl/algorithms/multiagent_ppo.py`."""

from .config import MAPPOConfig
from .losses import mappo_loss
from .train import MAPPO

__all__ = ["MAPPO", "MAPPOConfig", "mappo_loss"]
