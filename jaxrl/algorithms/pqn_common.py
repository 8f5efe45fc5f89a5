"""What PQN (`pqn/`) and PQN-VDN (`pqn_vdn/`) share: the replay-free Q(lambda) learner.

PQN (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning") steps many
environments epsilon-greedily, computes Peng's Q(lambda) targets backward over the
rollout and takes epochs of minibatch steps on the squared TD error; PQN-VDN does the
same with the team's `Q_tot = sum_i Q_i` (Sunehag et al. 2018) in place of Q. So:

* `PQNFields`: the hyperparameters of both (rollout shape, epochs, the optimiser, the
  epsilon schedule, Q(lambda), the network's width and normalisation), documented and
  validated once; `PQNConfig` adds the observation encoder, `PQNVDNConfig` parameter
  sharing and its own defaults.
* `ParallelQLearner`: the schedules both run, a mixin on their algorithm classes: the
  optimiser (global-norm clipping, then RAdam or Adam), epsilon at an update, and
  which schedules follow `total_steps`.
* `time_limits_as_terminal`, `next_max_q` and `td_epochs`: a time limit as a terminal
  state (without the truncation bootstrap); the bootstrap of every step of a rollout,
  from the max-Q values the acting pass saw and the one batched pass after it (what
  `jaxrl.returns.q_lambda_targets` takes); the epochs of TD steps with their metrics.

The Q(lambda) recursion itself is `jaxrl.returns.q_lambda_targets`; the losses are each
algorithm's (`pqn/losses.py`, `pqn_vdn/losses.py`); epsilon-greedy is
`jaxrl/algorithms/qlearning.py`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxrl import config as cfg
from jaxrl.algorithms.qlearning import check_epsilon_schedule, linear_epsilon
from jaxrl.updates import clipped_optimizer, gradient_epochs

__all__ = [
    "NORMS",
    "OPTIMIZERS",
    "SWEEPABLE",
    "PQNFields",
    "ParallelQLearner",
    "next_max_q",
    "td_epochs",
    "time_limits_as_terminal",
]

# Numeric hyperparameters that may differ across a vmapped sweep: they live in the
# training state as float32 leaves. Everything else is static structure.
SWEEPABLE = (
    "lr",
    "gamma",
    "q_lambda",
    "max_grad_norm",
    "eps_start",
    "eps_end",
    "eps_fraction",
    "reward_scale",
)

# Optimisers (see `PQNFields.optimizer`).
OPTIMIZERS = ("radam", "adam")
# Normalisation after each hidden layer (see `PQNFields.norm`).
NORMS = ("layer_norm", "none")


@dataclasses.dataclass(frozen=True)
class PQNFields:
    """The hyperparameters PQN and PQN-VDN share (a base of their configs).

    One update steps `num_envs` environments `num_steps` times with an epsilon-greedy
    policy, computes Q(lambda) targets over that rollout, then runs `num_epochs` passes of
    `num_minibatches` minibatches of the squared TD error over it. There is no replay
    buffer and no target network: LayerNorm keeps the bootstrapped targets stable.
    Defaults are PQN's (purejaxql's CartPole configuration).
    """

    env: str = "CartPole-v1"
    """Environment id (see `jaxrl envs`); its action space must be Discrete."""
    total_steps: int = 500_000
    """Environment steps per agent (whole updates: rounded down to num_envs * num_steps)."""
    num_envs: int = 32
    """Environments stepped in parallel (vmap) per agent."""
    num_steps: int = 64
    """Rollout length per environment and update."""
    num_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 16
    """Minibatches (gradient steps) per epoch."""
    lr: float = 1e-4
    """Learning rate."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the run."""
    optimizer: str = "radam"
    """Optimiser: "radam" (Liu et al. 2020, as purejaxql's PQN) or "adam"."""
    adam_eps: float = 1e-8
    """Epsilon of Adam/RAdam's denominator."""
    max_grad_norm: float = 10.0
    """Clip the gradient to this global L2 norm before the optimiser."""
    gamma: float = 0.99
    """Discount factor."""
    q_lambda: float = 0.95
    """Lambda of the Q(lambda) targets (0: one-step Q-learning, 1: Monte-Carlo returns)."""
    eps_start: float = 1.0
    """Epsilon-greedy exploration: epsilon at the first update."""
    eps_end: float = 0.05
    """Epsilon-greedy exploration: epsilon after the decay (and for `jaxrl eval` sampling)."""
    eps_fraction: float = 0.2
    """Fraction of the run over which epsilon decays linearly from eps_start to eps_end."""
    reward_scale: float = 1.0
    """Rewards are multiplied by this for learning (episode returns stay the environment's)."""
    bootstrap_truncation: bool = True
    """Bootstrap time-limit truncations from max Q(final observation); False: terminal.

    True bootstraps a truncated step from the Q-values of its true last observation
    (Pardo et al. 2018, "Time Limits in Reinforcement Learning"). False treats a time
    limit like a termination, as purejaxql does, and skips the Q pass over final
    observations (the matched-work setting for benchmarks).
    """
    norm: str = "layer_norm"
    """Normalisation after each hidden layer: "layer_norm" (PQN's key ingredient) or "none"."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the MLP (after the convolution with the "conv" torso)."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    def validate(self) -> PQNFields:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_envs", "num_steps", "num_epochs")
        cfg.check_positive(self, "num_minibatches", "lr", "max_grad_norm", "adam_eps")
        cfg.check_positive(self, "reward_scale")
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check_range(self, "q_lambda", 0.0, 1.0)
        check_epsilon_schedule(self)
        cfg.check_choice(self, "optimizer", OPTIMIZERS)
        cfg.check_choice(self, "norm", NORMS)
        cfg.check(
            len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "a non-empty list of positive layer sizes",
        )
        cfg.check(
            self.total_steps >= self.batch_size,
            "total_steps",
            self.total_steps,
            f">= num_envs * num_steps = {self.batch_size} (one update)",
        )
        cfg.check(
            self.batch_size % self.num_minibatches == 0,
            "num_minibatches",
            self.num_minibatches,
            f"a divisor of num_envs * num_steps = {self.batch_size}",
        )
        return self


class ParallelQLearner:
    """The schedules of PQN and PQN-VDN, mixed into their algorithm classes (which set
    `config`, a `PQNFields`, and `num_updates`)."""

    config: PQNFields
    num_updates: int

    @property
    def schedule_follows_total(self) -> bool:
        """`anneal_lr` and the epsilon decay (a fraction of the run) follow `total_steps`."""
        c = self.config
        return c.anneal_lr or (c.eps_fraction > 0 and c.eps_end != c.eps_start)

    def _optimizer(self, hp: Any, lr_scale: jax.Array | float) -> optax.GradientTransformation:
        """Global-norm clipping, then RAdam (purejaxql's PQN) or Adam, at the learning rate
        `hp.lr * lr_scale`, on one flat vector (`jaxrl.updates.clipped_optimizer`)."""
        c = self.config
        scale_by = optax.scale_by_radam if c.optimizer == "radam" else optax.scale_by_adam
        return clipped_optimizer(
            optax.clip_by_global_norm(hp.max_grad_norm), scale_by(eps=c.adam_eps), hp.lr * lr_scale
        )

    def epsilon(self, state: Any) -> jax.Array:
        """The exploration rate of the update `state` is about to run (`linear_epsilon`)."""
        hp = state.hparams
        return linear_epsilon(
            state.update_step, self.num_updates, hp.eps_start, hp.eps_end, hp.eps_fraction
        )


def time_limits_as_terminal(
    terminated: jax.Array, truncated: jax.Array, bootstrap_truncation: bool
) -> tuple[jax.Array, jax.Array]:
    """`(terminated, truncated)` as the targets see them: unchanged with the truncation
    bootstrap; without it a time limit is a terminal state (`terminated | truncated`,
    nothing truncated), as purejaxql treats it."""
    if bootstrap_truncation:
        return terminated, truncated
    return jnp.logical_or(terminated, truncated), jnp.zeros_like(truncated)


def next_max_q(
    max_q: jax.Array,
    last_max_q: jax.Array,
    final_max_q: jax.Array | None,
    terminated: jax.Array,
    truncated: jax.Array,
) -> jax.Array:
    """`next_q (T, B)` of Peng's Q(lambda) targets (`jaxrl.returns.q_lambda_targets`): the
    max-Q of the observation that followed each step of a rollout.

    `max_q[t]` is `max_a Q(s_t, a)` of the observation step t acted on, which the acting
    pass computed anyway: it is step t - 1's bootstrap. So `next_q[t]` is `max_q[t + 1]`,
    `last_max_q (B,)` (the observation after the rollout) for the last step, and, where
    step t was cut by a time limit, `final_max_q[t]`, the max-Q of its true last
    observation (`info["final_observation"]`; None without the truncation bootstrap).
    `terminated` and `truncated` are as the targets see them (`time_limits_as_terminal`).
    """
    next_q = jnp.concatenate([max_q[1:], last_max_q[None]])
    if final_max_q is None:
        return next_q
    return jnp.where(truncated & ~terminated, final_max_q, next_q)


# `loss(params, *minibatch) -> (loss, mean Q of the taken actions)`.
TDLoss = Callable[..., tuple[jax.Array, jax.Array]]


def td_epochs(
    loss: TDLoss,
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    data: tuple,
    key: jax.Array,
    *,
    num_epochs: int,
    num_minibatches: int,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """`num_epochs` passes of `num_minibatches` shuffled minibatches of `data` (rows of
    the flattened rollout), one optimiser step on the TD `loss` each. Returns `(params,
    opt_state, {"loss", "q_mean"})`, both averaged over the steps."""
    params, opt_state, (losses, q_mean) = gradient_epochs(
        lambda params, minibatch: loss(params, *minibatch),
        optimizer,
        params,
        opt_state,
        data,
        key,
        num_epochs=num_epochs,
        num_minibatches=num_minibatches,
    )
    return params, opt_state, {"loss": losses.mean(), "q_mean": q_mean.mean()}
