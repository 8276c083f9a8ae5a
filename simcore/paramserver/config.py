"""How a parameter-server run is set up: mode, shards, server placement, staleness bound, length.

Modes (:data:`MODES`, the one table of them; see :mod:`simcore.paramserver.modes` for what each
does): ``ps-sync`` (barrier every step), ``ps-async`` (no barrier), ``ps-ssp`` (stale-synchronous
with bound s, Ho et al. 2013) and ``ps-mitigated`` (asynchronous with a version check before every
push and a re-pull and recompute when the gradient is more than s versions stale; Zhang et al.
2016). The what-if names them as strategies, with the ``ps-`` prefix (:data:`PS_MODES`,
:func:`normalize_mode`); the staleness study and the real parameter-server job name them without
it (:data:`PLAIN_PS_MODES`, :func:`normalize_ps_mode`). Both accept either spelling.

Placement (:class:`Placement`, parsed from ``"colocated"``, ``"dedicated"`` or ``"dedicated:N"``):

- ``colocated``: server shard j runs beside worker ``j * W // k`` (spread evenly over the
  workers and hence over the nodes), on that worker's GPU and NIC; a worker's own shard is local.
- ``dedicated:N``: the servers run on N extra nodes of the cluster that hold no worker (default one
  node); shard j sits on server node ``j mod N``, device ``(j // N) mod devices-per-node`` of it,
  so shards use distinct NICs where the node has several. :func:`simcore.paramserver.layout.load_ps_cluster`
  grows a cluster of one server type (a preset or a one-type spec file) by those N nodes; a cluster
  file that mixes server types must list them after the workers' nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from simcore.errors import TrainsimError

__all__ = [
    "DEFAULT_PS_STEPS",
    "DEFAULT_STALENESS_BOUND",
    "MODES",
    "PLACEMENTS",
    "PLAIN_PS_MODES",
    "PS_MODES",
    "ModeRules",
    "PSConfig",
    "Placement",
    "normalize_mode",
    "normalize_ps_mode",
    "parse_placement",
]


@dataclass(frozen=True, slots=True)
class ModeRules:
    """What a mode adds to the asynchronous worker loop."""

    name: str  # "ps-async": the what-if's strategy name
    barrier: bool  # ps-sync: push, wait for the shard's round, pull
    gate: bool  # ps-ssp: block when too far ahead of the slowest worker
    check: bool  # ps-mitigated: version check (and maybe re-pull + recompute) before pushing
    description: str

    @property
    def plain(self) -> str:
        """The name without the ``ps-`` prefix (``async``), as the staleness study writes it."""
        return self.name.removeprefix("ps-")


MODES: dict[str, ModeRules] = {
    "ps-sync": ModeRules("ps-sync", True, False, False, "parameter server, barrier every step"),
    "ps-async": ModeRules("ps-async", False, False, False, "parameter server, no barrier"),
    "ps-ssp": ModeRules("ps-ssp", False, True, False, "parameter server, stale-synchronous (bound s)"),
    "ps-mitigated": ModeRules(
        "ps-mitigated", False, False, True, "parameter server, async with version check + recompute past s"
    ),
}
PS_MODES = tuple(MODES)
PLAIN_PS_MODES = tuple(rules.plain for rules in MODES.values())
# dedicated-cpu: the shards run on the CPU sockets of the dedicated nodes (ps-lite/BytePS servers are
# CPU processes), their traffic crossing the host's NIC and PCIe into host memory.
PLACEMENTS = ("colocated", "dedicated", "dedicated-cpu")
# Ho et al. (2013) report SSP converging well for staleness bounds of a few clocks (their Fig. 4
# uses s = 3..10); 3 is the small end, where blocking still shows.
DEFAULT_STALENESS_BOUND = 3
DEFAULT_PS_STEPS = 8


def _rules(mode: str) -> ModeRules | None:
    name = str(mode).strip().lower()
    return MODES.get(name if name.startswith("ps-") else f"ps-{name}")


def normalize_mode(mode: str) -> str:
    """``ps-async`` from ``ps-async``, ``async`` or ``PS-Async``; a clear error otherwise."""
    rules = _rules(mode)
    if rules is None:
        raise TrainsimError(f"unknown parameter-server mode {mode!r}; allowed: {', '.join(PS_MODES)}")
    return rules.name


def normalize_ps_mode(mode: str) -> str:
    """The plain mode name (``sync``/``async``/``ssp``/``mitigated``); a ``ps-`` prefix is accepted."""
    rules = _rules(mode)
    if rules is None:
        raise TrainsimError(
            f"unknown parameter-server mode {mode!r}; allowed: {', '.join(PLAIN_PS_MODES)} (or with 'ps-' prefix)"
        )
    return rules.plain


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
    """One parameter-server run, or the settings a sweep shares (which sets ``mode`` and ``steps`` per run).

    ``shards`` server shards (None: one per worker node when colocated, one per device of the
    server nodes when dedicated). ``steps``: the run stops after ``steps * workers`` gradients are applied
    (for ps-sync, ``steps`` barrier rounds): an asynchronous "step" is one gradient per worker on
    average. ``staleness_bound`` is SSP's s and ps-mitigated's threshold. ``version_check_bytes``
    is the size of a version query and of its answer. ``layerwise``: workers push each part of the
    gradient as backward produces it, and each part is applied and pulled back as it arrives
    (MXNet's per-key kvstore, BytePS / P3, as deployed: :mod:`simcore.paramserver.pipeline`);
    False pushes the whole gradient after backward and waits for every pull (ps-lite's classic
    loop, and calibrate.train's parameter server).

    ``serial_server``: whether a shard's one thread also sends the replies, one at a time (None:
    True for the whole-gradient exchange, False for the layer-wise one). True is calibrate.train's
    server (``calibrate/train/param_server.py``, ``run_server``): one loop receives a push
    (``dist.recv``), applies it, and replies with a blocking ``dist.send`` (``_reply``) before it
    receives the next message; ps-sync's round replies to its members one after the other
    (``_receive_push``). The pushes themselves still arrive concurrently (the kernel's TCP stack
    receives into the socket buffers whatever the thread does). False is ps-lite's server
    (dmlc/ps-lite d7b844f, 2015-12: ``src/van.cc`` l. 87 a receiving thread, ``src/customer.cc`` l. 14/57 the customer thread that
    runs the request handle, replies handed to ``zmq_msg_send`` (van.cc l. 195/211) and sent by
    ZMQ's I/O thread): updates are applied one at a time, their replies go out concurrently.
    :mod:`simcore.paramserver.server` says what changes.
    """

    mode: str = "ps-async"
    shards: int | None = None
    placement: Placement = Placement()
    staleness_bound: int = DEFAULT_STALENESS_BOUND
    steps: int = DEFAULT_PS_STEPS
    version_check_bytes: int = 64
    layerwise: bool = True
    serial_server: bool | None = None

    @property
    def serial_replies(self) -> bool:
        """Whether each shard sends its replies one at a time from its one thread (see above)."""
        return (not self.layerwise) if self.serial_server is None else self.serial_server

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
