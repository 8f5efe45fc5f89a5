"""What the continuous-control actor-critics on the replay base (SAC, TD3) share.

* `ActorCriticConfig`: the fields both add to `OffPolicyConfig` (an Adam learning
  rate for the actor and one for the critics, actor-critic defaults for the replay
  fields); SAC's and TD3's configs subclass it.
* `TwinQ`: two Q(s, a) critics run as one vmapped ensemble, `(obs, action) -> (2, B)`.
* `clipped_double_q` and `twin_critic_loss`: the clipped double-Q estimate (Fujimoto
  et al. 2018) and both critics' regression on one target.
* The update plumbing: `adam` / `adam_update` (Adam with a traced learning rate),
  `critic_update` (one step of the twin critics), `where_due` (delayed updates),
  `init_actor_critic` (the `{"actor", "critic"}` parameters).
* `ActorCriticAgent`: the `OffPolicy` base for agents that act in the normalised box
  [-1, 1]^d (`to_env_action` maps it onto the environment's bounds).

SAC (`jaxrl/algorithms/sac/`) and TD3 (`jaxrl/algorithms/td3/`) build on these, not
on each other; their actors and losses stay in their own packages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxrl import config as cfg
from jaxrl.acting import to_box
from jaxrl.algorithms.offpolicy import OffPolicy, OffPolicyConfig
from jaxrl.nn import MLP, Dense, flatten_obs, orthogonal
from jaxrl.replay.nstep import NStepBatch


@dataclasses.dataclass(frozen=True)
class ActorCriticConfig(OffPolicyConfig):
    """Fields shared by SAC and TD3: the two learning rates, and actor-critic defaults
    for the replay fields of `OffPolicyConfig` (SB3's batch size, tau and learning
    rates for SAC and TD3, CleanRL's learning_starts; the base's 100k buffer)."""

    env: str = "Pendulum-v1"
    """Environment id (see `jaxrl envs`); needs a 1-D Box action space."""
    batch_size: int = 256
    """Transitions per gradient step."""
    learning_starts: int = 5_000
    """Environment steps (per agent) of uniformly random actions before learning starts."""
    tau: float = 0.005
    """Target network update: target <- tau * online + (1 - tau) * target (1.0: hard copy)."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the twin critics."""

    def validate(self) -> ActorCriticConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "actor_lr", "critic_lr")
        # Prioritised replay is not part of SAC or TD3 as published or as SB3, CleanRL
        # and rejax implement them (its benefit for continuous control is unclear, e.g.
        # Fujimoto et al. 2020, "An Equivalence between Loss Functions and Non-Uniform
        # Sampling in Experience Replay"), so these agents sample uniformly.
        cfg.check(
            not self.prioritised,
            "prioritised",
            self.prioritised,
            "False (SAC and TD3 sample replay uniformly; prioritised replay is for dqn/c51)",
        )
        return self


class ActorCriticAgent(OffPolicy):
    """An `OffPolicy` agent with continuous actions in the normalised box [-1, 1]^d
    (a tanh output layer is the bound). A subclass sets `actor` and `critic` in its
    `__init__` and provides the rest of `OffPolicy`'s hooks."""

    action_kind = "continuous"

    def to_env_action(self, action: jax.Array) -> jax.Array:
        """Maps an action of [-1, 1]^d onto the environment's Box bounds."""
        return to_box(action, self.action_space)


# ----------------------------------------------------------------------------- twin critics

NUM_CRITICS = 2


def dense(features: int, scale: float) -> Dense:
    """A linear layer with orthogonal weights of gain `scale` and zero biases."""
    return Dense(features, kernel_init=orthogonal(scale), bias_init=nn.initializers.zeros)


class QValue(nn.Module):
    """One critic: `Q(s, a)` from the concatenated flat observation and action, `(B,)`."""

    hidden_sizes: Sequence[int]
    activation: str

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        x = jnp.concatenate([flatten_obs(obs, 1), action.astype(jnp.float32)], axis=-1)
        return dense(1, 1.0)(MLP(self.hidden_sizes, self.activation)(x))[..., 0]


class TwinQ(nn.Module):
    """Two critics with their own parameters (Fujimoto et al. 2018's clipped double Q),
    run as a vmapped ensemble: one batched matrix product per layer instead of two.
    `(obs (B, ...), action (B, d)) -> Q-values (2, B)`.

    Each critic gets its own copy of the inputs (broadcast to `(2, B, ...)`), so every
    layer, the first included, is a product batched over the critics. With the inputs
    shared, XLA computes the first layer of both as one `[B, in] x [in, 2 * H]`
    product, whose activations and gradients are laid out `[B, 2, H]`, and on CPU
    transposes them to and from the other layers' `[2, B, H]` at every gradient step,
    a cost measured by benchmarks/README.md's "Off-policy throughput". Same parameters
    and values either way.
    """

    hidden_sizes: Sequence[int] = (256, 256)
    activation: str = "relu"

    @nn.compact
    def __call__(self, obs: jax.Array, action: jax.Array) -> jax.Array:
        ensemble = nn.vmap(
            QValue,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            axis_size=NUM_CRITICS,
        )
        obs, action = (jnp.broadcast_to(x, (NUM_CRITICS, *x.shape)) for x in (obs, action))
        return ensemble(self.hidden_sizes, self.activation, name="critics")(obs, action)


def clipped_double_q(q: jax.Array) -> jax.Array:
    """`min(Q_1, Q_2)` over the critic axis (Fujimoto et al. 2018, eq. 10): the smaller
    estimate counters the overestimation bias of maximising a learned Q."""
    return jnp.min(q, axis=0)


def twin_critic_loss(q: jax.Array, target: jax.Array) -> jax.Array:
    """`sum_i mean_b (Q_i(s, a) - y)^2`: both critics regress on the same target
    (Haarnoja et al. 2018, eq. 5; Fujimoto et al. 2018's TD3, as in their code)."""
    return jnp.sum(jnp.mean((q - target[None]) ** 2, axis=-1))


# ----------------------------------------------------------------------------- update plumbing


def adam(lr: jax.Array | float) -> optax.GradientTransformation:
    """Adam (Kingma & Ba 2015) with a learning rate that may be a traced, per-agent
    hyperparameter; its state's structure does not depend on the value.

    On one flat vector (`optax.flatten`, as PPO and PQN): per parameter leaf, Adam's
    moment and parameter updates would be many small XLA kernels per gradient step,
    each costing dispatch time rather than arithmetic on CPU."""
    return optax.flatten(optax.chain(optax.scale_by_adam(), optax.scale(-lr)))


def adam_update(grads: Any, opt_state: Any, params: Any, lr: jax.Array) -> tuple[Any, Any]:
    """One Adam step: `(params, opt_state)`."""
    updates, opt_state = adam(lr).update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


def critic_update(
    critic: nn.Module,
    params: Any,
    opt_state: Any,
    batch: NStepBatch,
    target: jax.Array,
    lr: jax.Array,
) -> tuple[Any, Any, jax.Array, jax.Array]:
    """One Adam step of the twin critics on `losses.twin_critic_loss` towards `target`:
    `(params, opt_state, loss, Q (2, B) before the step)`."""

    def loss_fn(p):
        q = critic.apply(p, batch.observation, batch.action)
        return twin_critic_loss(q, target), q

    (loss, q), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    params, opt_state = adam_update(grads, opt_state, params, lr)
    return params, opt_state, loss, q


def where_due(grad_step: jax.Array, every: int, new: Any, old: Any) -> Any:
    """`new` on every `every`-th gradient step (`grad_step` 0-based), else `old`.

    A select rather than a `lax.cond`: the driver vmaps agents by default, which turns
    a cond on their (batched) step counters into a select of both branches anyway, and
    this way the skipped update's metrics stay defined.
    """
    if every == 1:
        return new
    due = (grad_step + 1) % every == 0
    return jax.tree.map(lambda n, o: jnp.where(due, n, o), new, old)


def init_actor_critic(agent: ActorCriticAgent, key: jax.Array, params: Any) -> dict[str, Any]:
    """`{"actor": ..., "critic": ...}` for `agent.actor` and `agent.critic`: fresh, or
    the given warm-start `params` after checking they have the same tree."""
    k_actor, k_critic = jax.random.split(key)
    obs = jnp.zeros((1, *agent.obs_shape), jnp.float32)
    action = jnp.zeros((1, agent.action_dim), jnp.float32)

    def fresh():
        return {
            "actor": agent.actor.init(k_actor, obs),
            "critic": agent.critic.init(k_critic, obs, action),
        }

    if params is None:
        return fresh()
    cfg.check_same_tree("params", jax.eval_shape(fresh), params)
    return jax.tree.map(jnp.asarray, params)
