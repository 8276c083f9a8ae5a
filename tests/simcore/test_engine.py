"""simcore.engine.Simulation: one seeded stream per simulation, made at the first draw."""

from __future__ import annotations

import numpy as np

from simcore.engine import Simulation
from tests.fresh_imports import imported_by


def test_the_stream_is_default_rng_of_the_seed_and_one_object() -> None:
    sim = Simulation(7)
    assert sim.rng is sim.rng
    assert sim.rng.random(4).tolist() == np.random.default_rng(7).random(4).tolist()


def test_a_parameter_server_run_without_jitter_imports_no_numpy_random() -> None:
    # the default what-if runs twelve parameter-server simulations and draws nothing
    code = (
        "from simcore.paramserver import PSConfig\n"
        "from simcore.paramserver.simulate import simulate_parameter_server\n"
        "from simcore.strategies.base import TrainingConfig\n"
        "from simcore.workload.loader import load_workload\n"
        "from topologies import load_cluster\n"
        "topo = load_cluster('dgx-a100', gpus=4)\n"
        "cfg = TrainingConfig(global_batch=16, micro_batch=4, seq_len=128, dtype='bf16')\n"
        "simulate_parameter_server(load_workload('gpt2-small', seq_len=128), cfg, topo,"
        " PSConfig(mode='ps-async', steps=1))\n"
    )
    assert imported_by(code, ["numpy.random"]) == []
