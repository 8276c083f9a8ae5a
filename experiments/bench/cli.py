"""How fast the simulator itself runs: wall time and simulated events per collective, by GPU count.

``python -m experiments.bench`` simulates one all_reduce and one all_gather (1 GiB, ring, aggregate
mode, through ``simcore.collectives.start_collective``) over 8, 64, 512 and 4096 GPUs of DGX A100
servers on a leaf-spine fabric, and, as ``ring_flows`` rows, the bare network under one ring (one
flow per hop, no collective layer) so the network's own share is visible. ``events`` counts the
SimPy events the run processed. Each wall time is the median of ``--repeats`` runs, each on
a fresh copy of the topology so nothing cached from an earlier run is reused (routes included);
building the topology is not timed, and garbage left by earlier runs is collected before each
run (the collector stays on during it, so the run's own collection cost counts).
``wall_per_gpu_us`` staying flat as GPUs grow means wall time grows linearly. ``--quick`` runs a
tiny version (for tests); ``--format json`` prints records; ``--profile`` prints where the time of
the largest run goes (cProfile, by cumulative time).

Target: under 0.5 s for one 1 GiB all_reduce over 4096 GPUs, on one core.

A second table (``--what-if``, on by default, off with ``--quick``) times the training-step model:
the default ``python -m experiments.what_if --gpus 16`` in a fresh interpreter, and one FSDP step
of Llama-2-7B on 16, 128 and 1024 GPUs (see :mod:`experiments.bench.whatif`), and the simulated
nccl-tests CLI at 8 and 4096 GPUs (:mod:`experiments.bench.nccl_sim`; target: 4096 at most 0.5 s
more than 8); in JSON those records follow the collective ones and carry ``case`` instead of ``op``.

A third table (``--planner``, on by default, off with ``--quick``) holds the planner's rows: the fast
path's ms per configuration at 16/128/1024 GPUs, a fixed 10,000-configuration sweep on the local
pool (and through Ray with ``--ray``), the Llama-2-70B plan, every entry point's ``--help`` and the
default what-if's start-up, and algorithm selection at 4096 GPUs, each against its target (see
:mod:`experiments.bench.planner`). In JSON those records come last and carry ``case`` and ``target``.
"""

from __future__ import annotations

import cProfile
import gc
import io
import json
import pstats
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, cast

import topologies
from experiments.bench.args import ALGO_CHOICES, build_parser
from experiments.bench.nccl_sim import NCCL_SIM_SHAPES, nccl_sim_cli_rows
from experiments.bench.planner import format_planner_table
from experiments.bench.planner import planner_rows as measure_planner
from experiments.bench.whatif import format_whatif_table, fsdp_step_rows, parallel_step_row, what_if_cli_row
from experiments.common.finite import require_finite
from experiments.common.progress import bar
from simcore.collectives import ALGORITHMS, start_collective
from simcore.engine import Simulation
from simcore.errors import TrainsimError, cli_entry
from simcore.net.network import Network
from simcore.topology import Topology
from simcore.units import format_bytes

# simpy: imported inside the functions that use them, so --help does not load them
if TYPE_CHECKING:
    import simpy

    from simcore.collectives import CollectiveResult

__all__ = ["ALGO_CHOICES", "BenchRow", "build_parser", "collective_bench_rows", "main"]

DEFAULT_GPUS = (8, 64, 512, 4096)
QUICK_GPUS = (8, 16)
DEFAULT_OPS = ("all_reduce", "all_gather")
WARM_UP_GPUS = 8
FSDP_GPUS = (16, 128, 1024)


@dataclass(frozen=True, slots=True)
class BenchRow:
    """One benchmarked simulation: what ran, what it simulated, and how long the simulator took."""

    op: str
    gpus: int
    nodes: int
    algorithm: str
    size_bytes: float
    sim_time_s: float
    events: int
    wall_s: float  # median over repeats
    cpu_s: float  # median process CPU time: the "one core" figure, steadier than wall on a busy machine
    wall_per_gpu_us: float


def dgx_leaf_spine(gpus: int) -> Topology:
    """``gpus`` GPUs of DGX A100 servers (8 per server) on a leaf-spine fabric."""
    return topologies.load_cluster("dgx-a100", gpus=gpus, fabric="leaf-spine")


def _fresh(topology: Topology) -> Topology:
    """The same cluster as a new object, so per-topology caches (routes, results) start empty."""
    return Topology(topology.name, topology.graph, list(topology.ranks), dict(topology.metadata))


def _count_steps(env: simpy.Environment) -> Callable[[], int]:
    """Count the events ``env`` processes from now on; the returned function reads the count."""
    processed = [0]
    step = env.step

    def counting_step() -> None:
        processed[0] += 1
        step()

    env.step = counting_step  # type: ignore[method-assign]
    return lambda: processed[0]


def ring_flows(topology: Topology, op: str, size_bytes: float) -> tuple[float, int, str]:
    """The bare network under one ring over the ranks in order: a flow per hop with the ring's bytes.

    One ring (one NIC per server) rather than NCCL's several channels, so its simulated time is not
    the collective's: these rows show what the network layer alone costs for p concurrent flows.
    """
    import simpy

    env = simpy.Environment()
    events = _count_steps(env)
    network = Network(env, topology)
    ranks = topology.ranks
    p = len(ranks)
    per_hop = (2 if op == "all_reduce" else 1) * (p - 1) / p * size_bytes
    for r in range(p):
        network.transfer(ranks[r], ranks[(r + 1) % p], per_hop)
    env.run()
    return float(env.now), events(), "ring"


def collective(topology: Topology, op: str, size_bytes: float, algorithm: str) -> tuple[float, int, str]:
    """One collective over all ranks (aggregate mode), alone on a fresh simulation."""
    sim = Simulation(seed=0)
    events = _count_steps(sim.env)
    network = Network(sim.env, topology)
    process = start_collective(
        sim, network, op, size_bytes, range(topology.world_size), algorithm=algorithm, mode="aggregate"
    )
    sim.run(process)
    result = cast("CollectiveResult", process.value)
    return result.time_s, events(), result.algorithm


def _measure(
    run: Callable[[Topology], tuple[float, int, str]],
    topology: Topology,
    op: str,
    size_bytes: float,
    repeats: int,
) -> BenchRow:
    walls, cpus = [], []
    for _ in range(repeats):
        fresh = _fresh(topology)
        gc.collect()  # garbage left by earlier runs (a dropped topology) is not this run's cost
        start, start_cpu = time.perf_counter(), time.process_time()
        sim_time_s, events, algorithm = run(fresh)
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    wall = statistics.median(walls)
    gpus = topology.world_size
    nodes = len(topology.hosts)
    cpu = statistics.median(cpus)
    return BenchRow(op, gpus, nodes, algorithm, size_bytes, sim_time_s, events, wall, cpu, wall / gpus * 1e6)


def collective_bench_rows(
    gpu_counts: Sequence[int] = DEFAULT_GPUS,
    *,
    ops: Sequence[str] = DEFAULT_OPS,
    size_bytes: float = 2**30,
    algorithm: str = "ring",
    repeats: int = 3,
    network_rows: bool = True,
    topology_for: Callable[[int], Topology] = dgx_leaf_spine,
    progress: Any = None,
) -> list[BenchRow]:
    """Benchmark rows: each op over each GPU count, plus bare-network ``ring_flows`` rows.

    ``progress`` (a tqdm bar or None) advances by one per row.
    """
    if repeats < 1:
        raise TrainsimError(f"--repeats must be >= 1, got {repeats}")
    if ops and gpu_counts:  # untimed warm-up (first-call imports) on a small cluster
        collective(topology_for(min(*gpu_counts, WARM_UP_GPUS)), ops[0], 1.0, algorithm)
    rows = []
    for gpus in gpu_counts:
        topology = topology_for(gpus)
        for op in ops:
            rows.append(
                _measure(
                    lambda t, op=op: collective(t, op, size_bytes, algorithm),  # type: ignore[misc]
                    topology,
                    op,
                    size_bytes,
                    repeats,
                )
            )
            _tick(progress)
        if network_rows:
            rows.append(
                _measure(
                    lambda t: ring_flows(t, "all_reduce", size_bytes),
                    topology,
                    "ring_flows",
                    size_bytes,
                    repeats,
                )
            )
            _tick(progress)
    return rows


def _tick(progress: Any) -> None:
    if progress is not None:
        progress.update(1)


def format_table(rows: Sequence[BenchRow]) -> str:
    header = (
        f"{'op':<11} {'gpus':>5} {'nodes':>5} {'algorithm':<9} {'size':>9} {'sim_time_ms':>11} "
        f"{'events':>7} {'wall_ms':>9} {'cpu_ms':>8} {'wall_per_gpu_us':>15}"
    )
    lines = [header]
    for r in rows:
        lines.append(
            f"{r.op:<11} {r.gpus:>5} {r.nodes:>5} {r.algorithm:<9} {format_bytes(r.size_bytes):>9} "
            f"{r.sim_time_s * 1e3:>11.3f} {r.events:>7} {r.wall_s * 1e3:>9.1f} {r.cpu_s * 1e3:>8.1f} {r.wall_per_gpu_us:>15.1f}"
        )
    return "\n".join(lines)


def profile_largest(gpus: int, size_bytes: float, algorithm: str, top: int = 20) -> str:
    """cProfile of one all_reduce over ``gpus`` GPUs (cold caches), top functions by cumulative time."""
    topology = _fresh(dgx_leaf_spine(gpus))
    profiler = cProfile.Profile()
    profiler.runcall(collective, topology, "all_reduce", size_bytes, algorithm)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


@cli_entry
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gpus = args.gpus or list(QUICK_GPUS if args.quick else DEFAULT_GPUS)
    if args.algo not in ALGORITHMS["all_reduce"] or args.algo not in ALGORITHMS["all_gather"]:
        both = sorted(set(ALGORITHMS["all_reduce"]) & set(ALGORITHMS["all_gather"]))
        raise TrainsimError(
            f"--algo {args.algo!r} does not run both all_reduce and all_gather; allowed: {', '.join(both)}"
        )
    repeats = 1 if args.quick else args.repeats
    what_if = not args.quick if args.what_if is None else args.what_if
    total = len(gpus) * (len(DEFAULT_OPS) + 1) + (2 + len(FSDP_GPUS) + len(NCCL_SIM_SHAPES) if what_if else 0)
    with bar(total, "bench", quiet=args.quiet, unit="row") as progress:
        rows = collective_bench_rows(
            gpus, size_bytes=args.size, algorithm=args.algo, repeats=repeats, progress=progress
        )
        step_rows = []
        if what_if:
            step_rows = [what_if_cli_row(repeats=repeats)]
            progress.update(1)
            step_rows += fsdp_step_rows(FSDP_GPUS, repeats=repeats, progress=progress)
            step_rows.append(parallel_step_row(repeats=repeats))
            progress.update(1)
            step_rows += nccl_sim_cli_rows(repeats=repeats)
            progress.update(len(NCCL_SIM_SHAPES))
    records = [asdict(r) for r in rows] + [asdict(r) for r in step_rows]
    require_finite(records, "the benchmark")
    planner = not args.quick if args.planner is None else args.planner
    planner_rows = []
    if planner:
        planner_rows = measure_planner(quick=args.quick, repeats=repeats, ray=args.ray)
    if args.format == "json":
        print(json.dumps(records + [asdict(r) for r in planner_rows], indent=1))
    else:
        print(format_table(rows))
        if step_rows:
            print()
            print(format_whatif_table(step_rows))
        if planner_rows:
            print()
            print(format_planner_table(planner_rows))
    if args.profile:
        print(profile_largest(max(gpus), args.size, args.algo))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
