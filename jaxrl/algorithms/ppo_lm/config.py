"""PPO-with-a-critic hyperparameters for language models, and their validation.

`PPOLMConfig` has the fields of every token-rollout algorithm (`LMRLConfig`,
jaxrl/algorithms/lm_rollout_config.py), so every sampling, reward, policy-loss, aggregation, KL
and optimisation field means the same as GRPO's and a GRPO run and a PPO run differ by
the algorithm name (and the critic's fields); the advantage is fixed to GAE over a
learned value model. Budget units are GRPO's: `total_steps` counts completions,
`num_prompts * group_size` per update; `group_size` may be 1 here (the critic, not a
group, is the baseline). On a multi-turn task (`jaxrl/tasks/multiturn.py`) a completion
is an episode and `max_new_tokens` the budget of one model turn (`ppo_lm/multiturn.py`).
"""

from __future__ import annotations

import dataclasses

from jaxrl import config as cfg
from jaxrl.algorithms.lm_rollout import RL_SWEEPABLE, LMRLConfig
from jaxrl.objectives import ADVANTAGE_ESTIMATORS, CRITIC_ADVANTAGES

# Numeric hyperparameters that may differ across a vmapped sweep (float32 state leaves).
SWEEPABLE = (*RL_SWEEPABLE, "critic_lr", "vf_coef", "vf_clip_eps", "gamma", "gae_lambda")
# The estimators that use a learned critic's values.
ADVANTAGES = ADVANTAGE_ESTIMATORS.only(*CRITIC_ADVANTAGES)


@dataclasses.dataclass(frozen=True)
class PPOLMConfig(LMRLConfig):
    """PPO for language models with a learned value function (Ouyang et al. 2022,
    InstructGPT; Schulman et al. 2017): the token-level MDP whose state is the prompt
    plus the completion so far and whose action is the next token, the outcome reward
    on the last completion token, advantages by GAE (Schulman et al. 2016) with the
    critic's values, and the clipped value loss.

    The critic is a separate value model: the policy's architecture with a scalar value
    head, initialised from the policy's starting weights and a zero value head (as
    InstructGPT, verl and OpenRLHF do), trained by its own AdamW at `critic_lr` (same
    schedule, `max_grad_norm` and `weight_decay` as the policy's). With LoRA
    (`lora_rank > 0`) it trains its own adapters on the same frozen base plus the head.
    """

    total_steps: int = 40_960
    """Completions (samples) per agent: 320 updates (an update costs about twice GRPO's)."""
    advantage: str = dataclasses.field(default="gae", metadata={"choices": ADVANTAGES.names()})
    """Advantage estimator: gae only (a learned critic); `jaxrl train grpo` has the group ones."""
    gamma: float = 1.0
    """Discount per token (1: the outcome reward is not discounted over the completion)."""
    gae_lambda: float = 0.95
    """GAE lambda (Schulman et al. 2016): 1 is Monte Carlo returns, 0 one-step TD."""
    whiten_advantages: bool = True
    """Whiten advantages over the update's completion tokens (mean 0, std 1), as verl."""
    critic_lr: float = 1e-3
    """Peak learning rate of the critic's AdamW (the policy's schedule and warmup)."""
    vf_coef: float = 0.5
    """Value loss coefficient (scales the critic's gradient: matters through its clip)."""
    clip_value: bool = True
    """Clip the value update around the values the advantages used (PPO2's clipping)."""
    vf_clip_eps: float = 0.2
    """Value clipping range (with clip_value), in reward units."""

    ADVANTAGES = ADVANTAGES  # the `advantage` names this config accepts (not a field)

    def validate(self) -> PPOLMConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        others = [name for name in ADVANTAGE_ESTIMATORS if name not in ADVANTAGES]
        cfg.check(
            self.advantage in ADVANTAGES,
            "advantage",
            self.advantage,
            f"one of {list(ADVANTAGES)} (PPO-LM's advantages come from its critic; for "
            f"{', '.join(others)} use `jaxrl train grpo`)",
        )
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check_range(self, "gae_lambda", 0.0, 1.0)
        cfg.check_positive(self, "critic_lr")
        cfg.check(self.vf_coef > 0, "vf_coef", self.vf_coef, "> 0 (the critic must learn)")
        cfg.check(
            self.vf_clip_eps > 0 or not self.clip_value,
            "vf_clip_eps",
            self.vf_clip_eps,
            "> 0 with clip_value=True (or clip_value=False for an unclipped value loss)",
        )
        cfg.check(
            self.dynamic_sampling == 0 or self.group_size >= 2,
            "dynamic_sampling",
            self.dynamic_sampling,
            "0 with group_size=1 (dynamic sampling keeps groups whose rewards differ; a "
            "group of one never does, so the spare prompts would all be thrown away)",
        )
        super().validate()
        return self


def default_config() -> PPOLMConfig:
    """PPO with a critic on 3-digit addition, from the tiny model (pass `model=` an SFT
    run); GRPO's defaults for everything the two share."""
    return PPOLMConfig()
