"""The staged step's rounds (`respond`, contract.py): several collect rounds in one update.

A toy staged algorithm (test_contract.py's four-phase toy, fitting y = 3x - 1) runs three
rounds per update: `respond` sees each round's output in order, hands the next round
its inputs and counts rounds in the host state, and `process` gets the last round's
output. The host state must survive a checkpoint and resume exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from jaxrl.training import driver
from jaxrl.training.checkpoint import Checkpointer
from jaxrl.training.contract import Algorithm, check_algorithm

from .test_contract import FourPhaseToy, ToyConfig, _run

ROUNDS = 3


class RoundsToy(FourPhaseToy):
    """Three rounds per update. Round r's inputs are prepare's x and r; collect echoes
    them with the update count of the state it ran on; respond logs the round."""

    name = "rounds-toy"
    max_rounds = ROUNDS

    def __init__(self, config: ToyConfig, rounds: int = ROUNDS, reshape: bool = False):
        super().__init__(config)
        self.rounds, self.reshape = rounds, reshape
        self.calls: list[tuple[Any, ...]] = []

    def init_host_state(self, seed: int, num_agents: int) -> Any:
        return {**super().init_host_state(seed, num_agents), "rounds": 0}

    def prepare(self, host_state):
        x, host_state = super().prepare(host_state)
        self.calls.append(("prepare", host_state["cursor"]))
        agents = host_state["agents"]
        return {"x": x, "round": np.zeros((agents,), np.int32)}, host_state

    def collect(self, state, inputs):
        x, r = inputs["x"], inputs["round"]
        return state, {"x": x, "y": 3.0 * x - 1.0, "round": r, "step": state.update_step}

    def respond(self, collected, host_state):
        r = int(collected["round"][0])
        self.calls.append(("respond", r, int(collected["step"][0])))
        host_state = {**host_state, "rounds": host_state["rounds"] + 1}
        if r + 1 == self.rounds:
            return None, host_state
        x = collected["x"][:, :-1] if self.reshape else collected["x"]
        return {"x": x, "round": collected["round"] + 1}, host_state

    def process(self, collected, host_state):
        self.calls.append(("process", int(collected["round"][0])))
        batch, host_state, metrics = super().process(collected, host_state)
        return batch, host_state, {**metrics, "rounds": host_state["rounds"]}


def test_rounds_run_in_order_and_process_gets_the_last(tmp_path):
    algo = RoundsToy(ToyConfig(total_steps=24, batch_size=8))  # 3 updates
    result = _run(algo, tmp_path, log_every=8)
    for update in range(3):
        calls = algo.calls[5 * update : 5 * (update + 1)]
        # Every round ran on the state the previous update's learn left (update_step).
        assert calls == [
            ("prepare", update + 1),
            ("respond", 0, update),
            ("respond", 1, update),
            ("respond", 2, update),
            ("process", 2),
        ]
    assert len(algo.calls) == 15
    assert [row["rounds"] for row in result.metrics] == [[3.0], [6.0], [9.0]]


def test_rounds_host_state_survives_checkpoint_and_resume(tmp_path):
    full = _run(RoundsToy(ToyConfig(total_steps=80)), tmp_path / "full", checkpoint_every=16)
    _run(RoundsToy(ToyConfig(total_steps=40)), tmp_path / "half", checkpoint_every=16)
    algo = RoundsToy(ToyConfig(total_steps=80))
    resumed = _run(algo, tmp_path / "half", resume=True, checkpoint_every=16)
    assert algo.calls[0] == ("prepare", 6)  # continues after the 5 saved updates
    assert resumed.summary["params_fingerprint"] == full.summary["params_fingerprint"]
    ckpt = Checkpointer(tmp_path / "half" / "checkpoints", read_only=True)
    _, _, meta = ckpt.restore_latest(driver.checkpointed_fields(algo, resumed.state))
    ckpt.close()
    assert meta["host_state"] == {"seed": 0, "cursor": 10, "agents": 1, "rounds": 30}


def test_more_rounds_than_max_rounds_is_an_error():
    with pytest.raises(RuntimeError, match=r"round 4 of an update whose max_rounds is 3"):
        _run(RoundsToy(ToyConfig(total_steps=8), rounds=4))


def test_a_round_with_other_input_shapes_is_an_error():
    with pytest.raises(ValueError, match=r"respond returned inputs .* same shapes"):
        _run(RoundsToy(ToyConfig(total_steps=8), reshape=True))


def test_respond_needs_prepare_and_a_positive_max_rounds():
    class NoPrepare(Algorithm):
        config, steps_per_update, num_updates = ToyConfig(), 1, 1

        def collect(self, state):
            return state, None

        def respond(self, collected, host_state):
            return None, host_state

        def learn(self, state, batch):
            return state, {}

    with pytest.raises(TypeError, match="respond phase but no prepare"):
        check_algorithm(NoPrepare())
    algo = RoundsToy(ToyConfig())
    algo.max_rounds = 0
    with pytest.raises(TypeError, match=r"max_rounds=0: must be an integer >= 1"):
        check_algorithm(algo)
