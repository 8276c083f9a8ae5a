"""How a parameter-server run is set up: mode, shards, server placement, staleness bound, length.

Modes (:data:`PS_MODES`; see :mod:`simcore.paramserver.modes` for what each does):
``ps-sync`` (barrier every step), ``ps-async`` (no barrier), ``ps-ssp`` (stale-synchronous with
bound s, Ho et al. 2013) and ``ps-mitigated`` (asynchronous with a version check before every push
and a re-pull and recompute when the gradient is more than s versions stale; Zhang et al. 2016).

Placement (:class:`Placement`, parsed from ``"colocated"``, ``"dedicated"`` or ``"dedicated:N"``):

- ``colocated``: server shard j runs beside worker ``j * W // k`` (spread evenly over the
  workers and hence over the nodes), on that worker's GPU and NIC; a worker's own shard is local.
- ``dedicated:N``: the servers run on N extra nodes of the cluster that hold no worker (default one
  node); shard j sits on server node ``j mod N``, device ``(j // N) mod devices-per-node`` of it,
  so shards use distinct NICs where the node has several. :func:`load_ps_cluster` grows a cluster
  of one server type (a preset or a one-type spec file) by those N nodes; a cluster file that mixes
  server types must list them after the workers' nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from simcore.errors import TrainsimError

__all__ = [
    "DEFAULT_PS_STEPS",
    "DEFAULT_STALENESS_BOUND",
    "PLACEMENTS",
    "PS_MODES",
    "PSConfig",
    "PSOptions",
    "Placement",
    "normalize_mode",
    "parse_placement",
]

PS_MODES = ("ps-sync", "ps-async", "ps-ssp", "ps-mitigated")
# dedicated-cpu: the shards run on the CPU sockets of the dedicated nodes (ps-lite/BytePS servers are
# CPU processes), their traffic crossing the host's NIC and PCIe into host memory.
PLACEMENTS = ("colocated", "dedicated", "dedicated-cpu")
# Ho et al. (2013) report SSP converging well for staleness bounds of a few clocks (their Fig. 4
# uses s = 3..10); 3 is the small end, where blocking still shows.
DEFAULT_STALENESS_BOUND = 3
DEFAULT_PS_STEPS = 8


def normalize_mode(mode: str) -> str:
    """``ps-async`` from ``ps-async``, ``async`` or ``PS-Async``; a clear error otherwise."""
    name = str(mode).strip().lower()
    name = name if name.startswith("ps-") else f"ps-{name}"
    if name not in PS_MODES:
        raise TrainsimError(f"unknown parameter-server mode {mode!r}; allowed: {', '.join(PS_MODES)}")
    return name


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the server shards run: beside the workers, or on ``server_nodes`` nodes of their own."""

    kind: str = "colocated"
    server_nodes: int = 1

    def __post_init__(self) -> None:
        if self.kind not in PLACEMENTS:
            raise TrainsimError(
                f"server placement {self.kind!r} is not known; allowed: {', '.join(PLACEMENTS)}"
            )
        if self.server_nodes < 1:
            raise TrainsimError(f"dedicated server nodes must be >= 1, got {self.server_nodes}")

    def describe(self) -> str:
        return self.kind if self.kind == "colocated" else f"{self.kind}:{self.server_nodes}"

    @property
    def dedicated(self) -> bool:
        """Whether the servers have nodes of their own (on their GPUs or their CPUs)."""
        return self.kind != "colocated"


def parse_placement(text: str) -> Placement:
    """``"colocated"``, ``"dedicated"`` (one server node), ``"dedicated:N"`` (N server nodes), or
    ``"dedicated-cpu[:N]"`` (the shards on those nodes' CPU sockets)."""
    kind, sep, count = str(text).strip().lower().partition(":")
    if kind not in PLACEMENTS or (sep and kind == "colocated"):
        raise TrainsimError(
            f"--ps-placement {text!r}: expected colocated, dedicated[:N] or dedicated-cpu[:N]"
        )
    if not sep:
        return Placement(kind)
    try:
        nodes = int(count)
    except ValueError:
        raise TrainsimError(
            f"--ps-placement {text!r}: N in dedicated:N must be a whole number of nodes"
        ) from None
    return Placement(kind, nodes)


@dataclass(frozen=True, slots=True)
class PSConfig:
    """One parameter-server run.

    ``shards`` server shards (None: one per worker node when colocated, one per device of the
    server nodes when dedicated). ``steps``: the run stops after ``steps * workers`` gradients are applied
    (for ps-sync, ``steps`` barrier rounds): an asynchronous "step" is one gradient per worker on
    average. ``staleness_bound`` is SSP's s and ps-mitigated's threshold. ``version_check_bytes``
    is the size of a version query and of its answer. ``layerwise``: workers push each part of the
    gradient as backward produces it and pull in the order forward needs it (BytePS / P3, as
    deployed: :mod:`simcore.paramserver.pipeline`); False pushes the whole gradient after backward
    and waits for every pull (ps-lite's classic loop, and calibrate.train's parameter server).
    """

    mode: str = "ps-async"
    shards: int | None = None
    placement: Placement = Placement()
    staleness_bound: int = DEFAULT_STALENESS_BOUND
    steps: int = DEFAULT_PS_STEPS
    version_check_bytes: int = 64
    layerwise: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", normalize_mode(self.mode))
        if self.shards is not None and (isinstance(self.shards, bool) or self.shards < 1):
            raise TrainsimError(f"--ps-shards must be a positive number of shards, got {self.shards!r}")
        if isinstance(self.staleness_bound, bool) or self.staleness_bound < 0:
            raise TrainsimError(
                f"--staleness-bound must be a whole number >= 0, got {self.staleness_bound!r}"
            )
        if isinstance(self.steps, bool) or self.steps < 1:
            raise TrainsimError(f"--steps must be >= 1, got {self.steps!r}")
        if self.version_check_bytes < 0:
            raise TrainsimError(f"version_check_bytes must be >= 0, got {self.version_check_bytes}")


@dataclass(frozen=True, slots=True)
class PSOptions:
    """What the what-if's parameter-server flags set (``--ps-shards``, ``--ps-placement``, ``--staleness-bound``)."""

    shards: int | None = None
    placement: Placement = field(default_factory=Placement)
    staleness_bound: int = DEFAULT_STALENESS_BOUND

    def __post_init__(self) -> None:
        PSConfig(shards=self.shards, placement=self.placement, staleness_bound=self.staleness_bound)

    def config(self, mode: str, steps: int) -> PSConfig:
        """The run settings of one mode."""
        return PSConfig(mode, self.shards, self.placement, self.staleness_bound, steps)
