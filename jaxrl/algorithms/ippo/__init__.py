"""IPPO, independent PPO for N agents (de Witt et al. 2020): `config.py` hyperparameters
and presets, `losses.py` the loss (its formula), `train.py` the `IPPO` class on the shared
multi-agent PPO of `jaxrl/algorithms/multiagent_ppo.py`."""

from .config import IPPOConfig
from .losses import ippo_loss
from .train import IPPO

__all__ = ["IPPO", "IPPOConfig", "ippo_loss"]
