"""Chrome-trace export: valid structure, no overlapping slices on one thread, flows on their links."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simcore.errors import TrainsimError
from simcore.net.network import Network
from simcore.net.trace import TraceRecorder, record_network
from tests.simcore.net.test_network_topologies import small_cluster

intervals = st.tuples(
    st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"]), st.integers(0, 50), st.integers(0, 20)
).map(lambda t: (t[0], t[1], t[2] * 1e-7, (t[2] + t[3]) * 1e-7))


def _slices_by_thread(trace: dict) -> dict[tuple[int, int], list[tuple[int, int]]]:
    threads: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in trace["traceEvents"]:
        if e["ph"] == "X":
            start = round(e["ts"] * 1000)
            threads.setdefault((e["pid"], e["tid"]), []).append((start, start + round(e["dur"] * 1000)))
    return threads


@settings(max_examples=100, deadline=None)
@given(st.lists(intervals, max_size=40))
def test_no_two_slices_overlap_on_one_thread(slices: list[tuple[str, str, float, float]]) -> None:
    rec = TraceRecorder()
    for i, (track, lane, start, end) in enumerate(slices):
        rec.slice(track, lane, f"s{i}", start, end)
    trace = json.loads(json.dumps(rec.to_json()))
    threads = _slices_by_thread(trace)
    assert sum(len(v) for v in threads.values()) == len(slices)
    for spans in threads.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    # As few threads per lane as the peak overlap needs (zero-length slices aside).
    for track, lane in {(t, ln) for t, ln, s, e in slices if e > s}:
        mine = [(round(s * 1e9), round(e * 1e9)) for t, ln, s, e in slices if (t, ln) == (track, lane)]
        if any(s == e for s, e in mine):
            continue
        peak = max(sum(1 for s, e in mine if s <= t < e) for t, _ in mine) if mine else 0
        names = [
            e["args"]["name"]
            for e in trace["traceEvents"]
            if e["name"] == "thread_name"
            and e["args"]["name"].split(" #")[0] == lane
            and e["pid"] == _pid(trace, track)
        ]
        assert len(names) == max(peak, 1)


def _pid(trace: dict, track: str) -> int:
    return next(
        e["pid"] for e in trace["traceEvents"] if e["name"] == "process_name" and e["args"]["name"] == track
    )


def test_trace_file_structure_and_gzip(tmp_path: Path) -> None:
    rec = TraceRecorder()
    rec.slice("rank 0", "compute", "forward", 0.0, 1.5e-3, {"layer": 3})
    rec.slice("rank 0", "compute", "backward", 1.5e-3, 4e-3)
    rec.counter("links", "h0/nic0->leaf0", 1e-3, {"utilisation": 0.5})
    plain = json.loads(rec.write(tmp_path / "t.json").read_text())
    zipped = json.loads(gzip.decompress(rec.write(tmp_path / "t.json.gz", gzip=True).read_bytes()))
    assert plain == zipped
    assert plain["displayTimeUnit"] == "ns"
    events = plain["traceEvents"]
    fwd = next(e for e in events if e.get("name") == "forward")
    assert fwd["ph"] == "X" and fwd["ts"] == 0.0 and fwd["dur"] == 1500.0 and fwd["args"] == {"layer": 3}
    bwd = next(e for e in events if e.get("name") == "backward")
    assert bwd["tid"] == fwd["tid"]  # touching, not overlapping: same thread
    counter = next(e for e in events if e["ph"] == "C")
    assert counter["ts"] == 1000.0 and counter["args"] == {"utilisation": 0.5}
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"rank 0", "links"}


def test_a_slice_that_ends_before_it_starts_is_an_error() -> None:
    with pytest.raises(TrainsimError, match="ends"):
        TraceRecorder().slice("t", "l", "bad", 2.0, 1.0)


def test_network_flows_land_on_every_link_they_crossed() -> None:
    topo = small_cluster(hosts=2, gpus=2, nics=1, leaves=1, spines=0)
    env = simpy.Environment()
    net = Network(env, topo)
    net.keep_completed = True
    net.transfer("h0/gpu0", "h1/gpu0", 1e9, tag="a")
    net.transfer("h0/gpu1", "h1/gpu1", 1e9, tag="b")
    env.run()
    rec = TraceRecorder()
    record_network(rec, net)
    trace = rec.to_json()
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == sum(len(f.route) for f in net.completed)
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert {"h0/nic0->leaf0", "h0/nic0->leaf0 #2"} <= threads  # two concurrent flows on one link
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counters and all(0.0 <= e["args"]["utilisation"] <= 1.0 for e in counters)
