"""Preference losses on pairwise data: DPO, IPO, SimPO, and the Bradley-Terry reward model.

Inputs are per-pair arrays of shape `(batch,)`: the *summed* log-probability of the
chosen and of the rejected completion under the policy (and, for DPO and IPO, under
the frozen reference), from `sequence_logprobs` over `jaxrl.lm.sampling.token_logprobs`
and a completion mask. Every loss returns the per-pair loss (to average over the whole
batch, so gradient accumulation stays exact) and metrics: the mean implicit reward of
the chosen and rejected completions, the reward accuracy (how often the chosen one
scores higher, a tie counting half: a policy equal to its reference scores 0.5, as a
coin would) and the mean reward margin. The logistic losses (DPO, SimPO, Bradley-Terry)
take a `label_smoothing` epsilon: the preference label is taken to be flipped with
probability epsilon (conservative DPO, Mitchell 2023, "A note on DPO with noisy
preferences"), so

    L = -(1 - eps) log sigmoid(z) - eps log sigmoid(-z)

which no longer drives the margin z to infinity. `preference_loss` selects one by name (the
`preference_loss` config field).

`chosen_nll` is RPO's term, added to any of the policy losses with weight `nll_weight`.

What does not live here: the data pipeline and the trainer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.config import ConfigError, check

Array = jax.Array
Scalar = jax.Array | float

PREFERENCE_LOSSES = ("dpo", "ipo", "simpo")
"""Names accepted by `preference_loss`."""


def sequence_logprobs(logp: Array, mask: Array) -> tuple[Array, Array]:
    """Summed log-probability of each sequence's mask tokens, and its length in tokens.

    Args:
      logp: (batch, length) token log-probs (`token_logprobs`).
      mask: (batch, length) float 0/1 or bool, 1 on the completion's tokens.
    Returns:
      `(sum_logp, length)`, both (batch,) float32.
    """
    m = jnp.asarray(mask).astype(jnp.float32)
    return jnp.sum(jnp.asarray(logp, jnp.float32) * m, axis=1), jnp.sum(m, axis=1)


def _metrics(reward_chosen: Array, reward_rejected: Array) -> dict[str, Array]:
    """Means over the pairs; the accuracy counts a tie as half a correct ranking."""
    wins = jnp.where(reward_chosen > reward_rejected, 1.0, 0.0)
    wins = jnp.where(reward_chosen == reward_rejected, 0.5, wins)
    return {
        "reward_chosen": jnp.mean(reward_chosen),
        "reward_rejected": jnp.mean(reward_rejected),
        "reward_accuracy": jnp.mean(wins),
        "reward_margin": jnp.mean(reward_chosen - reward_rejected),
    }


def logistic_preference_loss(margin: Array, label_smoothing: Scalar = 0.0) -> Array:
    """-(1 - eps) log sigmoid(z) - eps log sigmoid(-z) of the margin z (see the module
    docstring); eps = 0 is the plain Bradley-Terry negative log-likelihood."""
    loss = -jax.nn.log_sigmoid(margin)
    if isinstance(label_smoothing, (int, float)) and label_smoothing == 0:
        return loss
    return (1.0 - label_smoothing) * loss - label_smoothing * jax.nn.log_sigmoid(-margin)


def _check_beta(beta: Scalar) -> None:
    if isinstance(beta, (int, float)):
        check(beta > 0, "beta", beta, "> 0")


def dpo_loss(
    policy_chosen: Array,
    policy_rejected: Array,
    ref_chosen: Array,
    ref_rejected: Array,
    beta: Scalar,
    label_smoothing: Scalar = 0.0,
) -> tuple[Array, dict[str, Array]]:
    """Direct Preference Optimization (Rafailov et al. 2023, eq. 7).

        u_w = beta (log pi(y_w) - log pi_ref(y_w)),  u_l likewise for y_l
        L = -log sigmoid(u_w - u_l)

    u is the implicit reward of the policy (eq. 5), reported as `reward_chosen` and
    `reward_rejected`. Uses `jax.nn.log_sigmoid`, stable for large margins. With
    `label_smoothing` eps > 0, conservative DPO (see the module docstring).
    """
    _check_beta(beta)
    reward_chosen = beta * (policy_chosen - ref_chosen)
    reward_rejected = beta * (policy_rejected - ref_rejected)
    loss = logistic_preference_loss(reward_chosen - reward_rejected, label_smoothing)
    return loss, _metrics(
        jax.lax.stop_gradient(reward_chosen), jax.lax.stop_gradient(reward_rejected)
    )


def ipo_loss(
    policy_chosen: Array,
    policy_rejected: Array,
    ref_chosen: Array,
    ref_rejected: Array,
    beta: Scalar,
) -> tuple[Array, dict[str, Array]]:
    """Identity Preference Optimization (Azar et al. 2023, "A general theoretical paradigm
    to understand learning from human preferences"), with tau = `beta`:

        h = (log pi(y_w) - log pi_ref(y_w)) - (log pi(y_l) - log pi_ref(y_l))
        L = (h - 1 / (2 tau))^2

    A squared loss that pulls the log-ratio margin to a finite target instead of pushing
    it to infinity, so it does not overfit deterministic preferences as DPO can. TRL
    feeds it length-*averaged* log-probs; we take whatever the caller passes (the
    paper's summed log-probs with `sequence_logprobs`, or divide by the lengths first).
    Rewards reported as DPO's, beta times the log-ratios.
    """
    _check_beta(beta)
    chosen = policy_chosen - ref_chosen
    rejected = policy_rejected - ref_rejected
    loss = (chosen - rejected - 1.0 / (2.0 * beta)) ** 2
    return loss, _metrics(
        jax.lax.stop_gradient(beta * chosen), jax.lax.stop_gradient(beta * rejected)
    )


def simpo_loss(
    policy_chosen: Array,
    policy_rejected: Array,
    chosen_length: Array,
    rejected_length: Array,
    beta: Scalar,
    gamma: Scalar,
    label_smoothing: Scalar = 0.0,
) -> tuple[Array, dict[str, Array]]:
    """SimPO (Meng et al. 2024, "SimPO: simple preference optimization with a
    reference-free reward"): a length-normalised reward and a target margin, no
    reference model.

        u = beta / |y| log pi(y)
        L = -log sigmoid(u_w - u_l - gamma)

    `gamma` is the paper's margin itself; TRL's CPO trainer takes the ratio gamma/beta
    (`simpo_gamma`), so TRL's value v corresponds to gamma = beta v here. Lengths are
    clamped below at 1 token. `label_smoothing` as DPO's.
    """
    _check_beta(beta)
    reward_chosen = beta * policy_chosen / jnp.maximum(chosen_length, 1.0)
    reward_rejected = beta * policy_rejected / jnp.maximum(rejected_length, 1.0)
    loss = logistic_preference_loss(reward_chosen - reward_rejected - gamma, label_smoothing)
    return loss, _metrics(
        jax.lax.stop_gradient(reward_chosen), jax.lax.stop_gradient(reward_rejected)
    )


def preference_loss(
    name: str,
    policy_chosen: Array,
    policy_rejected: Array,
    *,
    beta: Scalar,
    ref_chosen: Array | None = None,
    ref_rejected: Array | None = None,
    chosen_length: Array | None = None,
    rejected_length: Array | None = None,
    gamma: Scalar = 0.0,
    label_smoothing: Scalar = 0.0,
) -> tuple[Array, dict[str, Array]]:
    """The preference loss `name` (config field `preference_loss`): `dpo` and `ipo` need the
    reference log-probs, `simpo` the completion lengths and its margin `gamma`;
    `label_smoothing` applies to the logistic losses (`dpo`, `simpo`), not to `ipo`.

    Returns `(per_pair_loss (batch,), metrics)`.
    """
    check(name in PREFERENCE_LOSSES, "preference_loss", name, f"one of {list(PREFERENCE_LOSSES)}")
    if name == "simpo":
        if chosen_length is None or rejected_length is None:
            raise ConfigError("preference_loss='simpo' needs chosen_length and rejected_length")
        return simpo_loss(
            policy_chosen,
            policy_rejected,
            chosen_length,
            rejected_length,
            beta,
            gamma,
            label_smoothing,
        )
    if ref_chosen is None or ref_rejected is None:
        raise ConfigError(
            f"preference_loss={name!r} needs the reference model's log-probs "
            "(ref_chosen and ref_rejected)"
        )
    if name == "ipo":
        return ipo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta)
    return dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta, label_smoothing)


def chosen_nll(policy_chosen: Array, chosen_length: Array) -> Array:
    """The chosen completion's negative log-likelihood per token, RPO's extra term
    (Pang et al. 2024, "Iterative reasoning preference optimization", eq. 3):

        L_RPO = L_pref + alpha * (-log pi(y_w | x) / |y_w|)

    A pairwise loss only sees the margin, so it can lower the chosen completion's
    likelihood as long as the rejected one falls faster (likelihood displacement: Pal
    et al. 2024, "Smaug"; Razin et al. 2024); on a task with one right answer that
    lowers greedy exact match even as reward accuracy rises. The NLL term anchors
    log pi(y_w). Lengths are clamped below at 1 token. Returns (batch,).
    """
    return -policy_chosen / jnp.maximum(chosen_length, 1.0)


def bradley_terry_loss(
    reward_chosen: Array, reward_rejected: Array, label_smoothing: Scalar = 0.0
) -> tuple[Array, dict[str, Array]]:
    """Reward-model loss under the Bradley-Terry model (Bradley & Terry 1952; Ouyang et al.
    2022, eq. 1): P(y_w > y_l) = sigmoid(r_w - r_l), so

        L = -log sigmoid(r(x, y_w) - r(x, y_l))

    on the scalar rewards of a value head (e.g. at each completion's last token).
    Returns `(per_pair_loss (batch,), metrics)` with the accuracy and margin of the
    rewards themselves. `label_smoothing` as DPO's.
    """
    loss = logistic_preference_loss(reward_chosen - reward_rejected, label_smoothing)
    return loss, _metrics(
        jax.lax.stop_gradient(reward_chosen), jax.lax.stop_gradient(reward_rejected)
    )
