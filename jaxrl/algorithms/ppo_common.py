"""What PPO (`ppo/`) and the multi-agent PPOs (IPPO, MAPPO: `multiagent_ppo.py`) share.

* `PPOFields`: the hyperparameters of every PPO here (the budget and rollout shape,
  epochs and minibatches, the optimiser, GAE, the clipped losses' coefficients, the
  networks' sizes, a GRU), their documentation and their validation, written once.
  `PPOConfig` adds observation and reward normalisation, the clipping kind, continuous
  actions and diagnostics; `MultiAgentPPOConfig` adds parameter sharing.
* `clip_gradients` and `ppo_optimizer`: global-norm (or per-element) clipping, then Adam,
  on one flat vector (`jaxrl.updates.clipped_optimizer`).
* `learning_rows` and `ppo_epochs`: the rollout as rows to shuffle (single steps, or a
  recurrent policy's whole sequences) and the `update_epochs x num_minibatches` gradient
  steps on the algorithm's loss (`jaxrl.updates.gradient_epochs`), with the mean of the
  loss's metrics.

The losses are not here: PPO's is `ppo/losses.py`, the multi-agent one
`jaxrl.losses.agent_ppo_loss`; GAE is `jaxrl.returns.gae`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxrl import config as cfg
from jaxrl.updates import clipped_optimizer, gradient_epochs

__all__ = [
    "ACTIVATIONS",
    "GRAD_CLIPS",
    "SWEEPABLE",
    "PPOFields",
    "clip_gradients",
    "learning_rows",
    "ppo_epochs",
    "ppo_optimizer",
    "swap_leading_axes",
]

# Numeric hyperparameters that may differ across a vmapped sweep: they live in the
# training state as float32 leaves. Everything else is static structure.
SWEEPABLE = (
    "lr",
    "gamma",
    "gae_lambda",
    "clip_eps",
    "vf_clip_eps",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
)

# How `max_grad_norm` clips gradients (PPO's `grad_clip`; the multi-agent PPOs use the
# global norm).
GRAD_CLIPS = ("global_norm", "per_element")
# Hidden activations of the actor and critic MLPs.
ACTIVATIONS = ("tanh", "relu", "gelu", "silu")


@dataclasses.dataclass(frozen=True)
class PPOFields:
    """The hyperparameters PPO, IPPO and MAPPO share (a base of their configs).

    One update collects `num_envs * num_steps` environment steps, then runs
    `update_epochs` passes of `num_minibatches` minibatches over them. Defaults are
    PureJaxRL's CartPole PPO; the multi-agent configs override the budget, the
    environments and the GRU size.
    """

    env: str = "CartPole-v1"
    """Environment id (see `jaxrl envs`)."""
    total_steps: int = 500_000
    """Environment steps per agent (whole updates: rounded down to num_envs * num_steps)."""
    num_envs: int = 4
    """Environments stepped in parallel (vmap) per agent."""
    num_steps: int = 128
    """Rollout length per environment and update."""
    update_epochs: int = 4
    """Passes over each rollout."""
    num_minibatches: int = 4
    """Minibatches (gradient steps) per epoch."""
    lr: float = 2.5e-4
    """Adam learning rate."""
    anneal_lr: bool = True
    """Anneal the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda (Schulman et al. 2016)."""
    clip_eps: float = 0.2
    """Policy ratio clipping range."""
    clip_value: bool = True
    """Clip the value update around the rollout's values (OpenAI baselines' PPO2)."""
    vf_clip_eps: float = 0.2
    """Value clipping range (with clip_value)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Clip the gradient to this global L2 norm (PPO's grad_clip="per_element": each component)."""
    adam_eps: float = 1e-5
    """Adam epsilon."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch (mean 0, std 1)."""
    bootstrap_truncation: bool = True
    """Bootstrap time-limit truncations from V(final observation); False: treat as terminal.

    True adds gamma * V(final observation) to the reward of a truncated step (Pardo et
    al. 2018, "Time Limits in Reinforcement Learning"). False treats a time limit like a
    termination, as PureJaxRL, rejax and JaxMARL's baselines do, and skips the critic
    pass over final observations.
    """
    hidden_sizes: tuple[int, ...] = (64, 64)
    """Hidden layer sizes of the actor and of the critic MLP."""
    activation: str = "tanh"
    """Hidden activation: tanh, relu, gelu or silu."""
    recurrent: bool = False
    """Put a GRU between the MLP torso and the heads (for partially observable tasks)."""
    rnn_hidden_size: int = 128
    """GRU state size (with recurrent)."""

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.batch_size

    def validate(self) -> PPOFields:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        cfg.check_positive(self, "total_steps", "num_envs", "num_steps", "update_epochs")
        cfg.check_positive(self, "num_minibatches", "lr", "max_grad_norm", "adam_eps")
        cfg.check_positive(self, "clip_eps", "vf_clip_eps", "rnn_hidden_size")
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check_range(self, "gae_lambda", 0.0, 1.0)
        for name in ("ent_coef", "vf_coef"):
            cfg.check(getattr(self, name) >= 0, name, getattr(self, name), ">= 0")
        cfg.check_choice(self, "activation", ACTIVATIONS)
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
        # Feed-forward PPO shuffles single steps; recurrent PPO must keep whole
        # sequences together, so it splits over environments instead.
        if self.recurrent:
            cfg.check(
                self.num_envs % self.num_minibatches == 0,
                "num_minibatches",
                self.num_minibatches,
                f"a divisor of num_envs={self.num_envs} (recurrent PPO splits minibatches by env)",
            )
        else:
            cfg.check(
                self.batch_size % self.num_minibatches == 0,
                "num_minibatches",
                self.num_minibatches,
                f"a divisor of num_envs * num_steps = {self.batch_size}",
            )
        return self


def clip_gradients(kind: str, max_grad_norm: jax.Array | float) -> optax.GradientTransformation:
    """Gradient clipping: "global_norm" rescales the gradient to an L2 norm of at most
    `max_grad_norm` (Pascanu et al. 2013; OpenAI baselines' PPO2); "per_element" clips
    every component to `[-max_grad_norm, max_grad_norm]` (rejax)."""
    if kind == "global_norm":
        return optax.clip_by_global_norm(max_grad_norm)
    if kind == "per_element":
        return optax.clip(max_grad_norm)
    raise cfg.ConfigError(f"invalid grad_clip={kind!r}: must be one of {list(GRAD_CLIPS)}")


def ppo_optimizer(
    hp: Any, lr_scale: jax.Array | float, adam_eps: float, grad_clip: str = "global_norm"
) -> optax.GradientTransformation:
    """Clipping (`clip_gradients`), then Adam with `adam_eps`, at the learning rate
    `hp.lr * lr_scale`, from the (possibly traced, per-agent) hyperparameters `hp`."""
    return clipped_optimizer(
        clip_gradients(grad_clip, hp.max_grad_norm),
        optax.scale_by_adam(eps=adam_eps),
        hp.lr * lr_scale,
    )


def swap_leading_axes(x: jax.Array) -> jax.Array:
    """Swaps the first two axes: `(B, T, ...) <-> (T, B, ...)`."""
    return jnp.swapaxes(x, 0, 1)


def learning_rows(
    samples: Any,
    advantages: jax.Array,
    returns: jax.Array,
    start_carry: Any,
    *,
    sequences: bool,
) -> tuple[Any, jax.Array, jax.Array, Any]:
    """The rollout `(T, num_envs, ...)` as rows to shuffle into minibatches:
    `(samples, advantages, returns, initial GRU state)`.

    Feed-forward (`sequences` False) a row is one step of one environment (`T *
    num_envs` rows; no initial state). Recurrent, a row is one environment's whole
    sequence (`num_envs` rows, time second: `ppo_epochs` swaps it back), so the GRU
    re-runs over intact sequences from the state the rollout started in.
    """
    if sequences:
        return (*jax.tree.map(swap_leading_axes, (samples, advantages, returns)), start_carry)
    rows = advantages.shape[0] * advantages.shape[1]
    flat = lambda x: x.reshape((rows,) + x.shape[2:])  # noqa: E731
    return (*jax.tree.map(flat, (samples, advantages, returns)), None)


# `loss(params, samples, advantages, returns, start_carry) -> (loss, metrics)`, on one
# minibatch, time-major for sequences.
PPOLoss = Callable[[Any, Any, jax.Array, jax.Array, Any], tuple[jax.Array, dict[str, jax.Array]]]


def ppo_epochs(
    loss: PPOLoss,
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    rows: tuple[Any, jax.Array, jax.Array, Any],
    key: jax.Array,
    *,
    num_epochs: int,
    num_minibatches: int,
    sequences: bool,
) -> tuple[Any, Any, dict[str, jax.Array]]:
    """PPO's learning phase: `num_epochs` passes of `num_minibatches` shuffled minibatches
    of `rows` (`learning_rows`), one optimiser step on `loss` each (Schulman et al.
    2017, Algorithm 1). Returns `(params, opt_state, metrics)`, every metric of `loss`
    averaged over all the steps."""

    def minibatch_loss(params: Any, minibatch: tuple) -> tuple[jax.Array, dict[str, jax.Array]]:
        samples, advantages, returns, start_carry = minibatch
        if sequences:  # sequences were shuffled environment-major: back to time-major
            samples, advantages, returns = jax.tree.map(
                swap_leading_axes, (samples, advantages, returns)
            )
        return loss(params, samples, advantages, returns, start_carry)

    params, opt_state, (_, stats) = gradient_epochs(
        minibatch_loss,
        optimizer,
        params,
        opt_state,
        rows,
        key,
        num_epochs=num_epochs,
        num_minibatches=num_minibatches,
    )
    return params, opt_state, {k: v.mean() for k, v in stats.items()}
