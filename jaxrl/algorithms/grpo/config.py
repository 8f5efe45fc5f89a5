"""GRPO-family hyperparameters and their validation.

The fields are the token-rollout RL algorithms' (`LMRLConfig`,
jaxrl/algorithms/lm_rollout_config.py); GRPO accepts the critic-free advantage estimators. Every
estimator, loss and aggregation is selected by name (`jaxrl/objectives/`), so a paper's
variant is a configuration: GRPO (the defaults), Dr. GRPO (`advantage=dr_grpo`,
`loss_agg=seq_mean_token_sum_norm`), DAPO (`eps_high=0.28`, `loss_agg=token_mean`,
`dynamic_sampling`, `overlong_cache`), RLOO (`advantage=rloo`), REINFORCE++
(`advantage=reinforce_pp`), GSPO (`policy_loss=gspo`), CISPO (`policy_loss=cispo`).
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl import tasks
from jaxrl.algorithms.lm_rollout import RL_SWEEPABLE, LMRLConfig
from jaxrl.objectives import ADVANTAGE_ESTIMATORS, CRITIC_ADVANTAGES

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = RL_SWEEPABLE
# Estimators a GRPO run can use: all but those that need a learned critic (`gae`:
# `jaxrl train ppo-lm`, jaxrl/algorithms/ppo_lm, trains one).
ADVANTAGES = ADVANTAGE_ESTIMATORS.only(
    *(name for name in ADVANTAGE_ESTIMATORS if name not in CRITIC_ADVANTAGES)
)


@dataclasses.dataclass(frozen=True)
class GRPOConfig(LMRLConfig):
    """Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath, sec. 4) and its
    variants, selected by configuration (see the module docstring).

    One update: `num_prompts` training prompts, `group_size` completions each (sampled
    with the KV cache at `temperature`), rewards on the host, advantages, then
    `num_epochs` passes of `num_minibatches` optimiser steps with importance ratios
    against the log-probs of the policy that sampled. Start from an SFT run or a Hugging
    Face model with `model`; the defaults fine-tune the tiny character-level Llama of
    `jaxrl train sft --task addition`.
    """

    advantage: str = dataclasses.field(default="grpo", metadata={"choices": ADVANTAGES.names()})
    """Advantage estimator: grpo, dr_grpo, rloo or reinforce_pp."""
    step_advantage_weight: float = 0.0
    """GiGPO's weight of step-level advantages added to the episode-level ones on a
    multi-turn task (Feng et al. 2025; their default is 1; 0: off)."""

    ADVANTAGES = ADVANTAGES  # the `advantage` names this config accepts (not a field)

    def validate(self) -> GRPOConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        weight = self.step_advantage_weight
        cfg.check(
            isinstance(weight, (int, float)) and weight >= 0,
            "step_advantage_weight",
            weight,
            ">= 0",
        )
        cfg.check(
            weight == 0 or tasks.is_multi_turn(self.task),
            "step_advantage_weight",
            weight,
            f"0 on the single-turn task {self.task!r} (step-level credit needs turns)",
        )
        cfg.check(
            self.process_reward is None or self.group_size >= 2,
            "group_size",
            self.group_size,
            ">= 2 with process_reward (step rewards are normalised over a prompt's group)",
        )
        super().validate()
        return self


def default_config() -> GRPOConfig:
    """GRPO on 3-digit addition, from the tiny model (pass `model=` an SFT run)."""
    return GRPOConfig()
