"""Evaluation metrics of sampled answers: pass@k and mean@k (host-side numpy).

From n samples per prompt of which c are correct:

- `pass_at_k`: the unbiased estimate of the probability that at least one of k samples
  is correct (Chen et al. 2021, "Evaluating large language models trained on code",
  eq. 1), in its numerically stable product form.
- `mean_at_k`: the expected fraction of correct samples among k, estimated by c/n.
- `sample_metrics`: both, averaged over prompts, from a `(prompts, n)` correctness table.

What does not live here: answer checking (`Task.is_correct`) and sampling.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from jaxrl.errors import ConfigError


def _counts(num_samples: np.ndarray | int, num_correct: np.ndarray | int, k: int):
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ConfigError(f"invalid k={k!r}: must be an int >= 1")
    n, c = np.broadcast_arrays(np.asarray(num_samples), np.asarray(num_correct))
    for name, value in (("num_samples", n), ("num_correct", c)):
        if value.size and not np.all(np.equal(np.mod(value, 1), 0)):
            raise ConfigError(f"invalid {name}: must be whole numbers, got {value}")
    n, c = n.astype(np.int64), c.astype(np.int64)
    if np.any(c < 0) or np.any(c > n):
        raise ConfigError(f"invalid num_correct={c}: must be in [0, num_samples={n}]")
    if n.size and k > n.min():
        raise ConfigError(
            f"invalid k={k}: must be <= the number of samples per prompt (smallest n = "
            f"{n.min()}); pass@k needs n >= k samples"
        )
    return n, c


def pass_at_k(num_samples: np.ndarray | int, num_correct: np.ndarray | int, k: int) -> np.ndarray:
    """Unbiased pass@k per prompt: 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, eq. 1).

    The ratio of binomials is evaluated as the product (Chen et al. 2021, fig. 3)

        C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)

    which never forms the huge binomials (C(2000, 256) ~ 1e330 overflows float64), vectorised
    over prompts as one masked product over i in [1, max n]. It is 1 when n - c < k
    (the factor i = k is 0): any k samples then contain a correct one.

    Args:
      num_samples: n per prompt, (prompts,) or a scalar.
      num_correct: c per prompt, (prompts,) or a scalar; 0 <= c <= n.
      k: samples drawn, 1 <= k <= min n.
    Returns:
      (prompts,) float64 estimates in [0, 1].
    Raises:
      ConfigError: k < 1 or k > n, c outside [0, n].
    """
    n, c = _counts(num_samples, num_correct, k)
    shape = n.shape
    n, c = n.reshape(-1), c.reshape(-1)
    i = np.arange(1, (n.max() if n.size else 0) + 1, dtype=np.float64)[None, :]
    in_product = (i > (n - c)[:, None]) & (i <= n[:, None])
    factors = np.where(in_product, 1.0 - k / i, 1.0)
    none_correct = np.prod(factors, axis=1)
    estimate = np.where(n - c < k, 1.0, 1.0 - none_correct)
    return estimate.reshape(shape)


def mean_at_k(num_samples: np.ndarray | int, num_correct: np.ndarray | int, k: int) -> np.ndarray:
    """mean@k per prompt: the expected fraction of correct answers among k samples.

    By linearity of expectation it is the per-sample accuracy, whose unbiased estimate
    from n >= k samples is c / n whatever k is; k only records the evaluation budget
    (and must not exceed n, as for pass@k).
    """
    n, c = _counts(num_samples, num_correct, k)
    return c / n


def sample_metrics(correct: np.ndarray, ks: Iterable[int] = (1,)) -> dict[str, float]:
    """`pass@k` and `mean@k` for each k, averaged over prompts.

    Args:
      correct: (prompts, n) bool (or 0/1) table, one column per sample of the prompt.
      ks: the k values to report, each <= n.
    Returns:
      `{"pass@1": ..., "mean@1": ..., "pass@8": ...}`.
    """
    correct = np.asarray(correct)
    if correct.ndim != 2 or correct.shape[1] == 0:
        raise ConfigError(
            f"invalid correct of shape {correct.shape}: must be (prompts, samples) with >= 1 sample"
        )
    n = np.full(correct.shape[0], correct.shape[1])
    c = correct.astype(bool).sum(axis=1)
    out: dict[str, float] = {}
    for k in ks:
        out[f"pass@{k}"] = float(np.mean(pass_at_k(n, c, k)))
        out[f"mean@{k}"] = float(np.mean(mean_at_k(n, c, k)))
    return out
