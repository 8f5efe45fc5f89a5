"""The canaries compile one tiny program per algorithm; JAX's persistent compilation
cache (the directory tests/training uses, `JAXRL_TEST_JAX_CACHE`) makes every run after
the first on a machine skip those compiles. The cache returns the same compiled
program, so the canaries' numbers do not depend on it."""

from __future__ import annotations

import os
import pathlib
import tempfile

import jax

CACHE_DIR = pathlib.Path(
    os.environ.get("JAXRL_TEST_JAX_CACHE")
    or pathlib.Path(tempfile.gettempdir()) / f"jaxrl-test-jax-cache-{os.getuid()}"
)

jax.config.update("jax_compilation_cache_dir", str(CACHE_DIR))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
