"""What every offline learner shares: a fixed dataset sampled like a replay buffer, and
evaluation episodes inside the update.

IQL and TD3+BC (and the next offline learners) differ in their networks and losses, and
in nothing else the driver sees. This module holds the rest once:

* `OfflineConfig`: the fields every offline learner has (the environment it is
  evaluated in, the dataset file, gradient steps, batch size, discount, target rate,
  evaluation cadence, network sizes), their docstrings (the CLI's `--help`) and their
  validation. An algorithm's config subclasses it.
* `OfflineState`: online `params`, the algorithm's `learner` pytree (targets, optimiser
  states), the `dataset` as a full replay ring (`jaxrl.datasets.to_replay`), the
  observation statistics `obs_norm`, the key, counters and `hparams`. The dataset is
  `checkpoint_exclude`d: `init` rebuilds it from the file, and the driver's frozen-part
  fingerprint makes a resume with a changed dataset fail instead of silently training
  on other data.
* Observation normalisation (`normalize_obs`, Fujimoto & Gu 2021, sec. 5;
  `jaxrl/datasets/normalization.py`): the dataset's per-feature mean and standard
  deviation are computed once in `__init__`; `init` normalises the ring's observations
  and next observations with them, and `act` normalises what the environment shows the
  policy, from the statistics in the state (checkpointed with it: evaluation, `jaxrl
  dataset collect` and `rlpd --init-from` see what training saw). Without it the state
  holds mean 0 and scale 1 and nothing is computed.
* `OfflineAgent`: an `EnvironmentAlgorithm` with a fused step. One `update` is

      eval_interval times: sample batch_size transitions uniformly from the dataset
          -> one-step targets' inputs (jaxrl.replay.nstep) -> the algorithm's learn_step
      then eval_episodes fresh episodes of the deterministic policy

  so `metrics.jsonl` has the learning curve (`episode_return`, and `normalized_score`
  when the dataset records its reference returns). Progress counts gradient steps.

The dataset is read and checked against the environment's spaces in `__init__`, before
anything compiles: a wrong observation or action shape, NaNs, an empty file or a missing
field raise `jaxrl.datasets.DatasetError` naming the field. Continuous learners act in
the normalised box [-1, 1]^d (`to_env_action`); the dataset's actions are mapped into it.

A subclass provides `init_learner`, `learn_step` and `policy` (see their docstrings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import config as cfg
from jaxrl import datasets, envs, prng
from jaxrl.acting import to_box
from jaxrl.algorithms.actor_critic import (
    SoftLearner,
    SquashedGaussianActor,
    adam_update,
    soft_policy_step,
    soft_td_target,
    twin_critic_loss,
)
from jaxrl.algorithms.offpolicy import update_target
from jaxrl.datasets import normalization
from jaxrl.datasets.normalization import ObsNorm
from jaxrl.episodes import agent_episodes
from jaxrl.replay import buffer, nstep
from jaxrl.replay.nstep import NStepBatch
from jaxrl.training.contract import EnvironmentAlgorithm

FINAL_EVAL_EPISODES = 10
"""Episodes per agent of the evaluation `finish` records in summary.json (as `jaxrl eval`'s
default)."""


def minatar_preset(lr_field: str) -> dict[str, Any]:
    """The discrete offline learners' MinAtar preset, with its learning rate under
    `lr_field` (cql-discrete's critic, bc's actor): DQN's network, batch and learning
    rate (Young & Tian 2019: one 3x3 convolution of 16 channels, a hidden layer of 128,
    batch 32, 2.5e-4) for 50k gradient steps, an evaluation every 5k. One definition, so
    that bc_breakout_replay and cql_discrete_breakout_replay compare on equal terms."""
    return {
        "total_steps": 50_000,
        "eval_interval": 5_000,
        "batch_size": 32,
        lr_field: 2.5e-4,
        "network": "conv",
        "hidden_sizes": (128,),
    }


@dataclasses.dataclass(frozen=True)
class OfflineConfig:
    """Fields shared by every offline learner (see `jaxrl/algorithms/offline.py`)."""

    env: str = "Pendulum-v1"
    """Environment id: the dataset's environment, where the policy is evaluated."""
    dataset: str = ""
    """Path of the dataset (.npz from `jaxrl dataset collect` or `jaxrl.datasets.save`)."""
    total_steps: int = 100_000
    """Gradient steps per agent (whole updates: rounded down to eval_interval)."""
    eval_interval: int = 1_000
    """Gradient steps per update; each update ends with an evaluation (metrics.jsonl)."""
    eval_episodes: int = 5
    """Fresh episodes of the deterministic policy per evaluation."""
    batch_size: int = 256
    """Transitions per gradient step."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Target network update: target <- tau * online + (1 - tau) * target."""
    actor_lr: float = 3e-4
    """Adam learning rate of the actor."""
    critic_lr: float = 3e-4
    """Adam learning rate of the critics (and value network)."""
    hidden_sizes: tuple[int, ...] = (256, 256)
    """Hidden layer sizes of the MLPs."""
    activation: str = "relu"
    """Hidden activation: tanh, relu, gelu or silu."""
    normalize_obs: bool = False
    """Normalise observations by the dataset's per-feature mean and std + 1e-3, in training
    and when acting (Fujimoto & Gu 2021, sec. 5; the statistics are saved with the state)."""

    @property
    def steps_per_update(self) -> int:
        return self.eval_interval

    @property
    def num_updates(self) -> int:
        return self.total_steps // self.eval_interval

    def validate(self) -> OfflineConfig:
        """Raises `ConfigError` naming the first invalid field; returns self. (An empty
        `dataset`, the default, is refused when the algorithm is built: `jaxrl train
        iql --help` shows the defaults without one.)"""
        cfg.check(isinstance(self.dataset, str), "dataset", self.dataset, "a path (a string)")
        cfg.check_positive(self, "total_steps", "eval_interval", "eval_episodes", "batch_size")
        cfg.check_positive(self, "actor_lr", "critic_lr")
        cfg.check_range(self, "gamma", 0.0, 1.0)
        cfg.check(0.0 < self.tau <= 1.0, "tau", self.tau, "in (0, 1]")
        cfg.check_choice(self, "activation", ("tanh", "relu", "gelu", "silu"))
        cfg.check(
            len(self.hidden_sizes) > 0 and all(h > 0 for h in self.hidden_sizes),
            "hidden_sizes",
            self.hidden_sizes,
            "a non-empty list of positive layer sizes",
        )
        cfg.check(
            self.total_steps >= self.eval_interval,
            "total_steps",
            self.total_steps,
            f">= eval_interval = {self.eval_interval} (one update)",
        )
        return self


@struct.dataclass
class OfflineState:
    """Everything an offline run needs to continue exactly where it stopped (the dataset
    is rebuilt by `init`, not checkpointed)."""

    params: Any  # the online networks (what is evaluated and exported)
    learner: Any  # the algorithm's: target networks, optimiser states, ...
    dataset: buffer.ReplayState  # the dataset as a full replay ring (checkpoint_exclude)
    obs_norm: ObsNorm  # the dataset's observation statistics (identity without normalize_obs)
    key: jax.Array
    update_step: jax.Array  # int32: completed updates
    grad_steps: jax.Array  # int32: gradient steps taken
    hparams: Any


class OfflineAgent(EnvironmentAlgorithm):
    """An offline learner with a fused step (see the module docstring). Subclasses set
    `name`, `Config`, `presets`, `sweepable` (with `gamma`), and implement:

    * `init_learner(key, hparams, params)` -> `(params, learner)`;
    * `learn_step(params, learner, batch, hparams, key, grad_step)` ->
      `(params, learner, metrics)`: one gradient step on what `sample_batch` drew (by
      default a `NStepBatch` of the dataset; actions in [-1, 1]^d for a Box space);
    * `policy(params, obs, key, deterministic)` -> the action in [-1, 1]^d (a Box) or
      an integer (Discrete), from observations as training saw them (`act` normalises
      them first and maps the action onto the environment's bounds).
    """

    trains_on = "dataset"  # the config's `dataset`; `env` only evaluates (an EnvironmentAlgorithm)
    progress_unit = "gradient_steps"
    eval_extra = ("normalized_score",)
    # or "discrete" (integer actions, as stored); a learner of both kinds (bc) sets it on
    # the instance, from the environment's action space, before this base's __init__.
    action_kind: ClassVar[str] = "continuous"
    checkpoint_exclude = ("dataset",)
    nan_metrics = ("loss",)

    def __init__(self, config: OfflineConfig, env: envs.Environment, env_params: Any):
        self.config = config.validate()
        cfg.check(
            config.dataset != "",
            "dataset",
            config.dataset,
            "the path of a dataset file (.npz; see `jaxrl dataset collect`)",
        )
        self.steps_per_update = config.steps_per_update
        self.num_updates = config.num_updates
        self.env, self.env_params = env, env_params
        self.action_space = env.action_space(env_params)
        if self.action_kind == "discrete":
            if not isinstance(self.action_space, envs.spaces.Discrete):
                raise cfg.ConfigError(
                    f"invalid env={config.env!r}: {self.name} needs a Discrete action space, "
                    f"got {self.action_space!r}; for continuous actions use iql, td3-bc, cql, "
                    "sac-n or rebrac"
                )
            self.action_dim = int(self.action_space.n)
        else:
            box = isinstance(self.action_space, envs.spaces.Box)
            if not box or len(self.action_space.shape) != 1:
                raise cfg.ConfigError(
                    f"invalid env={config.env!r}: {self.name} needs a 1-D Box (continuous) "
                    f"action space, got {self.action_space!r}; for discrete actions use "
                    "cql-discrete"
                )
            self.action_dim = int(self.action_space.shape[0])
        obs_space = env.observation_space(env_params)
        self.obs_shape = tuple(obs_space.shape)
        self.data = datasets.check(
            datasets.load(config.dataset), obs_space, self.action_space, config.env
        )
        cfg.check(
            config.batch_size <= len(self.data),
            "batch_size",
            config.batch_size,
            f"<= the dataset's {len(self.data)} transitions",
        )
        self.reference = datasets.reference_returns(self.data.metadata)
        self.obs_norm = (
            normalization.observation_stats(self.data)
            if config.normalize_obs
            else normalization.identity(self.obs_shape)
        )
        if "gamma" not in self.sweepable:
            raise TypeError(f"{type(self).__name__}.sweepable must contain 'gamma'")

    # ------------------------------------------------------------------ subclass API
    # The three hooks every offline learner defines (IQL, TD3+BC, CQL, SAC-N, ReBRAC);
    # the base has no default for any.
    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, Any]:
        """`(params, learner)`: the online networks (fresh, or the warm-start `params`
        checked against their tree) and what the learner keeps besides them (targets,
        optimiser states, a temperature)."""
        raise NotImplementedError(f"{type(self).__name__} must implement init_learner")

    def learn_step(
        self,
        params: Any,
        learner: Any,
        batch: NStepBatch,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, Any, Mapping[str, jax.Array]]:
        """One gradient step on `batch` (what `sample_batch` returns):
        `(params, learner, metrics)`; `grad_step` is the 0-based gradient-step count
        (delayed policy updates)."""
        raise NotImplementedError(f"{type(self).__name__} must implement learn_step")

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        """The policy's action at (normalised, as in training) observations `obs (B, ...)`:
        in [-1, 1]^d for a Box action space, an integer for a Discrete one."""
        raise NotImplementedError(f"{type(self).__name__} must implement policy")

    def act(self, state: OfflineState, obs, carry, reset, key, deterministic: bool = True):
        """`policy` at the observations normalised by the state's statistics (when
        `normalize_obs`), on the environment's bounds; no carry."""
        if self.config.normalize_obs:
            obs = state.obs_norm.normalize(obs)
        return self.to_env_action(self.policy(state.params, obs, key, deterministic)), carry

    def sample_batch(self, dataset: buffer.ReplayState, key: jax.Array, hparams: Any) -> Any:
        """`batch_size` transitions drawn uniformly from the dataset, as the one-step
        targets' inputs (`NStepBatch`: a termination stops the bootstrap, a time limit
        does not). An algorithm that needs more of the data overrides it (ReBRAC: the
        dataset's next action); `learn_step` gets what it returns."""
        drawn = buffer.sample(dataset, key, self.config.batch_size)
        return nstep.nstep_batch(dataset, drawn.indices, 1, hparams.gamma)

    def to_env_action(self, action: jax.Array) -> jax.Array:
        """Maps an action of [-1, 1]^d onto the environment's Box bounds (discrete
        actions pass through)."""
        if self.action_kind == "discrete":
            return action
        return to_box(action, self.action_space)

    def init_networks(
        self, key: jax.Array, networks: Mapping[str, tuple[nn.Module, str]], params: Any
    ) -> dict[str, Any]:
        """`{name: parameters}` of `networks` (`name -> (module, inputs)`, inputs `"obs"`
        or `"obs_action"`), fresh from one key each, or the given warm-start `params`
        after checking they have the same tree."""
        obs = jnp.zeros((1, *self.obs_shape), jnp.float32)
        action = jnp.zeros((1, self.action_dim), jnp.float32)
        inputs = {"obs": (obs,), "obs_action": (obs, action)}
        keys = jax.random.split(key, len(networks))

        def fresh():
            return {
                name: module.init(k, *inputs[kind])
                for k, (name, (module, kind)) in zip(keys, networks.items(), strict=True)
            }

        if params is None:
            return fresh()
        cfg.check_same_tree("params", jax.eval_shape(fresh), params)
        return jax.tree.map(jnp.asarray, params)

    # ------------------------------------------------------------------ construction
    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> OfflineState:
        """Fresh (or warm-started) networks and the dataset as an on-device replay ring."""
        key, k_learner = jax.random.split(key)
        params, learner = self.init_learner(k_learner, hparams, params)
        ring = datasets.to_replay(self.data, self.action_space)
        if self.config.normalize_obs:
            norm = self.obs_norm.normalize
            items = ring.items
            ring = ring.replace(
                items=items.replace(
                    observation=norm(items.observation),
                    next_observation=norm(items.next_observation),
                )
            )
        return OfflineState(
            params=params,
            learner=learner,
            dataset=ring,
            obs_norm=self.obs_norm,
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            grad_steps=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    # ------------------------------------------------------------------ the update
    def update(self, state: OfflineState) -> tuple[OfflineState, dict[str, jax.Array]]:
        """`eval_interval` gradient steps on dataset batches, then an evaluation."""
        c, hp = self.config, state.hparams

        def grad_step(carry, key):
            params, learner, grad_steps = carry
            k_sample, k_learn = prng.split(key)
            batch = self.sample_batch(state.dataset, k_sample, hp)
            params, learner, metrics = self.learn_step(
                params, learner, batch, hp, k_learn, grad_steps
            )
            return (params, learner, grad_steps + 1), metrics

        key, k_steps, k_eval = prng.split(state.key, 3)
        carry = (state.params, state.learner, state.grad_steps)
        (params, learner, grad_steps), metrics = jax.lax.scan(
            grad_step, carry, prng.split(k_steps, c.eval_interval)
        )
        state = state.replace(
            params=params,
            learner=learner,
            grad_steps=grad_steps,
            key=key,
            update_step=state.update_step + 1,
        )
        metrics = {name: value.mean() for name, value in metrics.items()}
        returns = agent_episodes(
            self.env, self.env_params, self.act, self.eval_carry, state, k_eval, c.eval_episodes
        )
        metrics["episode_return"] = returns.mean()
        metrics["episodes"] = jnp.int32(c.eval_episodes)  # weighs episode_return in summaries
        if self.reference is not None:
            metrics["normalized_score"] = datasets.normalized_score(returns.mean(), *self.reference)
        return state, metrics

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, state: Any, key: jax.Array, num_episodes: int) -> dict[str, Any]:
        """`{"returns": (agents, n)}` and, when the dataset records its reference
        returns, `"normalized_score"` of every episode (D4RL's, 0 random, 100 expert)."""
        result = super().evaluate(state, key, num_episodes)
        if self.reference is not None:
            result["normalized_score"] = datasets.normalized_score(
                result["returns"], *self.reference
            )
        return result

    def finish(self, state: Any, run_dir: Any) -> dict[str, Any]:
        """summary.json: a final evaluation per agent (`FINAL_EVAL_EPISODES` episodes,
        seed `eval_seed`, what a default `jaxrl eval` reproduces), and the dataset's
        behaviour and reference returns, so results can be read against them (`jaxrl
        plot` draws the behaviour mean)."""
        result = self.evaluate(state, jax.random.key(self.eval_seed), FINAL_EVAL_EPISODES)
        out: dict[str, Any] = {
            f"final_eval_{name}_per_agent": [float(x) for x in jnp.mean(values, axis=1)]
            for name, values in result.items()
        }
        info = datasets.summary(self.data)
        keep = ("transitions", "episodes", "behaviour_return_mean", "behaviour_normalized_score")
        out.update({f"dataset_{k}": info[k] for k in keep if k in info})
        if self.reference is not None:
            out["dataset_random_return"], out["dataset_expert_return"] = self.reference
        return out


# ----------------------------------------------------------------------------- the SAC backbone


@dataclasses.dataclass(frozen=True)
class SoftOfflineConfig(OfflineConfig):
    """`OfflineConfig` plus SAC's temperature fields (Haarnoja et al. 2018): the offline
    learners on the SAC backbone (SAC-N/EDAC, CQL) subclass it."""

    alpha_lr: float = 3e-4
    """Adam learning rate of the temperature's logarithm (with autotune)."""
    alpha: float = 1.0
    """Entropy temperature: its initial value with autotune, else fixed."""
    autotune: bool = True
    """Tune alpha so the policy's entropy tracks target_entropy (Haarnoja et al. 2018, sec. 5)."""
    target_entropy: float | None = None
    """Entropy the temperature tuning aims at (None: -action_dim)."""
    layer_norm: bool = False
    """LayerNorm after each hidden layer of the critics (as RLPD's, so that an rlpd run
    can start from this run's networks: `jaxrl train rlpd --init-from RUN_DIR`)."""

    def validate(self) -> SoftOfflineConfig:
        """Raises `ConfigError` naming the first invalid field; returns self."""
        super().validate()
        cfg.check_positive(self, "alpha_lr", "alpha")
        cfg.check(
            self.target_entropy is None or cfg.is_finite_number(self.target_entropy),
            "target_entropy",
            self.target_entropy,
            "a finite number, or None for -action_dim",
        )
        return self


class SoftOfflineAgent(OfflineAgent):
    """An offline learner on the SAC backbone: a squashed-Gaussian actor, an ensemble of
    critics (`self.critic`, set by the subclass), the soft target with the minimum over
    the critics, the actor's and the temperature's steps (`actor_critic.py`). A subclass
    adds one thing, `critic_regulariser`: the term added to the critics' regression
    (SAC-N: none; EDAC: ensemble diversity; CQL: the conservative penalty). Its
    `sweepable` must contain `actor_lr`, `critic_lr`, `alpha_lr`, `gamma`, `tau`,
    `alpha` and `target_entropy`."""

    def __init__(self, config: SoftOfflineConfig, env: envs.Environment, env_params: Any):
        super().__init__(config, env, env_params)
        sizes, activation = tuple(config.hidden_sizes), config.activation
        self.actor = SquashedGaussianActor(self.action_dim, sizes, activation)

    def hyperparams(self, **overrides: float) -> Any:
        """The sweepable hyperparameters; a `target_entropy` of None becomes -action_dim
        (Haarnoja et al. 2018, sec. 5)."""
        if overrides.get("target_entropy", self.config.target_entropy) is None:
            overrides = {**overrides, "target_entropy": -float(self.action_dim)}
        return super().hyperparams(**overrides)

    def init_learner(self, key: jax.Array, hparams: Any, params: Any) -> tuple[Any, SoftLearner]:
        networks = {"actor": (self.actor, "obs"), "critic": (self.critic, "obs_action")}
        params = self.init_networks(key, networks, params)
        return params, SoftLearner.create(params, hparams.alpha)

    def policy(self, params: Any, obs: jax.Array, key: jax.Array, deterministic: bool) -> jax.Array:
        """`tanh` of the Gaussian's mean (or of a sample)."""
        dist = self.actor.apply(params["actor"], obs)
        return jnp.tanh(dist.mode() if deterministic else dist.sample(key))

    def critic_regulariser(
        self, critic_params: Any, actor_params: Any, batch: NStepBatch, q: jax.Array,
        hparams: Any, key: jax.Array,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:  # fmt: skip
        """The term added to the critics' loss and its metrics; `q (N, B)` are the
        critics' values at the dataset's actions. None here (SAC-N)."""
        return jnp.zeros(()), {}

    def learn_step(
        self,
        params: Any,
        learner: SoftLearner,
        batch: NStepBatch,
        hparams: Any,
        key: jax.Array,
        grad_step: jax.Array,
    ) -> tuple[Any, SoftLearner, dict[str, jax.Array]]:
        """Critics (soft target + regulariser), targets, then actor and temperature."""
        hp = hparams
        k_next, k_reg, k_actor = prng.split(key, 3)
        alpha = jnp.exp(learner.log_alpha)
        next_dist = self.actor.apply(params["actor"], batch.next_observation)
        next_u = next_dist.sample(k_next)
        next_q = self.critic.apply(learner.target_critic, batch.next_observation, jnp.tanh(next_u))
        target = soft_td_target(batch, next_q, next_dist.log_prob(next_u), alpha)

        def critic_loss_fn(p):
            q = self.critic.apply(p, batch.observation, batch.action)
            td = twin_critic_loss(q, target)
            extra, stats = self.critic_regulariser(p, params["actor"], batch, q, hp, k_reg)
            return td + extra, (q, td, stats)

        (loss, (q, td, stats)), grads = jax.value_and_grad(critic_loss_fn, has_aux=True)(
            params["critic"]
        )
        critic, critic_opt = adam_update(grads, learner.critic_opt, params["critic"], hp.critic_lr)
        target_critic = update_target(learner.target_critic, critic, hp.tau, grad_step, 1)
        actor, actor_opt, log_alpha, alpha_opt, actor_stats = soft_policy_step(
            self.actor,
            self.critic,
            {"actor": params["actor"], "critic": critic},
            learner,
            batch.observation,
            hp,
            self.config.autotune,
            k_actor,
        )
        learner = SoftLearner(
            target_critic=target_critic,
            actor_opt=actor_opt,
            critic_opt=critic_opt,
            log_alpha=log_alpha,
            alpha_opt=alpha_opt,
        )
        metrics = {"loss": loss, "td_loss": td, "q_mean": q.mean(), **stats, **actor_stats}
        return {"actor": actor, "critic": critic}, learner, metrics
