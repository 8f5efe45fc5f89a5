"""PPO-LM on multi-turn episodes: the model and a Python environment take turns, and the
critic values the model's tokens only.

The episodes' rollout (rounds of one model turn and the environment's answer, the KV
cache kept between turns, one token row per episode) is `MultiTurnRollout`
(`jaxrl/algorithms/lm_multiturn.py`, shared with multi-turn GRPO); the critic and the
learning step are PPO-LM's (`train.py`), on the episode rows:

  * the token-level MDP's actions are the model's tokens; the environment's tokens
    (feedback, tool output) are part of the next state, not actions. So the critic's
    values are read at the model's tokens only, V(s_t) with s_t everything before model
    token t (the environment's answer included, for a later turn's first token);
  * GAE (`jaxrl.objectives.masked_gae`) runs over the model's tokens of a row, stepping
    over the environment's: the last token of turn k bootstraps from the value at the
    first token of turn k + 1, and each turn's reward sits on its last token;
  * `completion_mask` (the model's tokens) masks the policy loss, the value loss, the
    KL and entropy terms and the advantages' whitening, so nothing the environment
    wrote is trained on.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.algorithms.lm_multiturn import MultiTurnRollout

from .train import PPOLM, PPOLMState


class MultiTurnPPOLM(MultiTurnRollout, PPOLM):
    """PPO with a critic whose completions are multi-turn episodes (see the module
    docstring): the episodes' rollout from `MultiTurnRollout`, the critic, state and
    learning step from `PPOLM`."""

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> PPOLMState:
        """PPO-LM's policy and critic (`PPOLM.init`) and the episode KV cache."""
        return self.with_episode_cache(PPOLM.init(self, key, hparams, params))

    def learn(self, state: PPOLMState, batch: dict[str, jax.Array]) -> tuple[PPOLMState, dict]:
        """PPO-LM's update (`PPOLM.learn_from`) on the episode rows re-scored whole by the
        parameters that sampled them (`rescored`), each turn's reward on its last token."""
        batch = self.rescored(state, batch)
        cmask = batch["completion_mask"].astype(jnp.float32)
        return self.learn_from(state, batch, batch["token_rewards"] * cmask)
