"""Run a sweep's tasks on an existing engine: in process, a local process pool, or Ray tasks.

Tasks are sorted by GPU count, then stage shape (micro-batch, degrees), then the rest (schedule,
sequence parallelism, recompute, offload, strategy) and cut into chunks. What a worker keeps in its
process's :class:`~simcore.planner.evaluate.WorkerCaches` (made by the pool's initializer, or by the
first chunk a process runs in process or as a Ray task) is almost all of one GPU count: the
cluster's collective prices, and a stage's sharded layers, compute times and runs (the compute
model is the slowest of the count's ranks: :mod:`simcore.compute.rank_spread`); the schedules,
recompute modes and strategies of a shape then follow one another on one worker, which shards and
times the stage once for them. Results come back by task index, so every engine returns the same
list in the same order as a serial run.

- ``local``: one single-process :class:`concurrent.futures.ProcessPoolExecutor` per worker (forked
  where the platform allows, so workers inherit the clusters the parent loaded), each given a run
  of consecutive chunks (about as many tasks each): a GPU count is priced and sharded by one worker,
  two where a run ends inside it, not by every worker; one worker runs in process.
- ``ray``: the same chunks as Ray tasks, on the cluster at ``address`` or a local instance (``pip
  install "trainsim[sweep]"``). An unreachable address or a missing ``ray`` is a
  :class:`~simcore.errors.TrainsimError`, found within :data:`CONNECT_TIMEOUT_S` (and
  :data:`RAY_INIT_TIMEOUT_S` when something answers that is not Ray).

Ctrl-C stops a sweep: chunks not started are cancelled, running workers are stopped, and what had
finished is returned with ``interrupted`` set.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import math
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from simcore.errors import TrainsimError
from simcore.planner.evaluate import Outcome, PlanJob, Task, evaluate_tasks, install_worker_caches
from simcore.procs import die_with_parent

__all__ = [
    "CONNECT_TIMEOUT_S",
    "ENGINES",
    "SweepRun",
    "check_engine",
    "chunk_tasks",
    "run_sweep",
    "run_sweeps",
]

ENGINES = ("local", "ray")
CONNECT_TIMEOUT_S = 5.0  # for the TCP connection to a cluster's address
RAY_INIT_TIMEOUT_S = 20.0  # for ray.init to join the cluster there
MAX_CHUNK = 64  # configurations per task: large enough to amortise a task, small enough to share out

_NO_RAY = (
    "--engine ray needs Ray, which is not installed: pip install 'trainsim[sweep]' "
    "(or leave --engine out for the local process pool)"
)

Chunk = list[tuple[int, Task]]
Progress = Callable[[int], None]


@dataclass(slots=True)
class SweepRun:
    """Outcomes by task index (None where the sweep was interrupted first) and how it ran."""

    outcomes: list[Outcome | None]
    interrupted: bool
    engine: str
    workers: int


def _order_key(task: Task) -> tuple[object, ...]:
    """GPU count first, then stage shape, then what only orders or prices the stage differently."""
    gpus, layout = task
    return (gpus, *layout.sort_key())


def chunk_tasks(tasks: Sequence[Task], workers: int) -> list[Chunk]:
    """Indexed tasks grouped by GPU count and stage shape and cut into about four chunks per worker."""
    order = sorted(range(len(tasks)), key=lambda i: _order_key(tasks[i]))
    size = max(1, min(MAX_CHUNK, math.ceil(len(tasks) / max(1, 4 * workers))))
    chunks: list[Chunk] = []
    for i in order:
        if not chunks or len(chunks[-1]) >= size:
            chunks.append([])
        chunks[-1].append((i, tasks[i]))
    return chunks


def _run_chunk(job: PlanJob, chunk: Chunk) -> list[tuple[int, Outcome]]:
    outcomes = evaluate_tasks(job, [task for _, task in chunk])
    return [(index, outcome) for (index, _), outcome in zip(chunk, outcomes, strict=True)]


def check_engine(engine: str, address: str | None = None) -> None:
    """A :class:`TrainsimError` for an unknown engine, an address without Ray, or Ray not installed."""
    if engine not in ENGINES:
        raise TrainsimError(f"engine {engine!r} is not known; allowed: {', '.join(ENGINES)}")
    if address is not None and engine != "ray":
        raise TrainsimError("--address names a Ray cluster; it needs --engine ray")
    if engine == "ray" and importlib.util.find_spec("ray") is None:
        raise TrainsimError(_NO_RAY)


def run_sweep(
    job: PlanJob,
    tasks: Sequence[Task],
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
) -> SweepRun:
    """Time every task on ``engine`` with ``workers`` processes (default: every core)."""
    return run_sweeps([(job, tasks)], engine=engine, workers=workers, address=address, progress=progress)[0]


def run_sweeps(
    parts: Sequence[tuple[PlanJob, Sequence[Task]]],
    *,
    engine: str = "local",
    workers: int | None = None,
    address: str | None = None,
    progress: Progress | None = None,
) -> list[SweepRun]:
    """Several jobs' tasks on one pool (or one Ray connection); one :class:`SweepRun` per job."""
    check_engine(engine, address)
    workers = workers or os.cpu_count() or 1
    if workers < 1:
        raise TrainsimError(f"--workers must be at least 1, got {workers}")
    outcomes: list[list[Outcome | None]] = [[None] * len(tasks) for _, tasks in parts]
    work = [
        (part, job, chunk) for part, (job, tasks) in enumerate(parts) for chunk in chunk_tasks(tasks, workers)
    ]
    tick = progress or (lambda _: None)

    def store(part: int, results: list[tuple[int, Outcome]]) -> None:
        for index, outcome in results:
            outcomes[part][index] = outcome
        tick(len(results))

    if engine == "ray":
        interrupted = _ray(work, store, workers, address)
    elif workers == 1 or len(work) == 1:
        interrupted, workers = _in_process(work, store), 1
    else:
        interrupted = _pool(work, store, workers)
    return [SweepRun(found, interrupted, engine, workers) for found in outcomes]


Work = list[tuple[int, PlanJob, Chunk]]
Store = Callable[[int, list[tuple[int, Outcome]]], None]


def _in_process(work: Work, store: Store) -> bool:
    try:
        for part, job, chunk in work:
            for index, task in chunk:
                store(part, _run_chunk(job, [(index, task)]))
    except KeyboardInterrupt:
        return True
    return False


def _start_worker(parent: int) -> None:
    # Ctrl-C reaches the whole process group: the parent stops the sweep, workers just end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A parent killed outright (SIGTERM, kill -9) cannot stop its pool: have Linux do it.
    die_with_parent(parent)
    install_worker_caches()  # (a forked worker keeps the parent's, with the clusters it loaded)


def _runs(work: Work, workers: int) -> list[Work]:
    """``work`` (in chunk order) cut into ``workers`` runs of consecutive chunks with about as many
    tasks each (none empty)."""
    total = sum(len(chunk) for _, _, chunk in work)
    runs: list[Work] = [[] for _ in range(min(workers, len(work)))]
    done = 0
    for item in work:
        run = min(len(runs) - 1, done * len(runs) // max(1, total))
        runs[run].append(item)
        done += len(item[2])
    return [run for run in runs if run]


def _pool(work: Work, store: Store, workers: int) -> bool:
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    runs = _runs(work, workers)
    pools = [
        ProcessPoolExecutor(
            max_workers=1, mp_context=context, initializer=_start_worker, initargs=(os.getpid(),)
        )
        for _ in runs
    ]
    pending: dict[Future[list[tuple[int, Outcome]]], int] = {}
    interrupted = False
    try:
        pending = {
            pool.submit(_run_chunk, job, chunk): part
            for pool, run in zip(pools, runs, strict=True)
            for part, job, chunk in run
        }
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                store(pending.pop(future), future.result())
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for pool in pools:
            # Workers still inside a chunk would run it to the end: stop them (no public API for it).
            processes = list((getattr(pool, "_processes", None) or {}).values()) if interrupted else []
            pool.shutdown(wait=not interrupted, cancel_futures=True)
            for process in processes:
                process.terminate()
    return interrupted


def _check_reachable(address: str) -> None:
    """A :class:`TrainsimError` unless something listens at ``address`` (host:port) within the timeout."""
    if address == "auto":
        return
    target = address.split("://", 1)[-1]
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise TrainsimError(f"--address {address!r} is not host:port (or ray://host:port, or auto)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise TrainsimError(
            f"cannot reach the Ray cluster at {address} within {CONNECT_TIMEOUT_S:g} s ({exc}); "
            "check the address, or leave --address out to start a local Ray instance"
        ) from None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 (where Ray's C++ core logs) to /dev/null for the block."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _connect(ray: Any, workers: int, address: str | None) -> None:
    """Join the cluster at ``address`` (or start a local instance), within :data:`RAY_INIT_TIMEOUT_S`.

    Something that accepts connections but is not a Ray head keeps ``ray.init`` retrying for many
    minutes, so joining an existing cluster runs in a daemon thread that is abandoned at the bound.
    """
    if ray.is_initialized():
        return
    if address is not None:
        _check_reachable(address)
    failure: list[BaseException] = []

    def start() -> None:
        try:
            ray.init(
                address=address,
                num_cpus=workers if address is None else None,
                include_dashboard=False,
                logging_level=logging.ERROR,
                log_to_driver=False,
            )
        except BaseException as exc:  # handed to the caller's thread below
            failure.append(exc)

    if address is None:
        start()
    else:
        with _quiet_stderr():  # Ray's core warns on every failed retry; our error says it once
            thread = threading.Thread(target=start, name="ray-init", daemon=True)
            thread.start()
            thread.join(RAY_INIT_TIMEOUT_S)
        if thread.is_alive():
            raise TrainsimError(
                f"no Ray cluster answered at {address} within {RAY_INIT_TIMEOUT_S:g} s (something listens "
                "there, but not a Ray head); check the address, or leave --address out for a local instance"
            )
    if failure:
        raise TrainsimError(
            f"cannot connect to Ray at {address or 'a new local instance'}: {failure[0]}"
        ) from None


def _ray(work: Work, store: Store, workers: int, address: str | None) -> bool:
    try:
        import ray
    except ImportError:
        raise TrainsimError(_NO_RAY) from None
    _connect(ray, workers, address)
    remote = ray.remote(num_cpus=1)(_run_chunk)
    jobs: dict[int, Any] = {}
    pending: dict[Any, int] = {}
    for part, job, chunk in work:
        if id(job) not in jobs:
            jobs[id(job)] = ray.put(job)
        pending[remote.remote(jobs[id(job)], chunk)] = part
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                store(pending.pop(ref), ray.get(ref))
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref, force=True)
        return True
    return False
