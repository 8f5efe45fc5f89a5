"""`psum_in_buckets` sums a pytree over a mesh axis as `jax.lax.psum` does, in few flat
all-reduces; `bucket_leaves` plans the buckets.

The multi-device part runs in a subprocess with 4 emulated CPU devices
(`--xla_force_host_platform_device_count` must be set before JAX initialises).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from jaxrl.training.mesh import bucket_leaves


def _leaf(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def test_buckets_are_runs_of_one_dtype_cut_at_the_byte_limit():
    leaves = [
        _leaf((3, 5), np.float32),  # 60 bytes
        _leaf((), np.float32),  # 4: fills the first bucket to 64
        _leaf((2,), np.float32),  # 8: would pass 64, starts a new bucket
        _leaf((7,), np.int32),  # another dtype: a new bucket
        _leaf((1000,), np.float32),  # larger than the limit: a bucket of its own
        _leaf((4,), np.float32),
    ]
    assert bucket_leaves(leaves, bucket_bytes=64) == [[0, 1], [2], [3], [4], [5]]
    assert bucket_leaves(leaves, bucket_bytes=10**6) == [[0, 1, 2], [3], [4, 5]]
    assert bucket_leaves([], bucket_bytes=64) == []


_SCRIPT = textwrap.dedent(
    """
    import json, re
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import PartitionSpec as P
    from jaxrl.training.mesh import make_mesh, psum_in_buckets

    assert jax.device_count() == 4, jax.devices()
    mesh = make_mesh({"data": 4})
    rng = np.random.default_rng(0)
    tree = {
        "w": rng.normal(size=(4, 3, 5)).astype(np.float32),  # one row per device
        "b": rng.normal(size=(4,)).astype(np.float32),
        "n": rng.integers(0, 100, (4, 7)).astype(np.int32),
        "big": rng.normal(size=(4, 1000)).astype(np.float32),
        "h": rng.normal(size=(4, 4)).astype(jnp.bfloat16),
    }

    def summed(reduce):
        def local(tree):
            return reduce(jax.tree.map(lambda x: x[0], tree))
        return jax.jit(jax.shard_map(local, mesh=mesh, in_specs=P("data"), out_specs=P()))

    reference = summed(lambda t: jax.lax.psum(t, "data"))
    report = {}
    for name, limit in (("default", None), ("small", 64)):
        kw = {} if limit is None else {"bucket_bytes": limit}
        fn = summed(lambda t: psum_in_buckets(t, "data", **kw))
        out, ref = fn(tree), reference(tree)
        hlo = fn.lower(tree).compile().as_text()
        operands = sum(
            len(re.findall(r"%\\S+", m)) for m in re.findall(r"all-reduce\\(([^)]*)\\)", hlo)
        )
        report[name] = {
            "equal": {k: bool(np.array_equal(np.asarray(out[k]), np.asarray(ref[k])))
                      for k in tree},
            "dtypes": {k: str(out[k].dtype) for k in tree},
            "operands": operands,
        }
    # Under vmap (the driver's agent axis), with a leading batch of 2.
    batched = jax.tree.map(lambda x: np.stack([x, 2 * x]), tree)
    vm = jax.jit(jax.vmap(jax.shard_map(
        lambda t: psum_in_buckets(jax.tree.map(lambda x: x[0], t), "data"),
        mesh=mesh, in_specs=P("data"), out_specs=P())))
    out = vm(batched)
    report["vmap"] = {k: bool(np.array_equal(np.asarray(out[k][1]),
                                             2 * np.asarray(reference(tree)[k])))
                      for k in tree}
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def report():
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join([*flags, "--xla_force_host_platform_device_count=4"])
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["default", "small"])
def test_bucketed_sums_equal_psum_bit_for_bit(report, case):
    r = report[case]
    assert all(r["equal"].values()), r
    assert r["dtypes"] == {
        "w": "float32",
        "b": "float32",
        "n": "int32",
        "big": "float32",
        "h": "bfloat16",
    }


def test_one_all_reduce_operand_per_bucket(report):
    # Leaves in key order: b, big (float32), h (bfloat16), n (int32), w (float32).
    # Default limit: buckets [b, big], [h], [n], [w]: 4 operands, where a psum of the
    # tree has one per leaf. With 64 bytes, big (4000 bytes) cannot join b: 5.
    assert report["default"]["operands"] == 4, report
    assert report["small"]["operands"] == 5, report


def test_works_under_vmap(report):
    assert all(report["vmap"].values()), report["vmap"]
