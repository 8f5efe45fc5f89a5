"""PQN-VDN, value decomposition (Sunehag et al. 2018) on PQN's replay-free Q-learner
(Gallici et al. 2024): `config.py` hyperparameters and presets, `losses.py` Q_tot and the
TD loss, `train.py` the `PQNVDN` class. The Q-network is PQN's LayerNorm network
(`jaxrl.nn.qnetwork`), run for N agents by `jaxrl.nn.multiagent.AgentNetwork`."""

from .config import PQNVDNConfig
from .losses import max_q_total, q_total, vdn_td_loss
from .train import PQNVDN, PQNVDNState

__all__ = ["PQNVDN", "PQNVDNConfig", "PQNVDNState", "max_q_total", "q_total", "vdn_td_loss"]
