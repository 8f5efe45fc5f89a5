"""Candidate optimisations of jaxrl's PPO, patched into one worker process for measurement.

`install(name)` patches the already-imported jaxrl modules of *this process
only*; nothing in the repository is edited. Names can be joined with "+"
(e.g. "fused_bootstrap+unroll"). Used by jaxrl_ppo.py and ppo_profile.py
through `ppo_throughput.py --variants ...`.

  base             jaxrl as it is
  fused_bootstrap  the rollout's two critic passes per step (on obs and on
                   info["final_observation"]) become one network call on the
                   concatenated 2B rows, after the env step; the actor pass
                   stays before it. Same maths, fewer ops.
  no_bootstrap     no truncation-bootstrap critic pass at all. Changes the
                   algorithm: only an upper bound of what that pass costs.
  nocond           the driver's per-update `lax.cond` (skips updates past the
                   end of the run) replaced by a direct call. Exact only when
                   the chunk length divides the number of updates, which
                   install() cannot see: run with log_every = 16 * 512 (chunk
                   16; 976 = 61 x 16 updates at 500k steps). Stands for the
                   proposal "choose a chunk length that divides num_updates
                   and drop the cond".
  min_metrics      PPO.update returns only the metrics the driver needs (loss,
                   episode_*), so XLA drops the other per-minibatch
                   diagnostics (policy/value loss, entropy, clip fraction,
                   approx KL, lr). Stands for "compute diagnostics once per
                   update instead of per minibatch".
  unroll           lax.scan unroll factors: rollout step x8, minibatch steps
                   x4 (all of them), epochs x1. Same maths, fewer loop trips.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

UNROLL = {"step": 8, "minibatch_step": 4}


def install(name: str) -> None:
    for part in name.split("+"):
        if part == "base":
            continue
        if part not in _INSTALLERS:
            raise ValueError(f"unknown variant {part!r}; known: base, {', '.join(_INSTALLERS)}")
        _INSTALLERS[part]()


# ----------------------------------------------------------------------------- unroll
class _LaxProxy:
    def __getattr__(self, name):
        return getattr(jax.lax, name)

    @staticmethod
    def scan(f, init, xs=None, length=None, **kwargs):
        kwargs.setdefault("unroll", UNROLL.get(getattr(f, "__name__", ""), 1))
        return jax.lax.scan(f, init, xs, length=length, **kwargs)


class _JaxProxy:
    lax = _LaxProxy()

    def __getattr__(self, name):
        return getattr(jax, name)


def _install_unroll() -> None:
    from jaxrl.algorithms.ppo import train as ppo_train

    ppo_train.jax = _JaxProxy()


# ----------------------------------------------------------------------------- rollout
def _make_rollout(bootstrap: str):
    """A feed-forward copy of PPO._rollout with the bootstrap critic pass fused or dropped."""
    from jaxrl.algorithms.ppo.train import Transition
    from jaxrl.returns import bootstrap_truncated_rewards

    def _rollout(self, state):
        c, hp = self.config, state.hparams
        if c.recurrent or c.normalize_obs or c.normalize_reward:
            raise NotImplementedError("variant covers the feed-forward, unnormalised config only")
        env_step = jax.vmap(self.env.step, in_axes=(0, 0, 0, None))

        def step(state, _):
            key, k_act, k_env = jax.random.split(state.key, 3)
            obs_in = state.obs.astype(jnp.float32)
            dist, _ = self.network.apply(state.params, obs_in)  # value unused: XLA drops the critic
            action = dist.sample(k_act)
            log_prob = dist.log_prob(action)
            next_obs, env_state, reward, terminated, truncated, info = env_step(
                jax.random.split(k_env, c.num_envs),
                state.env_state,
                self.to_env_action(action),
                self.env_params,
            )
            done = jnp.logical_or(terminated, truncated)
            episode_return = state.episode_return + reward
            episode_length = state.episode_length + 1
            discounted_return = state.discounted_return * hp.gamma + reward
            if bootstrap == "fused":
                final_obs_in = info["final_observation"].astype(jnp.float32)
                _, values = self.network.apply(
                    state.params, jnp.concatenate([obs_in, final_obs_in], 0)
                )
                value, final_value = values[: c.num_envs], values[c.num_envs :]
                reward = bootstrap_truncated_rewards(
                    reward, terminated, truncated, jax.lax.stop_gradient(final_value), hp.gamma
                )
            else:  # "none": no bootstrap (changes the algorithm)
                _, value = self.network.apply(state.params, obs_in)
            transition = Transition(
                obs=obs_in,
                action=action,
                log_prob=log_prob,
                value=value,
                reward=reward,
                done=done,
                reset=state.done,
            )
            episode = {"returned": done, "return": episode_return, "length": episode_length}
            new_state = state.replace(
                key=key,
                env_state=env_state,
                obs=next_obs,
                done=done,
                discounted_return=jnp.where(done, 0.0, discounted_return),
                episode_return=jnp.where(done, 0.0, episode_return),
                episode_length=jnp.where(done, 0, episode_length),
            )
            return new_state, (transition, episode)

        start_carry = state.rnn_carry
        from jaxrl.algorithms.ppo import train as ppo_train  # honours the unroll proxy

        state, (traj, episode) = ppo_train.jax.lax.scan(step, state, None, length=c.num_steps)
        n_done = episode["returned"].sum()
        denom = jnp.maximum(n_done, 1).astype(jnp.float32)
        ep_metrics = {
            "episode_return": jnp.where(episode["returned"], episode["return"], 0.0).sum() / denom,
            "episode_length": jnp.where(episode["returned"], episode["length"], 0).sum() / denom,
            "episodes": n_done.astype(jnp.int32),
        }
        return state, traj, {**ep_metrics, "_start_carry": start_carry}

    return _rollout


def _install_rollout(bootstrap: str):
    def install() -> None:
        from jaxrl.algorithms.ppo.train import PPO

        PPO._rollout = _make_rollout(bootstrap)

    return install


def _install_nocond() -> None:
    from jaxrl.training import driver

    class _DriverLax(_LaxProxy):
        @staticmethod
        def cond(pred, true_fun, false_fun, *operands):
            return true_fun(*operands)

    class _DriverJax(_JaxProxy):
        lax = _DriverLax()

    driver.jax = _DriverJax()


KEEP_METRICS = ("loss", "episode_return", "episode_length", "episodes")


def _install_min_metrics() -> None:
    from jaxrl.algorithms.ppo.train import PPO

    full_update = PPO.update

    def update(self, state):
        state, metrics = full_update(self, state)
        return state, {k: metrics[k] for k in KEEP_METRICS}

    PPO.update = update


_INSTALLERS = {
    "fused_bootstrap": _install_rollout("fused"),
    "no_bootstrap": _install_rollout("none"),
    "unroll": _install_unroll,
    "nocond": _install_nocond,
    "min_metrics": _install_min_metrics,
}
