"""The four parameter-server modes and the two protocol steps that set them apart.

The modes' names and rules are one table, :data:`simcore.paramserver.config.MODES`.

``ps-sync``: bulk-synchronous. Every worker computes, pushes its gradient to every shard; a shard
sums the W gradients, applies one update, and only then may the workers pull (the barrier). All
staleness is 0; every step waits for the slowest worker.

``ps-async``: no barrier (Hogwild-style parameter server, Dean et al. 2012 "Downpour SGD"; Li et al.
2014). A shard applies each push on arrival; the worker pulls that shard right after its own update
and starts its next gradient once every shard is pulled. With W equal workers staleness is about
W - 1.

``ps-ssp``: stale-synchronous parallel (Ho et al., "More Effective Distributed ML via a Stale
Synchronous Parallel Parameter Server", NIPS 2013). A worker's clock counts its applied gradients;
before computing, a worker more than s clocks ahead of the slowest blocks until the slowest catches
up (:func:`ssp_gate`); its pulls of the gradient before wait for that too, so it pulls once, fresh,
rather than at once and again after waiting. Its shards sum the gradients that queue while they
update into one update (as ps-sync's round does). The clock lag of every gradient (own clock minus the slowest's at the start of its
computation) is therefore at most s. Its staleness in server versions is at most (W - 1)(2s + 3):
while a worker at clock c computes from parameters pulled when every other worker had applied at
least c - 1 - s gradients (the slowest's clock when this worker last passed the gate), each other
worker can reach clock c + s + 1 plus one gradient already on the shard but not yet on all shards.

``ps-mitigated``: asynchronous with a staleness check before each push (:func:`version_check`):
the worker asks every shard for its version (a small message each way - route latency, not a
flow - answered after the updates already queued at the shard, which handles messages in arrival
order); if the gradient is more than s versions stale, it re-pulls every shard and recomputes the
gradient, then pushes without checking again (one retry, so nothing livelocks). The applied update
is damped by 1 / (1 + staleness), Zhang, Gupta, Lian & Liu, "Staleness-aware Async-SGD for
Distributed Deep Learning", IJCAI 2016 - free in time, so not simulated. The check's round trip
every step and the recomputes are the synchronisation overhead the seed study (Ovi, arXiv
2505.12832, 2025) found to cancel the asynchronous gain; the run reports both.

When can ps-mitigated apply gradients faster than ps-async? Its worker loop is ps-async's plus
delays, so only through the shared links and shards:

- Never when compute-bound on equal workers (tests/simcore/paramserver/test_paramserver_throughput.py checks it).
- Bandwidth-bound, equal workers, no jitter: the workers of ps-async run in lockstep, pushing
  together and then pulling together, so each direction of the server's NIC idles half the time;
  the checks and recomputes break the lockstep and let pushes overlap pulls. Four workers, two
  shards on one dedicated DGX A100, 8 x 4M-parameter layers, micro-batch 4, s = 2, 48 steps:
  ps-async 1,457 samples/s (busiest server NIC direction 47% used), ps-mitigated 1,645 (69%, 63
  recomputes). Compute jitter (lognormal 0.2) breaks the lockstep by itself: 1,993 vs 1,667.
- Not any more through the end of a short run. experiments.reproduce_paper --quick (ResNet-50 on
  8 A100 + 8 A10G workers, 4 steps) used to show ps-mitigated at 40,632 and ps-async at 39,556
  samples/s: the run stopped handing out gradients after ``steps * W`` had been started and ended
  when the last one landed. In ps-async the A10G workers held the last gradients (58 ms of compute
  each) after the A100 workers had run out; in ps-mitigated the A10G workers were busy
  recomputing, so the A100 workers took the last ones and the run ended sooner. Recomputes were
  never counted as applied gradients: the drain was the cause. A run now ends when ``steps * W``
  gradients are applied with every worker still at work (:func:`simcore.paramserver.worker.async_worker`):
  57,145 vs 40,988 samples/s at 4 steps, 60,371 vs 38,220 at 32.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simcore.paramserver.state import PSRun

__all__ = ["pull_all", "pull_shard", "ssp_gate", "version_check", "wait_for_slowest"]


def pull_all(run: PSRun, worker: int, pulled: list[int]) -> Generator[Any, Any, None]:
    """Fetch every shard's current parameters (versions as of the start of each pull)."""
    device = run.worker_devices[worker]
    flows = []
    for shard in run.shards:
        pulled[shard.index] = shard.version
        flows.append(run.send(shard.device, device, run.param_bytes[shard.index], "ps_pull"))
    yield run.env.all_of(flows)


def pull_shard(run: PSRun, worker: int, index: int, pulled: list[int]) -> Generator[Any, Any, None]:
    """Fetch one shard's current parameters (its version as of the start of the pull)."""
    shard = run.shards[index]
    pulled[index] = shard.version
    yield run.send(shard.device, run.worker_devices[worker], run.param_bytes[index], "ps_pull")


def wait_for_slowest(run: PSRun, worker: int) -> Generator[Any, Any, bool]:
    """Wait while this worker is more than s clocks ahead of the slowest; whether it waited."""
    bound = run.config.staleness_bound
    waited = False
    while not run.budget_spent and run.clock[worker] - min(run.clock) > bound:
        waited = True
        yield run.changed()
    return waited


def ssp_gate(run: PSRun, worker: int) -> Generator[Any, Any, None]:
    """Block while this worker is more than s clocks ahead of the slowest. No refresh after waiting:
    the worker's pulls of its last gradient waited for the slowest themselves
    (:func:`simcore.paramserver.worker._pull_when_allowed`), so what it holds is already fresh."""
    start = float(run.env.now)
    waited = yield from wait_for_slowest(run, worker)
    if waited:
        run.records.blocking_s[worker] += float(run.env.now) - start


def _ask_version(run: PSRun, worker: int, index: int, answers: list[int]) -> Generator[Any, Any, None]:
    shard = run.shards[index]
    device, size = run.worker_devices[worker], run.config.version_check_bytes
    yield run.message(device, shard.device, size)
    answers[index] = yield from shard.query()
    yield run.message(shard.device, device, size)


def version_check(run: PSRun, worker: int, pulled: list[int]) -> Generator[Any, Any, bool]:
    """Ask every shard its version; if the gradient is more than s stale, re-pull and recompute.

    Returns whether the gradient was recomputed.
    """
    start = float(run.env.now)
    answers = list(pulled)
    yield run.env.all_of([run.env.process(_ask_version(run, worker, s.index, answers)) for s in run.shards])
    stale = max((answers[s.index] - pulled[s.index] for s in run.shards), default=0)
    recomputed = stale > run.config.staleness_bound
    if recomputed:
        yield from pull_all(run, worker, pulled)
        yield run.env.timeout(run.compute_time(worker))
        run.records.recomputes[worker] += 1
    run.records.check_s[worker] += float(run.env.now) - start
    return recomputed
