"""Hand counts of the exchange's schedule: calibrate.train's serial server
(``PSConfig.serial_replies``), the layer-wise segments (:func:`simcore.paramserver.pipeline.segments`)
and MXNet's per-key rounds (each segment's part applied and pulled as it arrives).

One dedicated shard serves two CPU workers over ``topologies.cpu_cluster``'s loopback (every rank
one link of bandwidth B to the kernel's ``lo``, no latency). A gradient of G bytes takes
g = G / B alone and 2g when both workers push at once (they share the shard's link); the shard's
update takes u and, in ps-sync, each gradient's sum a (the plan's priced times).
"""

from __future__ import annotations

import pytest

from simcore.paramserver import Placement, PSConfig, shard_layers, simulate_parameter_server
from simcore.paramserver import worker as worker_module
from simcore.paramserver.pipeline import segments
from simcore.paramserver.simulate import plan_parameter_server
from simcore.paramserver.sockets import held_bytes
from simcore.strategies.base import TrainingConfig
from tests.paramserver_helpers import uniform_workload
from topologies import cpu_cluster

B = 1e9  # bytes/s on every loopback link
PARAMS = 2_000_000
TRAINING = TrainingConfig(global_batch=8, micro_batch=4, dtype="fp32", optimizer="sgd-momentum")
WORKLOAD = uniform_workload(2, PARAMS // 2, 2e9, name="two-layers")
TOPOLOGY = cpu_cluster(3, loopback_Bps=B, loopback_latency_s=0.0)


def _run(mode: str, serial: bool | None, steps: int = 4):  # type: ignore[no-untyped-def]
    ps = PSConfig(mode=mode, shards=1, placement=Placement("dedicated", 1), steps=steps, layerwise=False,
                  serial_server=serial)  # fmt: skip
    plan = plan_parameter_server(WORKLOAD, TRAINING, TOPOLOGY, ps, workers=2)
    _, _, update, aggregate = plan.servers[0]
    outcome = simulate_parameter_server(WORKLOAD, TRAINING, TOPOLOGY, ps, workers=2, plan=plan)
    g = PARAMS * 4 / B  # fp32 gradient and parameters alike
    return outcome, plan.compute_s[0], g, update, aggregate


def test_the_whole_gradient_exchange_defaults_to_the_serial_server() -> None:
    assert PSConfig(layerwise=False).serial_replies
    assert not PSConfig().serial_replies  # layer-wise: ps-lite's threads
    assert not PSConfig(layerwise=False, serial_server=False).serial_replies


@pytest.fixture
def no_send_buffer(monkeypatch: pytest.MonkeyPatch) -> None:
    """A blocking send that returns only once the whole reply has left (no socket buffer)."""
    monkeypatch.setattr(worker_module, "held_bytes", lambda size: size)


def test_a_blocking_send_leaves_the_socket_buffer_to_the_kernel() -> None:
    """Gloo asks for a send buffer of the message's size up to 32 MiB; the kernel grants at most
    wmem_max (4 MiB on the validation's machine): the send returns with that much still to go."""
    assert held_bytes(8e6) == 8e6 - 4_194_304
    assert held_bytes(4_194_304) == 0.0 and held_bytes(1e6) == 0.0
    assert held_bytes(1e9) == 1e9 - 4_194_304


def test_serial_async_server_holds_its_thread_until_the_reply_is_in_the_socket() -> None:
    """Both push at C (2g together); the shard applies A's (u) and sends A's reply from its
    thread until only the socket buffer's worth is left (h g, h the share beyond 4 MiB), and
    only then applies B's: B's gradient lands at C + 2g + 2u + h g."""
    outcome, c, g, u, _ = _run("ps-async", True)
    h = held_bytes(PARAMS * 4) / (PARAMS * 4)
    assert 0 < h < 1
    expected = [c + 2 * g + u, c + 2 * g + 2 * u + h * g]
    assert outcome.records.applied_s[:2] == pytest.approx(expected, rel=1e-9)


@pytest.mark.usefixtures("no_send_buffer")
def test_serial_async_server_replies_before_the_next_push_and_the_workers_fall_out_of_step() -> None:
    """Without the socket buffer: both push at C (2g together); the shard applies A's (u) and
    sends A's reply (g) before it applies B's, so B's gradient lands g + u later; from then on
    each push meets an idle link: every worker's period is C + 2g + u, the two g + u apart."""
    outcome, c, g, u, _ = _run("ps-async", True)
    period = c + 2 * g + u
    expected = [c + 2 * g + u, c + 3 * g + 2 * u, c + 2 * g + u + period, c + 3 * g + 2 * u + period]
    assert outcome.records.applied_s[:4] == pytest.approx(expected, rel=1e-9)


def test_concurrent_async_server_keeps_the_workers_in_step() -> None:
    """ps-lite's server: the two updates back to back (u each), the replies share the shard's link."""
    outcome, c, g, u, _ = _run("ps-async", False)
    assert outcome.records.applied_s[:2] == pytest.approx([c + 2 * g + u, c + 2 * g + 2 * u], rel=1e-9)


@pytest.mark.usefixtures("no_send_buffer")
def test_serial_sync_server_sends_the_round_replies_one_after_the_other() -> None:
    """Without the socket buffer. Round 1: pushes 2g, two sums 2a, the update u, then A's reply (g) and B's (g). A computes
    while B's reply is sent and pushes alone, B right after it: each later round takes
    C + 3g + a + u (A's sum hides under B's push), not C + 4g + 2a + u."""
    steps = 4
    outcome, c, g, u, a = _run("ps-sync", True, steps)
    first = c + 2 * g + 2 * a + u
    round_s = c + 3 * g + a + u
    ends = [first + k * round_s + 2 * g for k in range(steps)]
    assert outcome.records.step_end_s == pytest.approx(ends, rel=1e-9)
    concurrent, *_ = _run("ps-sync", False, steps)
    assert concurrent.records.step_end_s[-1] == pytest.approx(steps * (c + 4 * g + 2 * a + u), rel=1e-9)


def test_equal_layers_fall_one_to_a_segment() -> None:
    """Three equal layers on three shards, forward f and backward 2f each: three segments of one
    layer (f / 9f and 2f / 9f of the compute, all of one shard's bytes). Cutting each layer at
    its end put the first layer in the second segment and left the first one empty."""
    workload = uniform_workload(3, 1_000_000, 2e10, name="three-layers")
    layout = shard_layers(workload, 3)
    cut = segments(workload, layout, "a10g", "fp32", 16)
    assert [s.fwd_fraction for s in cut] == pytest.approx([1 / 9] * 3)
    assert [s.bwd_fraction for s in cut] == pytest.approx([2 / 9] * 3)
    assert [s.shard_fraction for s in cut] == [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)]


def _layerwise(mode: str):  # type: ignore[no-untyped-def]
    """One worker, one dedicated shard, two equal layers in two segments, layer-wise exchange."""
    workload = uniform_workload(2, PARAMS // 2, 2e9, name="two-layers")
    ps = PSConfig(mode=mode, shards=1, placement=Placement("dedicated", 1), steps=2)
    training = TrainingConfig(global_batch=4, micro_batch=4, dtype="fp32", optimizer="sgd-momentum")
    topology = cpu_cluster(2, loopback_Bps=B, loopback_latency_s=0.0)
    plan = plan_parameter_server(workload, training, topology, ps, workers=1)
    outcome = simulate_parameter_server(workload, training, topology, ps, workers=1, plan=plan)
    c = plan.compute_s[0]
    f = [c * s.fwd_fraction for s in plan.segments]
    b = [c * s.bwd_fraction for s in plan.segments]
    _, _, update, aggregate = plan.servers[0]
    return outcome, f, b, PARAMS * 4 / B, update, aggregate


def test_each_segment_is_applied_and_pulled_as_it_arrives() -> None:
    """MXNet's per-key push and pull: the last segment's part (g/2) goes out when its backward
    ends, is applied (u/2) and pulled back (g/2) while the first segment's backward runs (b0 >
    g + u/2 here); the first segment's part follows at the end of backward. The gradient is
    applied at 2f + b1 + b0 + g/2 + u/2 and the next forward starts once that part is back, g/2
    later: the shard never waits for the whole gradient (it would apply at ... + u)."""
    outcome, f, b, g, u, _ = _layerwise("ps-async")
    assert b[0] > g + u / 2  # the last segment's round trip hides under the first one's backward
    first = sum(f) + sum(b) + g / 2 + u / 2
    period = sum(f) + sum(b) + g + u / 2
    assert outcome.records.applied_s == pytest.approx([first, first + period], rel=1e-9)


def test_each_segment_is_a_round_of_its_own_in_sync() -> None:
    """ps-sync, one worker: each part is summed (a/2) and updated (u/2) on arrival, then pulled."""
    outcome, f, b, g, u, a = _layerwise("ps-sync")
    round_s = sum(f) + sum(b) + g + a / 2 + u / 2
    assert outcome.records.step_end_s == pytest.approx([round_s, 2 * round_s], rel=1e-9)
