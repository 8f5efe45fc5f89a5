"""Asynchronous GRPO learns: from the 2-digit SFT warm start, GRPO with the sampler on one
of 2 emulated CPU devices and the learner on the other, exactly one version behind
(`--async-staleness 1`, the deterministic schedule), raises held-out pass@1.

`-m slow` (CI). The run needs 2 devices, so it runs in a subprocess started with
`--xla_force_host_platform_device_count=2` (the warm start is the shared
`two_digit_warm_start` fixture, tests/algorithms/conftest.py). The budget and the
threshold: see `UPDATES` and `MIN_GAIN`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

UPDATES = 150
"""Half the synchronous slow test's 300 updates (tests/algorithms/test_grpo_learning.py):
each emulated device has one of the two cores, so an update takes longer."""
MIN_GAIN = 0.05
"""Held-out pass@1 gain asserted: about half the smallest gain of GRPO seeds 0, 1 and 2
from this warm start (measured when the test was added; the commit that added it lists
them), and several times the noise of pass@1 on 256 held-out prompts x 8 samples."""

_SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax
    from jaxrl.algorithms import grpo
    from jaxrl.config import replace
    from jaxrl.training.driver import RunConfig, train

    assert jax.device_count() == 2, jax.devices()
    model, updates, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    config = replace(
        grpo.default_config(), model=model, digits=2, total_steps=updates * 16 * 8,
        async_staleness=1, sampler_devices=1, rollout_correction="token_tis",
    )
    summary = train(grpo.make(config), RunConfig(seed=seed, progress=False, num_devices=2)).summary
    print(json.dumps({k: summary[k] for k in ("pass@1_before", "pass@1_after", "train_seconds")}))
    """
)


def run_async_grpo(warm_start, updates: int, seed: int = 0) -> dict:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, "--xla_force_host_platform_device_count=2"])
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(warm_start), str(updates), str(seed)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.slow
def test_async_grpo_one_version_behind_raises_held_out_pass_at_1(two_digit_warm_start):
    summary = run_async_grpo(two_digit_warm_start, UPDATES)
    gain = summary["pass@1_after"] - summary["pass@1_before"]
    print(f"pass@1 {summary['pass@1_before']:.3f} -> {summary['pass@1_after']:.3f}", summary)
    assert gain >= MIN_GAIN, summary
