"""SAC-N and EDAC on the offline SAC backbone (`jaxrl/algorithms/offline.py`,
`SoftOfflineAgent`): the critics are one `EnsembleQ` of `num_critics` (vmapped over the
ensemble), and with `eta` > 0 the critics' loss adds EDAC's diversity term
(`losses.ensemble_diversity` of the critics' action gradients)."""

from __future__ import annotations

from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from jaxrl import envs
from jaxrl.algorithms.actor_critic import EnsembleQ, QValue
from jaxrl.algorithms.offline import SoftOfflineAgent
from jaxrl.replay.nstep import NStepBatch

from . import losses
from .config import PRESETS, SWEEPABLE, SACNConfig

__all__ = ["SACN"]


class SACN(SoftOfflineAgent):
    """SAC-N (`eta` = 0) or EDAC (`eta` > 0). `params` is `{"actor", "critic"}`."""

    name = "sac-n"
    Config: ClassVar[type] = SACNConfig
    presets = PRESETS
    sweepable = SWEEPABLE

    def __init__(self, config: SACNConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.critic = EnsembleQ(sizes, activation, config.num_critics, config.layer_norm)
        self.q_value = QValue(sizes, activation, config.layer_norm)

    def critic_regulariser(
        self, critic_params: Any, actor_params: Any, batch: NStepBatch, q: jax.Array,
        hparams: Any, key: jax.Array,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:  # fmt: skip
        """EDAC: `eta * ES` at the dataset's actions; SAC-N (eta = 0): nothing."""
        if self.config.eta == 0:
            return jnp.zeros(()), {}
        grads = losses.action_gradients(
            self.q_value, critic_params["params"]["critics"], batch.observation, batch.action
        )
        diversity = losses.ensemble_diversity(grads)
        return self.config.eta * diversity, {"diversity": diversity}
