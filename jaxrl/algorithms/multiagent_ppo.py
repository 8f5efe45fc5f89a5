"""What IPPO and MAPPO share: the multi-agent PPO config, state and update.

IPPO (de Witt et al. 2020) and MAPPO (Yu et al. 2022) are the same algorithm except for
what the critic reads: each agent's own observation (IPPO: independent learners) or
the global state (MAPPO: a centralised critic, for centralised training with
decentralised execution). So the two packages (`ippo/`, `mappo/`) each declare their
config, presets and `centralised_critic`, and `MultiAgentPPO` here is the rest:

* **rollout**: `jaxrl.rollout.rollout` in `num_envs` multi-agent environments
  (`envs/multiagent/core.py`: observations `{"agents" (N, F), "state", "alive" (N,)}`,
  actions and rewards `(N,)`); the actor runs for all N agents at once
  (`jaxrl.nn.multiagent.AgentNetwork`: shared parameters with one-hot agent ids, or
  separate parameters per agent; feed-forward, or a GRU whose carry `(num_envs, N, H)`
  restarts with the episode); where the observation has an action mask (SMAX's legal
  actions) the policy is the softmax over the legal actions only, when acting and in the
  loss (`jaxrl.nn.Categorical.masked`, MAPPO's action masking);
* **values**: one batched critic pass after the rollout over every observation, every
  final observation (the truncation bootstrap, Pardo et al. 2018) and the last one;
* **advantages**: GAE (`jaxrl.returns.gae`) per agent on `(T, num_envs, N)`; an agent's
  trajectory ends where the episode does or where the agent leaves
  (`envs.multiagent.agent_left`);
* **learning**: PPO's epochs of minibatch steps (`ppo_common.ppo_epochs`, PPO's own) over
  rows of all N agents (a step of one environment, or with a GRU one environment's whole
  sequence), the loss
  `jaxrl.losses.agent_ppo_loss` averaged over the agents alive (IPPO's and MAPPO's
  `losses.py` name it and give its formula).

Recurrent policies put the GRU in the actor only; the critic stays feed-forward (on the
global state MAPPO's critic needs no memory in fully observed tasks; IPPO's reads the
agent's observation). What does not live here: the fields and the update PPO shares
(`ppo_common.py`), the losses (`jaxrl/losses.py`), the networks
(`jaxrl/nn/multiagent.py`), the environments.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import acting, prng, rollout
from jaxrl import config as cfg
from jaxrl.algorithms.multiagent_common import action_mask, discrete_agents
from jaxrl.algorithms.ppo_common import (
    SWEEPABLE,
    PPOFields,
    learning_rows,
    ppo_epochs,
    ppo_optimizer,
)
from jaxrl.envs.multiagent import agent_left
from jaxrl.losses import agent_ppo_loss
from jaxrl.nn.multiagent import PARAMETER_SHARING, Actor, AgentNetwork, Critic
from jaxrl.returns import bootstrap_truncated_rewards, gae
from jaxrl.training.contract import EnvironmentAlgorithm
from jaxrl.updates import annealed_lr_scale

__all__ = ["SWEEPABLE", "MultiAgentPPO", "MultiAgentPPOConfig", "MultiAgentPPOState"]


@dataclasses.dataclass(frozen=True)
class MultiAgentPPOConfig(PPOFields):
    """PPO for N agents (the fields IPPO and MAPPO share): PPO's (`PPOFields`) with their
    multi-agent meaning, and parameter sharing.

    Defaults are JaxMARL's `ippo_ff_mpe.yaml` (except the budget and the agent ids of
    parameter sharing). One update collects `num_envs * num_steps` environment steps
    (each one action of every agent), then runs `update_epochs` passes of
    `num_minibatches` minibatches over them.
    """

    env: str = "SimpleSpread-MPE"
    """Multi-agent environment id (see `jaxrl envs`, the multi-agent section)."""
    total_steps: int = 1_000_000
    """Environment steps per run (all agents act in one step; whole updates)."""
    num_envs: int = 16
    """Environments stepped in parallel (vmap) per run."""
    normalize_advantages: bool = True
    """Normalise advantages per minibatch over the agents alive (mean 0, std 1)."""
    recurrent: bool = False
    """Give the actor a GRU (partially observable tasks); the critic stays feed-forward."""
    rnn_hidden_size: int = 64
    """GRU state size (with recurrent)."""
    parameter_sharing: str = "shared"
    """How agents get parameters: "shared" (one network, one-hot agent ids in its inputs) or
    "separate" (one network per agent, on a leading agent axis)."""

    def validate(self) -> MultiAgentPPOConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_choice(self, "parameter_sharing", PARAMETER_SHARING)
        return self


@struct.dataclass
class MultiAgentPPOState:
    """Everything a run needs to continue exactly where it stopped."""

    params: Any  # {"actor": ..., "critic": ...}
    opt_state: Any
    envs: rollout.EnvLoop  # the environments, their next observations, running episodes
    rnn_carry: jax.Array | None  # (num_envs, N, rnn_hidden_size); None when feed-forward
    key: jax.Array
    update_step: jax.Array
    hparams: Any


@struct.dataclass
class Samples:
    """A rollout as learning sees it, every leaf `(T, num_envs, N, ...)`."""

    obs: jax.Array  # the agents' observations
    critic_in: jax.Array  # what the critic reads
    reset: jax.Array  # (T, num_envs): the step starts an episode (GRU reset)
    action: jax.Array
    log_prob: jax.Array
    value: jax.Array
    alive: jax.Array  # the agent acts at this step (learns from it)
    action_mask: jax.Array | None = None  # (..., A) legal actions; None: all are legal


class MultiAgentPPO(EnvironmentAlgorithm):
    """PPO for the N agents of a multi-agent environment (see the module docstring).

    Subclasses (IPPO, MAPPO) set `name`, `Config`, `presets` and `centralised_critic`.
    """

    multi_agent = True
    sweepable = SWEEPABLE
    progress_unit = "env_steps"
    centralised_critic: bool = False
    ENV_FIELDS = ("envs", "rnn_carry")

    def __init__(self, config: MultiAgentPPOConfig, env: Any, env_params: Any):
        self.config, self.env, self.env_params = config.validate(), env, env_params
        self.steps_per_update = config.batch_size
        self.num_updates = config.num_updates
        self.num_agents, num_actions = discrete_agents(self.name, config, env, env_params)
        actor = Actor(
            num_actions,
            hidden_sizes=tuple(config.hidden_sizes),
            activation=config.activation,
            rnn_hidden_size=config.rnn_hidden_size if config.recurrent else 0,
        )
        critic = Critic(tuple(config.hidden_sizes), config.activation)
        sharing = config.parameter_sharing
        # actor: carry (B, N, H), obs (T, B, N, F), resets (T, B) shared by the agents
        self.actor = AgentNetwork(actor, self.num_agents, sharing, (1, 2, None), (1, 2), 1)
        # critic: inputs (M, N, F) -> values (M, N)
        self.critic = AgentNetwork(critic, self.num_agents, sharing, (1,), 1, 0)

    @property
    def schedule_follows_total(self) -> bool:
        """`anneal_lr` decays the learning rate to 0 at the last update of `total_steps`."""
        return self.config.anneal_lr

    # ------------------------------------------------------------------ pieces
    def critic_input(self, obs: dict[str, jax.Array]) -> jax.Array:
        """`(..., N, F)`: each agent's own observation (IPPO), or the global state, the
        same for every agent (MAPPO; with shared parameters the agent id is appended)."""
        if not self.centralised_critic:
            return obs["agents"]
        state = obs["state"]
        return jnp.broadcast_to(
            state[..., None, :], state.shape[:-1] + (self.num_agents, state.shape[-1])
        )

    def values(self, params: Any, critic_in: jax.Array) -> jax.Array:
        """The critic on `critic_in (..., N, F)`: values `(..., N)`."""
        lead = critic_in.shape[:-2]
        flat = critic_in.reshape((-1,) + critic_in.shape[-2:])
        return self.critic.apply(params["critic"], flat).reshape(lead + (self.num_agents,))

    def policy(self, params: Any, carry: Any, obs: dict[str, jax.Array], reset: jax.Array):
        """The actor on one step of stacked observations `obs` (`obs["agents"] (B, N, F)`),
        `reset (B,)` -> `(carry, dist)` with distributions over `(B, N)`, over the legal
        actions only when the observation has an action mask (`Categorical.masked`)."""
        agent_obs = obs["agents"]
        carry, dist = self.actor.apply(params["actor"], carry, agent_obs[None], reset[None])
        return carry, jax.tree.map(lambda x: x[0], dist).masked(action_mask(obs))

    def _optimizer(self, hp: Any, lr_scale: jax.Array | float) -> optax.GradientTransformation:
        """Global-norm clipping, then Adam (`ppo_common.ppo_optimizer`, as PPO's)."""
        return ppo_optimizer(hp, lr_scale, self.config.adam_eps)

    def _carry(self, batch: int) -> jax.Array | None:
        c = self.config
        if not c.recurrent:
            return None
        return jnp.zeros((batch, self.num_agents, c.rnn_hidden_size), jnp.float32)

    # ------------------------------------------------------------------ contract
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> MultiAgentPPOState:
        c = self.config
        key, k_actor, k_critic, k_env = jax.random.split(key, 4)
        loop = rollout.EnvLoop.reset(self.env, self.env_params, k_env, c.num_envs)
        carry = self._carry(c.num_envs)

        def fresh():
            obs = loop.obs
            return {
                "actor": self.actor.init(k_actor, carry, obs["agents"][None], loop.done[None]),
                "critic": self.critic.init(k_critic, self.critic_input(obs)),
            }

        if params is None:
            params = fresh()
        else:
            cfg.check_same_tree("params", jax.eval_shape(fresh), params)
            params = jax.tree.map(jnp.asarray, params)
        return MultiAgentPPOState(
            params=params,
            opt_state=self._optimizer(hparams, 1.0).init(params),
            envs=loop,
            rnn_carry=carry,
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def eval_carry(self, num_episodes: int) -> jax.Array | None:
        return self._carry(num_episodes)

    def act(self, state: MultiAgentPPOState, obs, carry, reset, key, deterministic: bool = True):
        """Every agent's action `(B, N)` for a batch of stacked observations."""
        carry, dist = self.policy(state.params, carry, obs, reset)
        return (dist.mode() if deterministic else dist.sample(key)), carry

    # ------------------------------------------------------------------ update
    def _rollout(self, state: MultiAgentPPOState):
        """`num_steps` steps in every environment: `(state, samples, trajectory, values,
        episode metrics)`, the values `(2T + 1 or T + 1, num_envs, N)` of the rollout's
        observations, (with the bootstrap) its final observations, and the last one."""
        c = self.config

        def act(carry, obs, reset, key):
            carry, dist = self.policy(state.params, carry, obs, reset)
            action = dist.sample(key)
            return carry, rollout.PolicyStep(action, {"log_prob": dist.log_prob(action)})

        def record_final(_, final_obs):
            out = {"alive": final_obs["alive"]}
            if c.bootstrap_truncation:
                out["critic_in"] = self.critic_input(final_obs)
            return out

        loop, carry, key, traj = rollout.rollout(
            self.env,
            self.env_params,
            act,
            state.envs,
            state.rnn_carry,
            state.key,
            c.num_steps,
            record_final=record_final,
        )
        # One critic pass over [rollout; final observations (with the bootstrap); last].
        critic_in = self.critic_input(traj.obs)
        parts = [critic_in]
        if c.bootstrap_truncation:
            parts.append(traj.final["critic_in"])
        parts.append(self.critic_input(loop.obs)[None])
        values = self.values(state.params, jnp.concatenate(parts))
        t = c.num_steps
        samples = Samples(
            obs=traj.obs["agents"],
            critic_in=critic_in,
            reset=traj.reset,
            action=traj.action,
            log_prob=traj.extras["log_prob"],
            value=values[:t],
            alive=traj.obs["alive"],
            action_mask=action_mask(traj.obs),
        )
        new_state = state.replace(envs=loop, rnn_carry=carry, key=key)
        return new_state, samples, traj, values, acting.episode_metrics(traj.finished)

    def update(self, state: MultiAgentPPOState) -> tuple[MultiAgentPPOState, dict[str, Any]]:
        """One iteration: rollout, per-agent GAE, `update_epochs` of minibatch steps."""
        c, hp = self.config, state.hparams
        start_carry = state.rnn_carry
        state, samples, traj, values, metrics = self._rollout(state)
        t = c.num_steps
        # An agent's trajectory ends with the episode, or where the agent leaves it.
        left = agent_left(samples.alive, traj.final["alive"])
        terminated = traj.terminated[..., None] | left
        truncated = jnp.broadcast_to(traj.truncated[..., None], left.shape)
        reward = traj.reward
        if c.bootstrap_truncation:
            reward = bootstrap_truncated_rewards(
                reward, terminated, truncated, values[t : 2 * t], hp.gamma
            )
        done = terminated | truncated
        advantages, returns = gae(reward, samples.value, done, values[-1], hp.gamma, hp.gae_lambda)

        lr_scale = annealed_lr_scale(state.update_step, c.num_updates, c.anneal_lr)
        key, k_epochs = prng.split(state.key)
        params, opt_state, stats = ppo_epochs(
            lambda params, *minibatch: self._loss(params, hp, *minibatch),
            self._optimizer(hp, lr_scale),
            state.params,
            state.opt_state,
            learning_rows(samples, advantages, returns, start_carry, sequences=c.recurrent),
            k_epochs,
            num_epochs=c.update_epochs,
            num_minibatches=c.num_minibatches,
            sequences=c.recurrent,
        )
        state = state.replace(
            params=params, opt_state=opt_state, key=key, update_step=state.update_step + 1
        )
        metrics = {**stats, **metrics}
        metrics["lr"] = hp.lr * lr_scale
        return state, metrics

    def _loss(self, params, hp, batch: Samples, advantages, returns, start_carry):
        c = self.config
        if c.recurrent:  # time-major (T, B_mb, N, ...): re-run the GRU over the sequence
            _, dist = self.actor.apply(params["actor"], start_carry, batch.obs, batch.reset)
        else:  # (B_mb, N, ...) as one time step
            reset = jnp.zeros(batch.obs.shape[:1], bool)
            _, dist = self.actor.apply(params["actor"], None, batch.obs[None], reset[None])
            dist = jax.tree.map(lambda x: x[0], dist)
        # The ratio and the entropy over the legal actions, as when acting (MAPPO's masking).
        dist = dist.masked(batch.action_mask)
        value = self.values(params, batch.critic_in)
        return agent_ppo_loss(
            dist.log_prob(batch.action),
            dist.entropy(),
            value,
            batch.log_prob,
            batch.value,
            advantages,
            returns,
            batch.alive,
            clip_eps=hp.clip_eps,
            vf_clip_eps=hp.vf_clip_eps,
            vf_coef=hp.vf_coef,
            ent_coef=hp.ent_coef,
            clip_value=c.clip_value,
            normalize_advantages=c.normalize_advantages,
        )
