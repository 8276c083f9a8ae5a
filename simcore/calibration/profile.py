"""Calibration profiles: what a real cluster measured, in the form the simulator consumes.

``python -m calibrate.fit`` writes a profile; :func:`load_profile` reads it. The file is plain
JSON so the simulator never needs torch. Format ``trainsim-profile``, version 1::

    {
      "format": "trainsim-profile",
      "version": 1,
      "created": "2026-11-29T10:00:00+00:00",
      "cluster": {                        # where it was measured; see CalibrationProfile.check_against
        "backend": "nccl",                # gloo | nccl | ...
        "device_kind": "gpu",             # gpu | cpu
        "device_name": "NVIDIA A100-SXM4-80GB",
        "world_size": 16, "ranks_per_node": 8, "nodes": 2,
        "hostnames": ["node001", "node002"]
      },
      "collectives": [                    # time(S) = alpha_s + busbw_factor(op, ranks) * S / busbw_Bps
        {"op": "all_reduce", "ranks": 8, "scope": "intra_node",
         "alpha_s": 1.2e-05, "busbw_Bps": 2.3e+11,
         "fit": {"points": 24, "mape": 0.041, "r2": 0.998, "poor": false},
         "protocols": {                   # optional: NCCL's protocols, each its own alpha-beta line;
           "LL": {"alpha_s": 1.5e-05, "busbw_Bps": 6.1e+10, "efficiency": 0.27},  # time = the min
           "Simple": {"alpha_s": 6.0e-05, "busbw_Bps": 2.3e+11, "efficiency": 1.0}},
         "undetermined": ["LL128"]}       # protocols the measurements could not pin down
      ],
      "compute": {                        # achieved(F) = peak_flops * F / (F + half_flops), per dtype
        "dtypes": {"bf16": {"peak_flops": 2.9e+14, "half_flops": 3.1e+09,
                            "fit": {"points": 12, "mape": 0.08, "r2": 0.97, "poor": false}}},
        "memory_bandwidth_Bps": 1.6e+12,  # large-tensor copy: bytes read + written per second
        "comm_compute_slowdown": 1.07,    # matmul time while an all_reduce runs / alone (>= 1)
        "threads": 8,                     # torch intra-op threads per rank (CPU runs)
        "op_overhead_s": {"fwd": 2.1e-05, "bwd": 3.5e-05}   # optional: framework cost per op
      },
      "collectives_after_compute": [      # optional: as "collectives", each timed after compute
        {"op": "all_gather", "ranks": 2, "scope": "intra_node", "alpha_s": 0.0021, "busbw_Bps": 6.5e+08}
      ],
      "sources": ["runs/collectives.jsonl", "runs/compute.jsonl"]
    }

Meaning of the models:

- **Collectives** (α–β, Hockney's model in nccl-tests' terms): ``alpha_s`` is the fixed cost of one
  collective, ``busbw_Bps`` the bus bandwidth it reaches on large messages; ``S`` is the size
  nccl-tests prints (for all_gather / reduce_scatter the whole concatenated buffer). ``scope`` is
  ``intra_node`` (all ranks on one node) or ``inter_node`` (the group spans nodes). Where the sweep
  shows NCCL switching protocols (LL for small messages, LL128, then Simple), ``protocols`` holds
  one α–β line per protocol (``efficiency``: its bus bandwidth relative to Simple's) and the time
  is the fastest line; ``undetermined`` lists the protocols the data could not pin down.
- **Compute**: an operation of ``F`` FLOPs reaches ``peak_flops * F / (F + half_flops)``: small
  operations are dominated by fixed launch and memory costs, large ones approach the peak;
  ``half_flops`` is the size at which half the peak is reached.
- **Operator overhead** (optional, added after version 1's first readers, who ignore it): the fixed
  host cost of one dispatched torch operator (dispatcher, autograd bookkeeping, Python) in the
  forward (``fwd``) and the backward (``bwd``, one autograd node running one operator) pass, from
  ``calibrate.compute``'s chain-of-tiny-ops benchmark (the slope of time over chain length).
- **Collectives after compute** (optional, a later minor addition): the same α–β fits from
  ``calibrate.collectives --after-compute-ms``, where every rank computes for a while before each
  timed collective, as a training step issues its blocking collectives (FSDP2's all-gathers and
  reduce-scatters on CPU ranks block the training thread between units' compute). On gloo such a
  collective takes longer than the back-to-back ones of the plain sweep: the process group's
  threads sleep while the rank computes and must be woken and scheduled again, which a sweep of
  consecutive collectives does not see.
- Fits whose residuals are too large carry ``"poor": true``; they are still usable but the
  simulator's prediction in that regime is no better than the fit.

Keys not listed here are ignored on reading (later minor additions stay readable); a different
``format`` or ``version`` is refused with a message saying which versions this reader knows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from simcore.errors import TrainsimError

if TYPE_CHECKING:
    from simcore.topology import Topology

__all__ = [
    "FORMAT",
    "OP_PHASES",
    "SCOPES",
    "VERSION",
    "CalibrationProfile",
    "ClusterDescription",
    "CollectiveFit",
    "ComputeCurve",
    "FitQuality",
    "ProfileError",
    "ProtocolFit",
    "busbw_factor",
    "same_gpu_model",
]

FORMAT = "trainsim-profile"
VERSION = 1
SCOPES = ("intra_node", "inter_node")
OP_PHASES = ("fwd", "bwd")  # passes with a calibrated per-operator overhead

# nccl-tests' bus-bandwidth factors (doc/PERFORMANCE.md): busbw = algbw * factor(n).
_BUSBW_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "all_to_allv": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


class ProfileError(TrainsimError):
    """A profile file that cannot be used: unreadable, wrong format or version, bad values."""


def busbw_factor(op: str, ranks: int) -> float:
    """nccl-tests' factor from algorithm bandwidth (size / time) to bus bandwidth for ``op``."""
    if op not in _BUSBW_FACTORS:
        raise TrainsimError(f"unknown collective {op!r}; allowed: {', '.join(_BUSBW_FACTORS)}")
    if ranks < 1:
        raise TrainsimError(f"a collective needs at least one rank, got {ranks}")
    return float(_BUSBW_FACTORS[op](ranks))


@dataclass(frozen=True, slots=True)
class FitQuality:
    """How well a fitted model reproduces its measurements."""

    points: int
    mape: float  # mean absolute percentage error, as a fraction (0.05 = 5 %)
    r2: float
    poor: bool


@dataclass(frozen=True, slots=True)
class ProtocolFit:
    """One NCCL protocol's α–β line for a collective shape."""

    alpha_s: float
    busbw_Bps: float


@dataclass(frozen=True, slots=True)
class CollectiveFit:
    """α–β model of one collective on one group shape (per NCCL protocol where measured)."""

    op: str
    ranks: int
    scope: str
    alpha_s: float
    busbw_Bps: float
    quality: FitQuality | None = None
    protocols: Mapping[str, ProtocolFit] = field(default_factory=dict)
    undetermined: tuple[str, ...] = ()

    def time_s(self, size_bytes: float) -> float:
        return self.protocol_time(size_bytes)[0]

    def protocol_time(self, size_bytes: float) -> tuple[float, str]:
        """The measured time for ``size_bytes`` and the protocol that gives it (``""``: one line)."""
        factor = busbw_factor(self.op, self.ranks)
        lines = self.protocols or {"": ProtocolFit(self.alpha_s, self.busbw_Bps)}
        return min((f.alpha_s + factor * size_bytes / f.busbw_Bps, name) for name, f in lines.items())


@dataclass(frozen=True, slots=True)
class ComputeCurve:
    """Achieved FLOP/s as a function of an operation's FLOPs, for one dtype."""

    dtype: str
    peak_flops: float
    half_flops: float
    quality: FitQuality | None = None

    def rate(self, flops: float) -> float:
        if flops <= 0:
            return self.peak_flops
        return self.peak_flops * flops / (flops + self.half_flops)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """The cluster a profile was measured on."""

    backend: str
    device_kind: str
    device_name: str
    world_size: int
    ranks_per_node: int
    nodes: int
    hostnames: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CalibrationProfile:
    """Measured cost models of one cluster (see the module docstring for the file format)."""

    cluster: ClusterDescription
    collectives: Mapping[tuple[str, int, str], CollectiveFit] = field(default_factory=dict)
    compute: Mapping[str, ComputeCurve] = field(default_factory=dict)
    memory_bandwidth_Bps: float | None = None
    comm_compute_slowdown: float | None = None
    threads: int | None = None
    sources: tuple[str, ...] = ()
    created: str = ""
    op_overhead_s: Mapping[str, float] = field(default_factory=dict)  # phase ("fwd"/"bwd") -> s/op
    # the same collectives issued right after a stretch of compute (see the module docstring)
    after_compute: Mapping[tuple[str, int, str], CollectiveFit] = field(default_factory=dict)

    def collective_fit(self, op: str, ranks: int, scope: str) -> CollectiveFit | None:
        """The measured fit for ``op`` on ``ranks`` ranks in ``scope``, else None."""
        if scope not in SCOPES:
            raise TrainsimError(f"unknown scope {scope!r}; allowed: {', '.join(SCOPES)}")
        return self.collectives.get((op, ranks, scope))

    def collective_alpha_beta(self, op: str, ranks: int, scope: str) -> tuple[float, float] | None:
        """``(alpha_s, busbw_Bps)`` measured for ``op`` on ``ranks`` ranks in ``scope``, else None."""
        if scope not in SCOPES:
            raise TrainsimError(f"unknown scope {scope!r}; allowed: {', '.join(SCOPES)}")
        fit = self.collectives.get((op, ranks, scope))
        return None if fit is None else (fit.alpha_s, fit.busbw_Bps)

    def compute_rate(self, flops: float, dtype: str) -> float | None:
        """Achieved FLOP/s for an operation of ``flops`` FLOPs in ``dtype``; None if not measured."""
        curve = self.compute.get(dtype)
        return None if curve is None else curve.rate(flops)

    def poor_fits(self) -> list[str]:
        """Names of the fits flagged as poor, e.g. ``"all_reduce/8/intra_node"``."""
        names = [f"{k[0]}/{k[1]}/{k[2]}" for k, f in self.collectives.items() if f.quality and f.quality.poor]
        names += [f"compute/{d}" for d, c in self.compute.items() if c.quality and c.quality.poor]
        return names

    def check_against(self, topology: Topology, *, strict: bool = True) -> None:
        """Refuse a topology this profile does not describe.

        Always checked: the device kind (and GPU model when both name one) and the ranks per node.
        ``strict`` (the default) also requires the same number of ranks and nodes; pass
        ``strict=False`` to extrapolate a profile to more nodes of the same kind.
        """
        _check_cluster(self.cluster, topology, strict)


def _check_cluster(cluster: ClusterDescription, topology: Topology, strict: bool) -> None:
    first = topology.node(topology.ranks[0])
    kind = str(first.get("kind", ""))
    where = f"calibration profile (measured on {cluster.world_size} {cluster.device_kind} ranks)"
    if kind != cluster.device_kind:
        raise ProfileError(f"{where} does not fit topology {topology.name!r}: its ranks are {kind} devices")
    gpu = topology.gpu_spec_name(0)
    if kind == "gpu" and gpu and cluster.device_name and not same_gpu_model(gpu, cluster.device_name):
        raise ProfileError(
            f"{where} was measured on {cluster.device_name!r}; topology {topology.name!r} has {gpu!r}"
        )
    per_host = len(topology.ranks_on_host(topology.host_of_rank(0)))
    if per_host != cluster.ranks_per_node:
        raise ProfileError(
            f"{where} has {cluster.ranks_per_node} ranks per node; topology {topology.name!r} has {per_host}"
        )
    nodes = len(topology.hosts)
    if strict and (topology.world_size != cluster.world_size or nodes != cluster.nodes):
        raise ProfileError(
            f"{where} on {cluster.nodes} node(s) does not match topology {topology.name!r} with "
            f"{topology.world_size} ranks on {nodes} node(s); measure that shape or use strict=False"
        )


def same_gpu_model(spec_name: str, device_name: str) -> bool:
    """Whether a spec name (``a100-sxm-80gb``) and a driver name (``NVIDIA A100-SXM4-80GB``) agree."""
    model = spec_name.split("-")[0].lower()
    squashed = re.sub(r"[^a-z0-9]", "", device_name.lower())
    return model in squashed and not re.search(re.escape(model) + r"\d", squashed)
