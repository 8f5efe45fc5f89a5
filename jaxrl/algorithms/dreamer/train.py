"""Dreamer: `init(key, hparams) -> DreamerState` and the pure `update(state)`.

A DreamerV3-style agent (Hafner et al. 2023, "Mastering Diverse Domains through
World Models") on the fused step of the algorithm contract. One `update`:

1. **act**: `train_every` steps of `num_envs` environments with the policy (the
   posterior of the newest observation, the actor on its features); every step
   goes into the replay buffer, which lives in the state (one per agent under
   `vmap`, saved in checkpoints, so a resumed run continues with the same data);
2. **learn** (once `learning_starts` steps are stored), `gradient_steps` times:
   sample `batch_size` sequences of `batch_length` steps; train the world model
   on them (`losses.world_model_loss`); from every posterior state, imagine
   `horizon` steps with the actor in the (frozen) world model; compute
   lambda-returns with the critic; train the actor (REINFORCE on percentile-
   normalised advantages) and the critic (two-hot regression with a slow-critic
   regulariser); move the slow critic.

The networks are in `networks.py` (the backbone is `jaxrl.nn.backbones`), the
losses in `losses.py`, the robustness tricks in `tricks.py`. `Dreamer.rollout` and
`Dreamer.open_loop` inspect a trained agent: a recorded trajectory, and the world
model's open-loop prediction of it from a few steps of context.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import acting, envs, prng
from jaxrl import config as cfg
from jaxrl.algorithms.offpolicy import learn_when
from jaxrl.replay import buffer
from jaxrl.returns import lambda_returns
from jaxrl.training.contract import EnvironmentAlgorithm

from . import losses, tricks
from .config import SWEEPABLE, DreamerConfig
from .losses import Sequences
from .networks import Actor, TwoHotHead, WorldModel, sample_action, sample_latent


@struct.dataclass
class PolicyCarry:
    """What acting carries from one environment step to the next, per environment."""

    backbone: Any  # the backbone's carry
    h: jax.Array  # the backbone's last output (h_{t+1} of the previous step)


@struct.dataclass
class DreamerState:
    """Everything a Dreamer run needs to continue exactly where it stopped."""

    params: Any  # {"world_model", "actor", "critic"}
    slow_critic: Any  # EMA of the critic's parameters (its regularisation target)
    opt_state: Any  # {"world_model", "actor", "critic"}
    return_scale: tricks.ReturnScale
    replay: buffer.ReplayState
    env_state: Any
    obs: jax.Array  # (num_envs, ...) the newest observation
    is_first: jax.Array  # (num_envs,) bool: obs starts an episode
    policy_carry: PolicyCarry
    episodes: acting.EpisodeStats
    key: jax.Array
    update_step: jax.Array  # int32: completed updates
    hparams: Any  # DreamerHyperParams


class Dreamer(EnvironmentAlgorithm):
    """A world-model agent for one environment and one static config (fused step)."""

    name = "dreamer"
    trains_on = "env"
    headline_metric = "episode_return"
    sweepable = SWEEPABLE
    progress_unit = "env_steps"
    ENV_FIELDS = ("env_state", "obs", "is_first", "policy_carry", "episodes")
    nan_metrics = ("loss", "actor_loss", "critic_loss")

    def __init__(self, config: DreamerConfig, env: envs.Environment, env_params: Any):
        self.config = c = config.validate()
        self.steps_per_update = c.steps_per_update
        self.num_updates = c.num_updates
        self.env, self.env_params = env, env_params
        self.action_space = space = env.action_space(env_params)
        if isinstance(space, envs.spaces.Discrete):
            self.discrete, self.action_dim = True, int(space.n)
        elif isinstance(space, envs.spaces.Box) and len(space.shape) == 1:
            self.discrete, self.action_dim = False, int(space.shape[0])
        else:
            raise cfg.ConfigError(
                f"invalid env={c.env!r}: dreamer needs a Discrete or a 1-D Box action space, "
                f"got {space!r}"
            )
        obs_space = env.observation_space(env_params)
        self.obs_shape = tuple(obs_space.shape)
        self.obs_dtype = jnp.uint8 if jnp.dtype(obs_space.dtype) == jnp.bool_ else jnp.float32
        sizes = c.sizes
        self.world_model = WorldModel(
            obs_shape=self.obs_shape,
            action_dim=self.action_dim,
            discrete=self.discrete,
            sizes=sizes,
            backbone=c.backbone,
            backbone_options=_backbone_options(c),
            posterior=c.resolved_posterior,
            unimix=c.unimix,
            num_bins=c.num_bins,
            conv_depth=c.conv_depth,
            image_net=c.image_net,
        )
        self.actor = Actor(
            sizes["units"], sizes["layers"], self.action_dim, self.discrete, c.unimix
        )
        self.critic = TwoHotHead(sizes["units"], sizes["layers"], c.num_bins)
        self.bins = tricks.twohot_bins(c.num_bins)

    # ------------------------------------------------------------------ construction
    def init_params(self, key: jax.Array) -> dict[str, Any]:
        k_wm, k_actor, k_critic = prng.split(key, 3)
        features = jnp.zeros((1, self.world_model.feature_size))
        return {
            "world_model": self.world_model.init(k_wm),
            "actor": self.actor.init(k_actor, features),
            "critic": self.critic.init(k_critic, features),
        }

    def init(self, key: jax.Array, hparams: Any, params: Any = None) -> DreamerState:
        """Fresh (or warm-started) networks, an empty replay buffer, reset environments."""
        c = self.config
        key, k_params, k_env = jax.random.split(key, 3)
        fresh = lambda: self.init_params(k_params)  # noqa: E731
        if params is None:
            params = fresh()
        else:
            cfg.check_same_tree("params", jax.eval_shape(fresh), params)
            params = jax.tree.map(jnp.asarray, params)
        obs, env_state = acting.reset_envs(self.env, self.env_params, k_env, c.num_envs)
        opt = self._optimizers(hparams)
        example = Sequences(
            obs=jnp.zeros(self.obs_shape, self.obs_dtype),
            action=jnp.zeros((), jnp.int32)
            if self.discrete
            else jnp.zeros((self.action_dim,), jnp.float32),
            reward=jnp.float32(0),
            is_first=jnp.bool_(False),
            terminated=jnp.bool_(False),
        )
        rows = c.buffer_size // c.num_envs
        return DreamerState(
            params=params,
            slow_critic=params["critic"],
            opt_state={name: opt[name].init(params[name]) for name in opt},
            return_scale=tricks.init_return_scale(),
            replay=buffer.init(example, rows * c.num_envs, c.num_envs),
            env_state=env_state,
            obs=obs,
            is_first=jnp.ones((c.num_envs,), jnp.bool_),
            policy_carry=self.eval_carry(c.num_envs),
            episodes=acting.EpisodeStats.zeros(c.num_envs),
            key=key,
            update_step=jnp.zeros((), jnp.int32),
            hparams=hparams,
        )

    def _optimizers(self, hp: Any) -> dict[str, optax.GradientTransformation]:
        """Adam with global-norm clipping per part (DreamerV3's three optimisers), built
        from the (possibly traced, per-agent) learning rates; the state layout does not
        depend on their values."""
        c = self.config

        def adam(lr, clip):
            return optax.chain(
                optax.clip_by_global_norm(clip),
                optax.scale_by_adam(eps=c.adam_eps),
                optax.scale(-lr),
            )

        return {
            "world_model": adam(hp.model_lr, c.model_grad_clip),
            "actor": adam(hp.actor_lr, c.actor_critic_grad_clip),
            "critic": adam(hp.critic_lr, c.actor_critic_grad_clip),
        }

    # ------------------------------------------------------------------ acting
    def eval_carry(self, num_episodes: int) -> PolicyCarry:
        """Empty history for `num_episodes` environments."""
        wm = self.world_model
        return PolicyCarry(
            backbone=wm.backbone.initial_carry(num_episodes),
            h=jnp.zeros((num_episodes, wm.hidden_size), jnp.float32),
        )

    def policy(
        self, params: Any, obs: jax.Array, carry: PolicyCarry, is_first: jax.Array, key, mode: bool
    ) -> tuple[jax.Array, PolicyCarry]:
        """One step of the agent in its environments: the posterior of `obs` given the
        history, an action from the actor, and the backbone's step under it."""
        wm, wm_params = self.world_model, params["world_model"]
        k_latent, k_action = prng.split(key)
        h = jnp.where(is_first[:, None], 0.0, carry.h)
        embed = wm.encoder.apply(wm_params["encoder"], obs)
        z = sample_latent(k_latent, wm.posterior_logits(wm_params, h, embed))
        policy = self.actor.apply(params["actor"], jnp.concatenate([h, z], -1))
        action = policy.mode() if mode else sample_action(policy, k_action)
        x = jnp.concatenate([z, wm.encode_action(action)], -1)
        backbone, y = wm.backbone.step(wm_params["backbone"], carry.backbone, x, is_first)
        return action, PolicyCarry(backbone=backbone, h=y)

    def act(self, state: DreamerState, obs, carry, reset, key, deterministic: bool = True):
        """Evaluation policy: `(env action, carry)`; the actor's mode when deterministic."""
        action, carry = self.policy(state.params, obs, carry, reset, key, deterministic)
        return self.to_env_action(action), carry

    def to_env_action(self, action: jax.Array) -> jax.Array:
        return action if self.discrete else acting.to_box(action, self.action_space)

    # ------------------------------------------------------------------ the update
    def update(self, state: DreamerState) -> tuple[DreamerState, dict[str, jax.Array]]:
        """`train_every` environment steps into replay, then a learning phase."""
        c = self.config
        state, finished = jax.lax.scan(self._env_step, state, None, length=c.train_every)
        stored = (state.update_step + 1) * self.steps_per_update
        state, metrics = learn_when(stored >= c.learning_starts, self._learn_phase, state)
        metrics = {**metrics, **acting.episode_metrics(finished)}
        return state.replace(update_step=state.update_step + 1), metrics

    def _env_step(self, state: DreamerState, _: None):
        key, k_act, k_env = prng.split(state.key, 3)
        action, carry = self.policy(
            state.params, state.obs, state.policy_carry, state.is_first, k_act, False
        )
        next_obs, env_state, reward, terminated, truncated, _ = acting.step_envs(
            self.env, self.env_params, k_env, state.env_state, self.to_env_action(action)
        )
        done = jnp.logical_or(terminated, truncated)
        episodes, finished = acting.track_episodes(state.episodes, reward, done)
        step = Sequences(
            obs=state.obs,
            action=action,
            reward=reward.astype(jnp.float32),
            is_first=state.is_first,
            terminated=terminated,
        )
        state = state.replace(
            replay=buffer.add(state.replay, step),
            env_state=env_state,
            obs=next_obs,
            is_first=done,  # auto-reset: after an end, the next observation starts an episode
            policy_carry=carry,
            episodes=episodes,
            key=key,
        )
        return state, finished

    def _learn_phase(self, state: DreamerState) -> tuple[DreamerState, dict[str, jax.Array]]:
        key, k_steps = prng.split(state.key)
        state, metrics = jax.lax.scan(
            self._train_step,
            state.replace(key=key),
            prng.split(k_steps, self.config.gradient_steps),
        )
        return state, {name: value.mean() for name, value in metrics.items()}

    def _train_step(self, state: DreamerState, key: jax.Array):
        """One gradient step of the world model, then of the actor and the critic."""
        c, hp, wm = self.config, state.hparams, self.world_model
        k_sample, k_observe, k_imagine = prng.split(key, 3)
        drawn = buffer.sample_sequences(state.replay, k_sample, c.batch_size, c.batch_length)
        batch = Sequences(*drawn.items)
        opt = self._optimizers(hp)
        params, opt_state = dict(state.params), dict(state.opt_state)

        def descend(part: str, objective) -> Any:
            """One optimiser step of `params[part]` on `objective` (`(loss, aux)`); returns aux."""
            (_, aux), grads = jax.value_and_grad(objective, has_aux=True)(params[part])
            updates, opt_state[part] = opt[part].update(grads, opt_state[part], params[part])
            params[part] = optax.apply_updates(params[part], updates)
            return aux

        # World model (DreamerV3 eq. 3-5).
        metrics, posterior = descend(
            "world_model",
            lambda p: losses.world_model_loss(
                wm,
                p,
                batch,
                k_observe,
                self.bins,
                free_nats=c.free_nats,
                dyn_scale=c.dyn_scale,
                rep_scale=c.rep_scale,
            ),
        )

        # Imagination from every posterior state, in the updated (frozen) world model.
        traj = self._imagine(params, jax.lax.stop_gradient(posterior), k_imagine)
        values = tricks.twohot_mean(
            self.critic.apply(params["critic"], traj["features"]), self.bins
        )
        discount = hp.gamma * traj["cont"]
        returns = lambda_returns(traj["reward"], discount, values[1:], hp.lam)
        # w_t: the probability that the imagined episode is still running at step t.
        weights = jnp.cumprod(
            jnp.concatenate([jnp.ones_like(traj["cont"][:1]), traj["cont"][:-1]], 0), axis=0
        )
        return_scale = tricks.update_return_scale(state.return_scale, returns, c.return_norm_decay)
        divisor = tricks.return_scale_divisor(return_scale)
        features = traj["features"][:-1]

        def actor_objective(actor_params):
            policy = self.actor.apply(actor_params, features)
            return losses.actor_loss(
                policy, traj["action"], returns, values[:-1], weights, divisor, hp.entropy_coef
            )

        actor_metrics = descend("actor", actor_objective)

        slow_values = tricks.twohot_mean(self.critic.apply(state.slow_critic, features), self.bins)

        def critic_objective(critic_params):
            logits = self.critic.apply(critic_params, features)
            return losses.critic_loss(
                logits, returns, slow_values, weights, self.bins, c.slow_critic_coef
            )

        critic_metrics = descend("critic", critic_objective)
        slow_critic = optax.incremental_update(
            params["critic"], state.slow_critic, 1.0 - c.slow_critic_decay
        )
        metrics = {
            **metrics,
            **actor_metrics,
            **critic_metrics,
            "imagined_return": returns.mean(),
            "imagined_reward": traj["reward"].mean(),
            "return_scale": divisor,
            "value": values.mean(),
        }
        state = state.replace(
            params=params,
            opt_state=opt_state,
            slow_critic=slow_critic,
            return_scale=return_scale,
        )
        return state, metrics

    def _imagine(self, params: Any, posterior: dict[str, Any], key: jax.Array) -> dict[str, Any]:
        """`horizon` steps with the actor from `imagination_starts` posterior states (N),
        drawn without replacement from the batch.

        Returns time-major `features` `[H+1, N, F]` (the start state first), the
        `action` taken in each of the first H, and the predicted `reward` and
        continuation probability `cont` after each `[H, N]`. Nothing is differentiated
        through it: the actor learns by REINFORCE, the critic by regression.
        """
        wm, wm_params = self.world_model, params["world_model"]
        k_starts, key = prng.split(key)
        num_steps = self.config.replayed_per_step
        chosen = jax.random.permutation(k_starts, num_steps)[: self.config.imagination_starts]
        flat = lambda x: x.reshape(num_steps, *x.shape[2:])[chosen]  # noqa: E731
        start = jax.tree.map(flat, (posterior["carry"], posterior["h"], posterior["z"]))
        reset = flat(posterior["is_first"])

        def step(carry, key):
            backbone, h, z, reset = carry
            k_action, k_latent = prng.split(key)
            features = jnp.concatenate([h, z], -1)
            action = sample_action(self.actor.apply(params["actor"], features), k_action)
            backbone, h, z = wm.imagine_step(wm_params, backbone, z, action, reset, k_latent)
            reward = tricks.twohot_mean(wm.reward_logits(wm_params, h), self.bins)
            cont = jax.nn.sigmoid(wm.cont_logit(wm_params, h))
            out = {"features": features, "action": action, "reward": reward, "cont": cont}
            return (backbone, h, z, jnp.zeros_like(reset)), out

        (_, h, z, _), traj = jax.lax.scan(
            step, (*start, reset), prng.split(key, self.config.horizon)
        )
        last = jnp.concatenate([h, z], -1)[None]
        traj = jax.lax.stop_gradient(traj)
        traj["features"] = jnp.concatenate([traj["features"], jax.lax.stop_gradient(last)], 0)
        return traj

    # ------------------------------------------------------------------ inspection
    def rollout(
        self, params: Any, key: jax.Array, num_steps: int, deterministic: bool = True
    ) -> Sequences:
        """`num_steps` steps of the policy in one fresh environment, recorded the way
        replay stores them (`Sequences`, every field `[num_steps, ...]`): step t holds the
        observation, whether it starts an episode, the agent's action (in the actor's
        space: an index, or a point of [-1, 1]^d, as `open_loop` and `observe` take it)
        and the reward and termination that followed. The environment resets itself
        after an end, so a later `is_first` marks where the next episode starts.

        Why: evaluation keeps only returns, and a world model is inspected on a whole
        recorded trajectory (`open_loop`). `params` are one agent's: a trained state is
        stacked over agents, so take `jax.tree.map(lambda x: x[i], state.params)`.
        Jittable with `num_steps` and `deterministic` static; `deterministic` acts with
        the actor's mode (as evaluation does), otherwise it samples (as training does).
        """
        cfg.check(_is_int(num_steps) and num_steps >= 1, "num_steps", num_steps, "an int >= 1")
        num_steps = int(num_steps)
        k_reset, k_run = prng.split(key)
        obs, env_state = acting.reset_envs(self.env, self.env_params, k_reset, 1)
        init = (obs, env_state, self.eval_carry(1), jnp.ones((1,), jnp.bool_))

        def step(c, key):
            obs, env_state, carry, is_first = c
            k_act, k_env = prng.split(key)
            action, carry = self.policy(params, obs, carry, is_first, k_act, deterministic)
            next_obs, env_state, reward, terminated, truncated, _ = acting.step_envs(
                self.env, self.env_params, k_env, env_state, self.to_env_action(action)
            )
            record = Sequences(
                obs=obs,
                action=action,
                reward=reward.astype(jnp.float32),
                is_first=is_first,
                terminated=terminated,
            )
            return (next_obs, env_state, carry, jnp.logical_or(terminated, truncated)), record

        _, steps = jax.lax.scan(step, init, prng.split(k_run, num_steps))
        return jax.tree.map(lambda x: x[:, 0], steps)  # [T, 1, ...] -> [T, ...]

    def open_loop(
        self,
        params: Any,
        obs: jax.Array,
        action: jax.Array,
        is_first: jax.Array,
        context: int,
        key: jax.Array,
    ) -> dict[str, jax.Array]:
        """The world model's open-loop prediction of a recorded trajectory.

        Given one trajectory `[T, ...]` (or a batch `[B, T, ...]`, laid out as
        `Sequences`/`rollout`: the action of step t is the one taken after `obs[t]`):

        1. the posterior over the first `context` steps, as training computes it
           (`WorldModel.observe`: the model sees those observations);
        2. from the last posterior state, `T - context` imagined steps under the
           recorded actions `action[context - 1:]`, with latents sampled from the prior
           (`WorldModel.imagine_step`, as imagination in training does, but with the
           given actions instead of the actor's): the model sees no more observations;
        3. every step's features decoded.

        Returns `obs` (`[..., T, *obs_shape]`: `symexp` of the decoder, so in
        observation space), `reward` (`[..., T]`, the expected two-hot reward that
        followed each step) and `cont` (`[..., T]`, the probability that the episode
        continues after it), each with the input's batch axes. Steps `< context` are
        reconstructions, the rest predictions.

        Why: how far ahead the imagined trajectories stay close to real ones is what
        the actor's training relies on; DreamerV3 (Hafner et al. 2023, "Mastering
        Diverse Domains through World Models", fig. 5 and appendix) shows its world
        model the same way, as open-loop video predictions from a few context frames.
        The imagined part ignores later `is_first` flags (the model cannot see an
        episode start coming): pass one episode, or cut at its end.

        `context` is an int in [1, T] (static under `jax.jit`); `key` draws the
        latents (a different key, a different imagined future).
        """
        wm, wm_params = self.world_model, params["world_model"]
        obs, action, is_first, batched = self._check_trajectory(obs, action, is_first)
        length = is_first.shape[1]
        cfg.check(
            _is_int(context) and 1 <= context <= length,
            "context",
            context,
            f"an int in [1, T = {length}] (the steps the posterior sees before imagining)",
        )
        context = int(context)
        k_observe, k_imagine = prng.split(key)
        post = wm.observe(
            wm_params,
            obs[:, :context],
            action[:, :context],
            is_first[:, :context],
            k_observe,
        )
        last = lambda x: x[:, context - 1]  # noqa: E731
        start = (jax.tree.map(last, post["carry"]), last(post["z"]), last(post["is_first"]))

        def step(carry, inputs):
            backbone, z, reset = carry
            action_t, k_t = inputs
            backbone, h, z = wm.imagine_step(wm_params, backbone, z, action_t, reset, k_t)
            return (backbone, z, jnp.zeros_like(reset)), (h, z)

        # Actions a_{c-1} .. a_{T-1} give h_c .. h_T (and z_c .. z_T from the prior).
        actions = jnp.swapaxes(action[:, context - 1 :], 0, 1)
        keys = prng.split(k_imagine, length - context + 1)
        _, imagined = jax.lax.scan(step, start, (actions, keys))
        h_im, z_im = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), imagined)
        # Step t's model state is (h_t, z_t); its reward and continuation read h_{t+1}.
        # observe's next_h of step c-1 is h_im[:, 0] (the same backbone step).
        h = jnp.concatenate([post["h"], h_im[:, :-1]], axis=1)
        z = jnp.concatenate([post["z"], z_im[:, :-1]], axis=1)
        next_h = jnp.concatenate([post["next_h"], h_im[:, 1:]], axis=1)
        out = {
            "obs": tricks.symexp(wm.decode(wm_params, h, z)),
            "reward": tricks.twohot_mean(wm.reward_logits(wm_params, next_h), self.bins),
            "cont": jax.nn.sigmoid(wm.cont_logit(wm_params, next_h)),
        }
        return out if batched else jax.tree.map(lambda x: x[0], out)

    def _check_trajectory(
        self, obs: Any, action: Any, is_first: Any
    ) -> tuple[jax.Array, jax.Array, jax.Array, bool]:
        """`open_loop`'s inputs with a batch axis (added if absent), shapes checked
        against the observation and action spaces; also whether they had one."""
        obs, action, is_first = jnp.asarray(obs), jnp.asarray(action), jnp.asarray(is_first)
        n = len(self.obs_shape)
        if obs.ndim not in (n + 1, n + 2) or tuple(obs.shape[obs.ndim - n :]) != self.obs_shape:
            raise ValueError(
                f"invalid obs shape {tuple(obs.shape)}: expected [T, *{self.obs_shape}] or "
                f"[B, T, *{self.obs_shape}]"
            )
        lead = tuple(obs.shape[: obs.ndim - n])
        action_shape = lead if self.discrete else (*lead, self.action_dim)
        if tuple(action.shape) != action_shape:
            raise ValueError(
                f"invalid action shape {tuple(action.shape)}: expected {action_shape} "
                f"(obs has leading axes {lead})"
            )
        if tuple(is_first.shape) != lead:
            raise ValueError(
                f"invalid is_first shape {tuple(is_first.shape)}: expected {lead} "
                f"(obs has leading axes {lead})"
            )
        batched = len(lead) == 2
        if not batched:
            obs, action, is_first = obs[None], action[None], is_first[None]
        return obs, action, is_first.astype(jnp.bool_), batched


def _is_int(x: Any) -> bool:
    """A Python or NumPy integer (not a bool, not an array or a traced value)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _backbone_options(c: DreamerConfig) -> dict[str, Any]:
    """The config's options of the chosen backbone (`jaxrl.nn.backbones.make`)."""
    if c.backbone == "transformer":
        return {
            "num_layers": c.num_backbone_layers,
            "num_heads": c.transformer_heads,
            "window": c.transformer_window,
        }
    if c.backbone == "ssm":
        return {"num_layers": c.num_backbone_layers}
    return {}


def make(
    config: DreamerConfig, env: envs.Environment | None = None, env_params: Any = None
) -> Dreamer:
    """Builds Dreamer for `config.env` (or the given environment)."""
    if env is None:
        env, env_params = envs.make(config.env)
    return Dreamer(config, env, env_params if env_params is not None else env.default_params)
