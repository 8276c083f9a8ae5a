"""The parameter server (sync, async, SSP) on real gloo processes, and its sharding by bytes."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from calibrate.train.data import ImageTask
from calibrate.train.models import build_model
from calibrate.train.param_server import PsLayout, shard_ranges
from tests.torchrun_helpers import TINY_CNN, run_job

TINY = [
    *TINY_CNN,
    "--seed",
    "0",
    "--checkpoint-every",
    "0",
    "--eval-every",
    "4",
]


@given(numel=st.integers(1, 10**7), servers=st.integers(1, 16))
def test_shards_are_contiguous_cover_everything_and_differ_by_at_most_one(numel: int, servers: int) -> None:
    ranges = shard_ranges(numel, servers)
    assert ranges[0][0] == 0 and ranges[-1][1] == numel
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    sizes = [hi - lo for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1


def test_layout_puts_servers_first() -> None:
    layout = PsLayout(world_size=5, servers=2)
    assert layout.workers == (2, 3, 4)
    assert layout.is_server(1) and not layout.is_server(2)
    assert layout.worker_index(4) == 2


def worker_steps(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["kind"] == "step" and r["role"] == "worker"]


def applied_staleness(records: list[dict[str, Any]], key: str = "staleness") -> list[int]:
    """Staleness of every update the servers applied."""
    return [s for r in records if r["kind"] == "step" and r["role"] == "server" for s in r[key]]


def plain_sgd_losses(steps: int, workers: int, batch: int) -> list[list[float]]:
    """Per step, each worker's loss under textbook synchronous SGD with momentum on the mean of the
    workers' losses: what a synchronous parameter server must reproduce (TINY's configuration)."""
    task = ImageTask(seed=0, num_classes=10, image_size=8, noise=1.0)
    torch.manual_seed(0)
    model = build_model("cnn", width=4, depth=1, heads=2, seq_len=32, vocab=64, num_classes=10, channels=3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for step in range(steps):
        per_worker = [
            F.cross_entropy(model(x), y)
            for x, y in (task.train_batch(step, batch, w, workers) for w in range(workers))
        ]
        optimizer.zero_grad()
        torch.stack(per_worker).mean().backward()
        optimizer.step()
        losses.append([float(loss.detach()) for loss in per_worker])
    return losses


@pytest.mark.integration
@pytest.mark.slow
def test_sync_sharded_server_trains_exactly_like_plain_sgd(tmp_path: Path) -> None:
    """Two servers holding halves of the model, two workers: textbook SGD on the workers' mean
    gradient, so the same losses step by step, and no update is ever stale."""
    ps = run_job(
        tmp_path / "ps.jsonl", [*TINY, "--strategy", "ps-sync", "--ps-ranks", "2", "--steps", "4"], 4
    )
    expected = plain_sgd_losses(steps=4, workers=2, batch=8)
    for worker in (0, 1):
        losses = [r["loss"] for r in worker_steps(ps) if r["rank"] == 2 + worker]
        assert losses == pytest.approx([step[worker] for step in expected], rel=1e-5)
    staleness = applied_staleness(ps)
    assert len(staleness) == 2 * 2 * 4  # every server applied every worker's gradient of every step
    assert set(staleness) == {0}
    assert all(r["staleness"] == [0, 0] for r in worker_steps(ps))
    roles = {r["rank"]: r["role"] for r in ps if r["kind"] == "summary"}
    assert roles == {0: "server", 1: "server", 2: "worker", 3: "worker"}


@pytest.mark.integration
@pytest.mark.slow
def test_ssp_never_exceeds_its_bound(tmp_path: Path) -> None:
    bound, workers = 1, 2
    records = run_job(
        tmp_path / "ssp.jsonl",
        [
            *TINY,
            "--strategy",
            "ps-ssp",
            "--staleness-bound",
            str(bound),
            "--steps",
            "8",
            "--slow-rank",
            "1:4",
        ],
        3,
    )
    assert len(applied_staleness(records)) == workers * 8
    assert max(applied_staleness(records, "staleness_clocks")) <= bound
    assert max(applied_staleness(records)) <= (workers - 1) * (2 * bound + 1)
    assert all(r["ssp_block_s"] >= 0 for r in worker_steps(records))
    slow = [r for r in worker_steps(records) if r["rank"] == 1]
    assert all(r["slow_sleep_s"] > 0 for r in slow)


@pytest.mark.integration
@pytest.mark.slow
def test_async_with_a_straggler_applies_stale_gradients(tmp_path: Path) -> None:
    """Rank 1 computes 5x slower: while it works, rank 2's updates land, so its gradients are stale."""
    records = run_job(
        tmp_path / "async.jsonl", [*TINY, "--strategy", "ps-async", "--steps", "6", "--slow-rank", "1:5"], 3
    )
    staleness = applied_staleness(records)
    assert len(staleness) == 2 * 6 and min(staleness) >= 0
    slow_staleness = [s for r in worker_steps(records) if r["rank"] == 1 for s in r["staleness"]]
    assert max(slow_staleness) > 0
    summary = next(r for r in records if r["kind"] == "summary" and r["role"] == "server")
    assert summary["staleness_mean"] > 0 and summary["staleness_p99"] >= summary["staleness_mean"]
    worker_summary = next(r for r in records if r["kind"] == "summary" and r["rank"] == 2)
    assert worker_summary["final_accuracy"] is not None
