"""NCCL's user switches, as trainsim honours them: which algorithms and protocols may run.

``NcclOptions.from_env(os.environ)`` reads the environment variables NCCL reads (names and value
syntax from NCCL's environment-variable documentation):

- ``NCCL_ALGO``: comma-separated algorithms to allow, or ``^list`` to exclude them (case-insensitive:
  ``Ring``, ``Tree``, ``CollNetDirect``, ``CollNetChain``, ``CollNet`` (both), ``NVLS``,
  ``NVLSTree``, ``PAT``);
- ``NCCL_PROTO``: the same for protocols (``LL``, ``LL128``, ``Simple``);
- ``NCCL_COLLNET_ENABLE``: ``1`` enables CollNet (SHARP) where the fabric's switches reduce; off
  unless set here or in the cluster spec (``fabric.collnet: true``), as stock NCCL;
- ``NCCL_NVLS_ENABLE``: ``0`` disables NVLink SHARP (NVLS and NVLS-tree);
- ``NCCL_BUFFSIZE``, ``NCCL_NVLS_CHUNKSIZE``, ``NCCL_NVLSTREE_MAX_CHUNKSIZE``: the Simple
  protocol's buffer (8 steps of it make a chunk) and NVLS's chunk sizes, in bytes (pipeline fill,
  :mod:`simcore.collectives.pipeline`);
- ``OFI_NCCL_NET_LATENCY``: the inter-node latency (microseconds) AWS's aws-ofi-nccl plugin reports
  to NCCL as its network device's ``latency`` property (75 us on p4d, p4de and p5: the plugin's
  ``platform_data_map`` in src/platform-aws.cpp). NCCL's tuner adds it to every node-crossing hop
  (``graph->latencyInter``, src/graph/search.cc; twice for Simple, src/graph/tuning.cc) when it
  picks an algorithm and protocol; it steers the choice only and is not a time anything takes
  (:func:`simcore.collectives.cost.tuner_time_s`).

A cluster spec's fabric may carry the environment its network plugin sets (``fabric.nccl_env``,
e.g. AWS's aws-ofi-nccl on EFA); the user's own environment wins over it (:meth:`NcclOptions.over`).

A bad value is a :class:`~simcore.errors.TrainsimError` naming the variable and what it allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from simcore.collectives.tuning import PROTOCOLS
from simcore.errors import TrainsimError

__all__ = ["NCCL_ALGORITHMS", "NcclOptions", "algorithm_name", "parse_algorithms", "parse_protocols"]

# NCCL's algorithms (trainsim names); the others in the registry (direct, hierarchical, ...) are
# trainsim's own and run only when pinned.
NCCL_ALGORITHMS = ("ring", "tree", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat")

_ALIASES: dict[str, tuple[str, ...]] = {
    "ring": ("ring",),
    "tree": ("tree",),
    "collnetdirect": ("collnet_direct",),
    "collnet_direct": ("collnet_direct",),
    "collnetchain": ("collnet_chain",),
    "collnet_chain": ("collnet_chain",),
    "collnet": ("collnet_direct", "collnet_chain"),
    "sharp": ("collnet_direct",),
    "nvls": ("nvls",),
    "nvlstree": ("nvls_tree",),
    "nvls_tree": ("nvls_tree",),
    "pat": ("pat",),
}
_PROTO_NAMES = {p.lower(): p for p in PROTOCOLS}


def algorithm_name(name: str) -> str | None:
    """trainsim's name for an algorithm given as NCCL spells it (``NVLSTree`` -> ``nvls_tree``)."""
    names = _ALIASES.get(name.strip().lower())
    return names[0] if names is not None and len(names) == 1 else None


def _parse_list(value: str, what: str, known: Mapping[str, tuple[str, ...]], allowed: str) -> frozenset[str]:
    text = value.strip()
    if ":" in text or ";" in text:
        raise TrainsimError(
            f"{what}={value!r}: per-collective lists (op:list;...) are not supported; give one list"
        )
    negate = text.startswith("^")
    items = [i.strip() for i in text.lstrip("^").split(",") if i.strip()]
    if not items:
        raise TrainsimError(f"{what}={value!r} names nothing; allowed: {allowed} (or ^list to exclude)")
    chosen: set[str] = set()
    for item in items:
        names = known.get(item.lower())
        if names is None:
            raise TrainsimError(
                f"{what}={value!r}: unknown {item!r}; allowed: {allowed} (or ^list to exclude)"
            )
        chosen.update(names)
    every = {n for names in known.values() for n in names}
    return frozenset(every - chosen if negate else chosen)


def parse_algorithms(value: str, what: str = "NCCL_ALGO") -> frozenset[str]:
    """The algorithms an ``NCCL_ALGO``-style list allows."""
    allowed = "Ring, Tree, CollNetDirect, CollNetChain, CollNet, NVLS, NVLSTree, PAT"
    return _parse_list(value, what, _ALIASES, allowed)


def parse_protocols(value: str, what: str = "NCCL_PROTO") -> frozenset[str]:
    """The protocols an ``NCCL_PROTO``-style list allows."""
    known = {k: (v,) for k, v in _PROTO_NAMES.items()}
    return _parse_list(value, what, known, ", ".join(PROTOCOLS))


def _switch(env: Mapping[str, str], name: str) -> bool | None:
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    text = value.strip()
    if text not in ("0", "1", "2"):
        raise TrainsimError(f"{name}={value!r} is not allowed; use 0 (off) or 1 (on)")
    return text != "0"


_SIZES = {
    "NCCL_BUFFSIZE": "buffsize",
    "NCCL_NVLS_CHUNKSIZE": "nvls_chunk",
    "NCCL_NVLSTREE_MAX_CHUNKSIZE": "nvls_tree_max_chunk",
}


def _size(env: Mapping[str, str], name: str) -> int | None:
    value = env.get(name)
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    if not text.isdigit() or not 4096 <= int(text) <= 2**31:
        raise TrainsimError(f"{name}={value!r} is not allowed; give a byte count from 4096 to 2147483648")
    return int(text)


_MAX_NET_LATENCY_US = 10_000.0


def _latency_us(env: Mapping[str, str], name: str) -> float | None:
    value = env.get(name)
    if value is None or str(value).strip() == "":
        return None
    try:
        latency = float(str(value).strip())
    except ValueError:
        latency = -1.0
    if not 0.0 <= latency <= _MAX_NET_LATENCY_US:  # also rejects nan
        raise TrainsimError(
            f"{name}={value!r} is not allowed; give microseconds from 0 to {_MAX_NET_LATENCY_US:g}"
        )
    return latency


@dataclass(frozen=True, slots=True)
class NcclOptions:
    """Which of NCCL's algorithms and protocols may run (None: NCCL's defaults)."""

    algorithms: frozenset[str] | None = None
    protocols: frozenset[str] | None = None
    collnet: bool | None = None  # None: as the cluster spec says (off unless it enables CollNet)
    nvls: bool = True
    buffsize: int | None = None  # NCCL_BUFFSIZE (None: NCCL's default, simcore/data/nccl.yaml)
    nvls_chunk: int | None = None  # NCCL_NVLS_CHUNKSIZE
    nvls_tree_max_chunk: int | None = None  # NCCL_NVLSTREE_MAX_CHUNKSIZE
    plugin_net_latency_us: float | None = None  # OFI_NCCL_NET_LATENCY (None: the plugin reports none)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> NcclOptions:
        """The options NCCL would read from ``env`` (``os.environ``); TrainsimError on a bad value."""
        algo, proto = env.get("NCCL_ALGO"), env.get("NCCL_PROTO")
        nvls = _switch(env, "NCCL_NVLS_ENABLE")
        return cls(
            algorithms=parse_algorithms(algo) if algo and algo.strip() else None,
            protocols=parse_protocols(proto) if proto and proto.strip() else None,
            collnet=_switch(env, "NCCL_COLLNET_ENABLE"),
            nvls=True if nvls is None else nvls,
            **{field: _size(env, name) for name, field in _SIZES.items()},
            plugin_net_latency_us=_latency_us(env, "OFI_NCCL_NET_LATENCY"),
        )

    def over(self, base: NcclOptions) -> NcclOptions:
        """These options where set, ``base``'s (a platform's environment) where not."""
        return NcclOptions(
            algorithms=self.algorithms if self.algorithms is not None else base.algorithms,
            protocols=self.protocols if self.protocols is not None else base.protocols,
            collnet=self.collnet if self.collnet is not None else base.collnet,
            nvls=self.nvls and base.nvls,
            buffsize=self.buffsize or base.buffsize,
            nvls_chunk=self.nvls_chunk or base.nvls_chunk,
            nvls_tree_max_chunk=self.nvls_tree_max_chunk or base.nvls_tree_max_chunk,
            plugin_net_latency_us=(
                self.plugin_net_latency_us
                if self.plugin_net_latency_us is not None
                else base.plugin_net_latency_us
            ),
        )

    def allows_algorithm(self, name: str) -> bool:
        return self.algorithms is None or name not in NCCL_ALGORITHMS or name in self.algorithms

    def allows_protocol(self, name: str) -> bool:
        return self.protocols is None or name in self.protocols


DEFAULT_OPTIONS = NcclOptions()
