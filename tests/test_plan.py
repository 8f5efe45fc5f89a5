"""`jaxrl plan` (jaxrl/plan/): errors, planned vs actual memory, fsdp scaling, the CLI.

Planning for `cpu:8` needs eight CPU devices, which JAX fixes when it starts, so those
checks run in one subprocess started with `--xla_force_host_platform_device_count=8`
(as tests/algorithms/test_grpo_multidevice.py does) that reports JSON; the error
checks that need no devices run here. Models are tiny (one layer, hidden 32-64): each
step compiles in seconds.

What "actually uses" means in the memory check: the SFT step is also run for real, as
the driver runs it (`driver.initial_state` places real parameters with the algorithm's
shardings, `steppers.StagedStepper` compiles `learn` from the real arrays and runs it),
and its use per device is the bytes of device 0's shards of the live state and batch
after the step, plus the real executable's temporaries and non-donated outputs. The
plan never allocates: it compiles from `jax.eval_shape` values.

The TPU path (libtpu) is tested at the end and skipped without libtpu; `.ci/run` installs
the `plan` extra and runs the fast TPU test; the 8B plan is in the slow tier (minutes).
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import pytest

from jaxrl import plan as plan_lib
from jaxrl.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None
TINY_SFT = dict(
    digits=2, num_layers=1, hidden_size=64, num_heads=4, num_kv_heads=2, mlp_size=128,
    batch_size=16, total_steps=64,
)  # fmt: skip


def _env(devices: int | None = 8) -> dict[str, str]:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    if devices:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env.update(XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    return env


# ---------------------------------------------------------------------------- errors (no devices)
@pytest.mark.parametrize(
    ("topology", "expected"),
    [
        ("v9x:4x4", "unknown chip 'v9x'"),
        ("v5e:4x4x4", "a v5e slice has 2 dimensions"),
        ("v4:4x4", "a v4 slice has 3 dimensions"),
        ("v5e", "expected v5e:AxB"),
        ("cpu:0", "cpu:N needs a device count"),
    ],
)
def test_bad_topology_names_the_field_and_lists_valid_forms(topology, expected) -> None:
    with pytest.raises(ConfigError, match="invalid topology=") as err:
        plan_lib.resolve_topology(topology)
    assert expected in str(err.value)
    assert "v5e:4x4" in str(err.value) or "cpu:N" in str(err.value)


def test_missing_libtpu_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setattr(plan_lib.topology, "libtpu_installed", lambda: False)
    with pytest.raises(ConfigError) as err:
        plan_lib.resolve_topology("v5e:4x4")
    message = str(err.value)
    assert message.startswith("invalid topology='v5e:4x4'")
    assert 'pip install -e ".[plan]"' in message and "cpu:8" in message


def test_too_few_cpu_devices_after_jax_started() -> None:
    jax.devices()  # this process's JAX has started with its device count fixed
    with pytest.raises(ConfigError, match="xla_force_host_platform_device_count=4096"):
        plan_lib.resolve_topology("cpu:4096")


def test_mesh_errors_name_the_axis() -> None:
    target = plan_lib.Target("v5e:4x4", tuple(range(16)), plan_lib.CHIPS["v5e"], None)
    lm_fields = {"mesh_fsdp", "mesh_tensor", "model"}
    assert plan_lib.mesh_overrides("grpo", lm_fields, {"data": 4, "fsdp": 4}, 16, target) == {
        "mesh_fsdp": 4
    }
    cases = [
        ({"fsdp": 6}, "invalid mesh fsdp=6: it does not divide the 16 devices of v5e:4x4"),
        ({"data": 2, "fsdp": 4}, "invalid mesh data=2"),
        ({"fsdp": 4, "tensor": 8}, "the axes' product 32 does not divide"),
        ({"expert": 2}, "invalid mesh axis expert=2"),
    ]
    for axes, expected in cases:
        with pytest.raises(ConfigError, match=expected.replace("(", r"\(")):
            plan_lib.mesh_overrides("grpo", lm_fields, axes, 16, target)
    with pytest.raises(ConfigError, match=r"ppo's mesh has the axes \['data'\]"):
        plan_lib.mesh_overrides("ppo", set(), {"fsdp": 2}, 16, target)
    for bad in ("fsdp", "fsdp=0", "fsdp=two", "fsdp=2,fsdp=2"):
        with pytest.raises(ConfigError, match="invalid mesh"):
            plan_lib.parse_mesh(bad)
    assert plan_lib.parse_mesh("data=4, fsdp=4") == {"data": 4, "fsdp": 4}
    assert plan_lib.parse_bytes("16GiB") == 16 * 2**30 and plan_lib.parse_bytes("2e9") == 2e9
    with pytest.raises(ConfigError, match="invalid device_memory"):
        plan_lib.parse_bytes("lots")


def test_calling_the_package_is_deprecated(monkeypatch) -> None:
    """`jaxrl.plan(...)` (the package called) warns and forwards to `jaxrl.plan.plan`."""
    import jaxrl

    calls = []
    monkeypatch.setattr(plan_lib, "plan", lambda *args, **kwargs: calls.append((args, kwargs)))
    with pytest.warns(DeprecationWarning, match=r"call jaxrl\.plan\.plan\(\.\.\.\)"):
        jaxrl.plan("grpo", topology="v5e:4x4")
    assert calls == [(("grpo",), {"topology": "v5e:4x4"})]


def test_mesh_that_does_not_divide_the_kv_heads() -> None:
    """6 tensor shards of 4 KV heads would replicate the KV projections and cache."""
    from types import SimpleNamespace

    from jaxrl import config as cfg
    from jaxrl.algorithms import grpo

    config = cfg.replace(
        grpo.default_config(), num_heads=12, num_kv_heads=4, hidden_size=96, mlp_size=384
    )
    algo = grpo.make(config)
    mesh = SimpleNamespace(
        shape={"data": 1, "fsdp": 1, "tensor": 6}, devices=SimpleNamespace(size=6)
    )
    with pytest.raises(ConfigError) as err:
        plan_lib.check_model_dims(algo, mesh)
    assert str(err.value).startswith("invalid mesh tensor=6: it does not divide the model's "
                                     "num_key_value_heads=4")  # fmt: skip


def test_loop_aware_matmul_count() -> None:
    """XLA's cost analysis counts a loop body once; `matmul_cost` weights it."""
    import jax.numpy as jnp

    w = jnp.ones((8, 8))

    def scanned(x):
        return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=10)[0]

    def fori(x):
        return jax.lax.fori_loop(0, 7, lambda i, c: c @ w, x)

    one = plan_lib.matmul_cost(jax.make_jaxpr(lambda x: x @ w)(w))
    assert one.flops == 2 * 8 * 8 * 8
    assert plan_lib.matmul_cost(jax.make_jaxpr(scanned)(w)).flops == 10 * one.flops
    assert plan_lib.matmul_cost(jax.make_jaxpr(scanned)(w), loops=False).flops == one.flops
    looped = plan_lib.matmul_cost(jax.make_jaxpr(fori)(w))
    assert looped.flops == 7 * one.flops and looped.exact


def test_matmul_ops_lists_each_product_with_its_trip_count() -> None:
    """`matmul_ops` is the walk behind `matmul_cost`: one entry per product equation,
    weighted by the loops around it; equal products share a key."""
    import jax.numpy as jnp

    w = jnp.ones((8, 8))

    def step(x):
        x = jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=10)[0]
        return x @ w, jnp.ones((8, 4)).T @ x

    ops, exact = plan_lib.matmul_ops(jax.make_jaxpr(step)(w))
    assert exact and [op.times for op in ops] == [10, 1, 1]
    assert ops[0].key == ops[1].key != ops[2].key
    assert [op.flops for op in ops] == [2 * 8**3, 2 * 8**3, 2 * 4 * 8 * 8]


def test_matmul_floor_times_every_product() -> None:
    """benchmarks/matmul_floor.py: each distinct product timed alone, summed with its
    trip count (a smoke test of the benchmark helper on a tiny step)."""
    import jax.numpy as jnp

    path = ROOT / "benchmarks" / "matmul_floor.py"
    spec = importlib.util.spec_from_file_location("matmul_floor", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    w = jnp.ones((16, 16))

    def step(x):
        return jax.lax.scan(lambda c, _: (jnp.tanh(c @ w), None), x, None, length=5)[0] @ w

    floor = module.matmul_floor(jax.make_jaxpr(step)(w), repeats=2)
    assert floor["products"] == 2 and floor["distinct_products"] == 1
    assert floor["flops"] == 6 * 2 * 16**3
    (row,) = floor["top"]
    assert row["times"] == 6 and row["ms_each"] > 0
    assert floor["seconds"] == pytest.approx(6 * row["ms_each"] / 1e3)
    assert "matmul floor" in module.format_floor("step", floor, 1.0)

    # Each product in a loop of its own: the same products and counts, a positive time.
    looped = module.matmul_floor(jax.make_jaxpr(step)(w), repeats=2, method="loop")
    assert looped["method"] == "loop" and looped["products"] == 2
    (row,) = looped["top"]
    assert row["times"] == 6 and row["ms_each"] > 0
    with pytest.raises(ValueError, match=r"method must be one of \['call', 'loop'\]"):
        module.matmul_floor(jax.make_jaxpr(step)(w), method="scan")


# ---------------------------------------------------------------------------- 8 CPU devices
_SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, sys
    import jax, numpy as np
    from jaxrl import cli, config as cfg, plan as plan_lib
    from jaxrl.algorithms import sft
    from jaxrl.training import driver, progress, steppers

    assert jax.device_count() == 8, jax.devices()
    TINY = json.loads(sys.argv[1])
    report = {}

    # (2) doubling fsdp halves the parameters and optimizer state per device.
    plans = {f: plan_lib.plan("sft", topology="cpu:8", mesh=f"fsdp={f}", **TINY) for f in (2, 4)}
    report["fsdp"] = {
        f: [p.steps[0].memory["parameters"], p.steps[0].memory["optimizer state"]]
        for f, p in plans.items()
    }

    # (1) planned vs actual per-device memory of SFT's learn step, fsdp=4 x data=2.
    step = plans[4].step("learn")
    report["planned"] = {"total": step.total, "rows": step.memory, "raw": step.memory_analysis}

    algo = sft.make(cfg.replace(sft.default_config(), **TINY, mesh_fsdp=4))
    run = driver.RunConfig(progress=False)
    agents = driver.make_agents(algo, run)
    mesh = algo.make_mesh(None)
    state, shardings = driver.initial_state(algo, agents, mesh)
    stepper = steppers.StagedStepper(algo, 1, mesh, shardings, progress.Clock())
    state, _, _ = stepper.run(state, algo.init_host_state(0, 1), 1)
    real = stepper.learn_fn.memory_analysis()
    device = jax.devices()[0]

    def on_device(tree):
        return sum(s.data.nbytes for leaf in jax.tree.leaves(tree)
                   for s in leaf.addressable_shards if s.device == device)

    batch, _, _ = algo.process(None, algo.init_host_state(0, 1))
    placed = jax.device_put(batch, stepper.batch_shardings)
    report["actual"] = {
        "params": on_device(state.params),
        "opt_state": on_device(state.opt_state),
        "state": on_device(state),
        "batch": on_device(placed),
        "temp": real.temp_size_in_bytes,
        "not_donated": real.output_size_in_bytes - real.alias_size_in_bytes,
    }

    # (3) a shard_map body's products count once per device: global FLOPs, as outside.
    import jax.numpy as jnp
    from jax.sharding import Mesh, PartitionSpec as P
    w, x = jnp.ones((8, 8)), jnp.ones((64, 8))
    rows = jax.shard_map(lambda x: jax.lax.psum(x @ w, "data"),
                         mesh=Mesh(np.array(jax.devices()), ("data",)),
                         in_specs=P("data"), out_specs=P())
    report["shard_map_flops"] = [plan_lib.matmul_cost(jax.make_jaxpr(rows)(x)).flops,
                                 plan_lib.matmul_cost(jax.make_jaxpr(lambda x: x @ w)(x)).flops]

    # (4) the CLI: exit codes, the table, suggestions that were compiled.
    def run_cli(*argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
        return {"code": code, "out": out.getvalue(), "err": err.getvalue()}

    flags = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    budget = int(plans[4].steps[0].total * 1.05)  # fsdp=4 fits, the default fsdp=1 does not
    report["budget"] = budget
    budget = str(budget)
    report["cli_fits"] = run_cli("plan", "sft", "--topology", "cpu:8", "--mesh", "fsdp=4",
                                 "--device-memory", budget, *flags)
    if "--suggest" in sys.argv:  # the slow tier: every candidate change is compiled
        report["cli_no_fit"] = run_cli("plan", "sft", "--topology", "cpu:8", "--device-memory",
                                       budget, *flags)
    else:
        report["cli_no_fit"] = run_cli("plan", "sft", "--topology", "cpu:8", "--device-memory",
                                       budget, "--no-suggest", *flags)
    report["cli_bad_mesh"] = run_cli("plan", "sft", "--topology", "cpu:8", "--mesh", "fsdp=3",
                                     *flags)
    print("REPORT " + json.dumps(report))
    """
)


def _run_script(*extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, json.dumps(TINY_SFT), *extra],
        env=_env(8),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(lines[-1][len("REPORT ") :])


@pytest.fixture(scope="module")
def eight_devices(tmp_path_factory) -> dict:
    """The report of `_SCRIPT`, run once in an 8-device subprocess (5 tiny compiles) and
    shared by pytest-xdist's workers through the session's temporary directory."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's directory, above each worker's own
    report, lock = base / "plan_eight_devices.json", base / "plan_eight_devices.lock"
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL))
    except FileExistsError:  # another worker runs it
        deadline = time.monotonic() + 1500
        while not report.exists():
            assert time.monotonic() < deadline, "the 8-device run of another worker hung"
            time.sleep(1)
        result = json.loads(report.read_text())
        assert "error" not in result, result["error"]
        return result
    try:
        result = _run_script()
    except BaseException as err:
        report.write_text(json.dumps({"error": f"{type(err).__name__}: {err}"[-4000:]}))
        raise
    tmp = report.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(report)
    return result


def test_planned_memory_matches_a_real_run(eight_devices) -> None:
    planned, actual = eight_devices["planned"], eight_devices["actual"]
    rows = planned["rows"]
    # The layout is the same: parameters and Adam moments per device, byte for byte.
    assert rows["parameters"] == actual["params"]
    assert rows["optimizer state"] == actual["opt_state"]
    used = actual["state"] + actual["batch"] + actual["temp"] + actual["not_donated"]
    assert abs(planned["total"] - used) <= 0.10 * used, (planned, actual)
    # The plan's temporaries are those of the real executable (the same program).
    assert abs(planned["raw"]["temp_size_in_bytes"] - actual["temp"]) <= 0.10 * actual["temp"]


def test_shard_map_products_count_once_per_device(eight_devices) -> None:
    """8 devices x 8 rows each inside `shard_map` are the FLOPs of 64 rows outside it."""
    inside, outside = eight_devices["shard_map_flops"]
    assert inside == outside == 2 * 64 * 8 * 8


def test_doubling_fsdp_halves_parameters_and_optimizer_state(eight_devices) -> None:
    sizes = {int(k): v for k, v in eight_devices["fsdp"].items()}
    for before, after in zip(sizes[2], sizes[4], strict=True):
        assert 0.45 <= after / before <= 0.55, sizes  # norms stay whole: not exactly 1/2


def test_cli_exit_codes_and_table(eight_devices) -> None:
    fits, no_fit, bad = (eight_devices[k] for k in ("cli_fits", "cli_no_fit", "cli_bad_mesh"))
    assert fits["code"] == 0, fits
    out = fits["out"]
    for text in ("jaxrl plan: sft on cpu:8", "mesh: data=2 x fsdp=4", "step learn:",
                 "parameters", "optimizer state", "activations and temporaries",
                 "total (peak)", "FLOPs", "fits: every step"):  # fmt: skip
        assert text in out, (text, out)
    assert no_fit["code"] == 1, no_fit
    assert "DOES NOT FIT" in no_fit["out"] and "does not fit" in no_fit["err"]
    assert no_fit["err"].startswith("jaxrl: plan: learn does not fit on cpu:8")
    assert bad["code"] == 2 and bad["err"].startswith("jaxrl: error: invalid mesh fsdp=3")
    assert bad["err"].count("\n") == 1, bad["err"]


@pytest.mark.slow
def test_cli_suggests_only_changes_that_fit() -> None:
    """Without fsdp the step does not fit the budget; fsdp=4 does (the budget is 5% above
    its total), fsdp=2 may or may not: whatever is printed was compiled and fits."""
    report = _run_script("--suggest")
    no_fit, budget = report["cli_no_fit"], report["budget"]
    assert no_fit["code"] == 1, no_fit
    assert "changes that fit (each compiled for cpu:8)" in no_fit["out"], no_fit["out"]
    suggested = no_fit["out"].split("changes that fit")[1].splitlines()[1:]
    assert any("--mesh fsdp=" in line for line in suggested), suggested
    for line in suggested:
        value, unit = line.split(": learn ")[1].split()
        assert float(value) * {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit] <= budget * 1.1


def test_cli_errors_in_a_fresh_process() -> None:
    """The real entry point: one `jaxrl: error:` line and exit 2, before any compile."""
    cmd = [sys.executable, "-m", "jaxrl.cli", "plan", "grpo", "--topology", "v9:4x4"]
    proc = subprocess.run(cmd, env=_env(None), cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("jaxrl: error: invalid topology='v9:4x4': unknown chip")
    assert proc.stderr.count("\n") == 1


# ---------------------------------------------------------------------------- the TPU path
_TPU_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, time
    start = time.perf_counter()
    from jaxrl import plan as plan_lib
    plan_lib.prepare_process("v5e:4x4")
    p = plan_lib.plan("grpo", topology="v5e:4x4", mesh="fsdp=16",
                      model_config="examples/models/llama-3-8b.json", dtype="bfloat16",
                      num_prompts=16, group_size=4, max_new_tokens=64, micro_batches=4,
                      suggest=False)
    print(p.report(), file=sys.stderr)
    print("REPORT " + json.dumps({
        "seconds": time.perf_counter() - start,
        "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "steps": {s.name: {"total": s.total, "rows": s.memory, "note": s.note,
                           "flops": s.flops} for s in p.steps},
        "fits": p.fits,
    }))
    """
)


_TPU_SMALL = textwrap.dedent(
    """
    import json, sys
    from jaxrl import plan as plan_lib
    plan_lib.prepare_process("v5e:2x2")
    TINY = json.loads(sys.argv[1])
    out = {name: [plan_lib.resolve_topology(name).num_devices,
                  plan_lib.resolve_topology(name).devices[0].device_kind]
           for name in ("v5e:2x2", "v4:2x2x1", "v5p:2x2x1", "v6e:2x2")}
    p = plan_lib.plan("sft", topology="v5e:2x2", mesh="fsdp=4", **TINY)
    out["plan"] = {"fits": p.fits, "rows": p.steps[0].memory, "report": p.report()}
    print("REPORT " + json.dumps(out))
    """
)


@pytest.mark.skipif(not HAS_LIBTPU, reason='needs libtpu: pip install -e ".[plan]"')
def test_tpu_slices_and_a_small_plan() -> None:
    """libtpu describes each chip's slices (v4 and v5p as one device per chip) and a tiny
    SFT step compiles for v5e:2x2 with its HBM and roofline in the table."""
    proc = subprocess.run(
        [sys.executable, "-c", _TPU_SMALL, json.dumps(TINY_SFT)],
        env=_env(None),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-5000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert report["v5e:2x2"] == [4, "TPU v5 lite"] and report["v6e:2x2"] == [4, "TPU v6 lite"]
    assert report["v4:2x2x1"] == [4, "TPU v4"] and report["v5p:2x2x1"] == [4, "TPU v5"]
    text = report["plan"]["report"]
    assert report["plan"]["fits"] and "fits: every step within 16.00 GiB" in text, text
    assert "4 x TPU v5 lite: 16.00 GiB HBM, 197 TFLOP/s bf16, 819 GB/s per chip" in text
    assert "roofline step time" in text and ("memory-bound" in text or "compute-bound" in text)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBTPU, reason='needs libtpu: pip install -e ".[plan]"')
def test_tpu_plan_of_an_8b_grpo_step_is_fast_and_allocates_nothing() -> None:
    """An 8B-shaped GRPO step on v5e:4x4 plans in under 5 minutes of the 2-core machine
    and a peak RSS under 4 GB (its float32 parameters alone are 32 GB: none is allocated).

    Time is the subprocess's CPU seconds, at most 2 x 300 (two cores for five minutes):
    on a shared machine its wall time depends on the other jobs, so the wall time is
    checked only when the machine is quiet (load average under 2 when the test starts).
    The RSS bound is why the planner compiles one step at a time (`COMPILE_THREADS`):
    a second compile at once holds a second large program in memory.
    """
    quiet = os.getloadavg()[0] < 2
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _TPU_SCRIPT],
        env=_env(None),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-5000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert cpu < 2 * 300, (cpu, wall, report)
    if quiet:
        assert wall < 300, (cpu, wall, report)
    assert report["max_rss"] < 4e9, report
    print(f"8B plan: {cpu:.0f} CPU s, {wall:.0f} s wall, peak RSS {report['max_rss'] / 1e9:.2f} GB")
    learn = report["steps"]["learn"]
    # 8.03e9 float32 parameters over fsdp=16 (norms replicated): ~2.0 GB per device.
    assert 1.9e9 < learn["rows"]["parameters"] < 2.1e9, learn
    assert 3.8e9 < learn["rows"]["optimizer state"] < 4.2e9, learn
    assert set(report["steps"]) == {"collect", "learn"} and report["steps"]["collect"]["flops"] > 0
