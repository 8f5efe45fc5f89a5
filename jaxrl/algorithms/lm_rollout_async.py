"""The algorithm's side of asynchronous mode (`--async-staleness K`, K >= 1): the hooks
`jaxrl/training/async_stages.py` drives.

`AsyncRollout` is a mixin of `RolloutAlgorithm` (`lm_rollout.py`), which provides what
it reads: `config`, `async_staleness`, `prompts_per_update`, `collect`, `learn`,
`completion_logprobs`, `model_params` and `LMAlgorithm`'s `make_mesh` / `mesh_on`.

* Devices: `async_devices` splits the run's devices (the sampler's first
  `sampler_devices`, the learner's the rest); `sampler_mesh` lays the sampler's out
  on the `data` axis (parameters replicated), `make_mesh` the learner's.
* What moves: `sampler_view` is the state with the fields `collect` reads
  (`sampler_fields`); the stepper copies it to the sampler after every update.
* Programs: `async_collect` (the sampler's `collect`, keyed by the batch index) and
  `async_learn` (`learn`, with the proximal log-probs re-scored by the current
  learner: AReaL's decoupled objective).

The schedule, the staleness bound and checkpoints are the driver's
(`jaxrl/training/async_stages.py`); the correction of stale rows is the loss's
(`lm_rollout_learning.RolloutLearning.rollout_correction`). docs/lm.md, "Asynchronous
sampling", is the user's guide.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
from jax.sharding import Mesh

from jaxrl import config as cfg
from jaxrl.config import ConfigError
from jaxrl.lm import sharding as lm_sharding
from jaxrl.training import mesh as mesh_lib


class AsyncRollout:
    """The asynchronous-mode hooks of a token-rollout algorithm (see the module
    docstring)."""

    sampler_fields = ("params", "key", "update_step", "hparams", "base_params", "ref_params")
    """The state fields `collect` reads: all the sampler's sub-mesh receives."""

    def make_mesh(self, num_devices: int | None) -> Mesh:
        """The learner's mesh: all `num_devices` devices, or in asynchronous mode the
        ones after the sampler's (`async_devices`)."""
        if not self.async_staleness:
            return super().make_mesh(num_devices)
        return self.mesh_on(self.async_devices(num_devices)[1])

    def sampler_mesh(self, num_devices: int | None) -> Mesh:
        """The sampler's mesh: its `sampler_devices` devices on the `data` axis, so that
        the parameters are replicated and each device samples its share of the rows
        (decoding reads every weight per token: no collectives inside the loop)."""
        devices = self.async_devices(num_devices)[0]
        rows = self.prompts_per_update
        cfg.check(
            rows % len(devices) == 0,
            "sampler_devices",
            len(devices),
            f"a divisor of the {rows} prompts sampled per update (each sampler device "
            "takes an equal share)",
        )
        return lm_sharding.make_mesh(len(devices), 1, 1, devices=devices)

    def async_devices(self, num_devices: int | None) -> tuple[list[Any], list[Any]]:
        """`(sampler devices, learner devices)`: the first `sampler_devices` of the run's
        devices and the rest. A `ConfigError` on one device, or when the sampler would
        take none or all of them."""
        c = self.config
        devices = mesh_lib.select_devices(num_devices)
        if jax.process_count() > 1:
            # Not built yet: XLA's CPU and GPU runtimes cannot copy parameters between
            # the different device sets of two sub-meshes across processes (device_put
            # refuses such a cross-host reshard), so the copy would go through the hosts.
            raise ConfigError(
                f"invalid async_staleness={c.async_staleness}: asynchronous mode runs in "
                f"one process for now (this run has {jax.process_count()}); use "
                "async_staleness=0 for a multi-process run"
            )
        if len(devices) < 2:
            raise ConfigError(
                f"invalid async_staleness={c.async_staleness}: asynchronous mode needs at "
                f"least 2 devices (the sampler's and the learner's), but the run has "
                f"{len(devices)}; use async_staleness=0 on one device"
            )
        cfg.check(
            1 <= c.sampler_devices < len(devices),
            "sampler_devices",
            c.sampler_devices,
            f"in [1, {len(devices) - 1}] (of the run's {len(devices)} devices; the learner "
            "takes the rest)",
        )
        return devices[: c.sampler_devices], devices[c.sampler_devices :]

    def sampler_view(self, state: Any) -> Any:
        """`state` with only the `sampler_fields` (the others None, so neither the
        optimiser state nor a critic is copied to the sampler)."""
        return state.replace(
            **{f.name: None for f in dataclasses.fields(state) if f.name not in self.sampler_fields}
        )

    def async_collect(
        self, view: Any, batch_index: jax.Array, prompts: dict[str, jax.Array]
    ) -> tuple[Any, dict[str, jax.Array]]:
        """`collect` by the sampler (one agent): `(view, collected)`. `view` holds the
        parameters of the version that samples batch `batch_index`, with the key
        `fold_in(view.key, batch_index)`, so that two batches sampled by one version
        draw different completions and a resumed run draws the same ones; it is
        returned unchanged (its frozen fields stay on the sampler)."""
        keyed = view.replace(key=jax.random.fold_in(view.key, batch_index))
        return view, self.collect(keyed, prompts)[1]

    def async_learn(self, state: Any, batch: dict[str, jax.Array]) -> tuple[Any, dict]:
        """`learn` from a batch some versions old (one agent). The ratio's denominator
        is the learner's *current* policy, as AReaL's decoupled objective (Fu et al.
        2025) has it: the proximal policy the clip keeps the update near, re-scored here
        (or by the loss's own pass with `rescores_in_loss`); the sampler's log-probs stay
        the behaviour policy's, which `rollout_correction` weighs against it."""
        if not self.config.rescores_in_loss:
            params = self.model_params(state.params, state.base_params)
            logp, entropy = self.completion_logprobs(
                params, batch["tokens"], batch["mask"], with_entropy=True
            )
            batch = {**batch, "old_logp": logp, "old_entropy": entropy}
        return self.learn(state, jax.tree.map(jax.lax.stop_gradient, batch))
