"""JSON form of calibration profiles: writing a :class:`~simcore.calibration.profile.CalibrationProfile`
as the ``trainsim-profile`` document and validating a parsed document back into one.

The format itself is described in :mod:`simcore.calibration.profile`; this module holds the public
entry points ``load_profile``, ``profile_from_json`` and ``profile_to_json``. Reading checks every
calibrated number against its physical range (:mod:`simcore.calibration.ranges`): finite, and
inside bounds whose reasons ``simcore/data/calibration_ranges.yaml`` gives.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from simcore.calibration.profile import (
    _BUSBW_FACTORS,
    FORMAT,
    OP_PHASES,
    SCOPES,
    VERSION,
    CalibrationProfile,
    ClusterDescription,
    CollectiveFit,
    ComputeCurve,
    FitQuality,
    ProfileError,
    ProtocolFit,
)
from simcore.calibration.ranges import physical_range
from simcore.inputs import read_bytes
from simcore.limits import MEASUREMENT_FILE_BYTES

__all__ = ["load_profile", "profile_from_json", "profile_to_json"]


def _quality_json(q: FitQuality | None) -> dict[str, Any] | None:
    if q is None:
        return None
    return {"points": q.points, "mape": q.mape, "r2": q.r2, "poor": q.poor}


def _collective_json(f: CollectiveFit) -> dict[str, Any]:
    entry: dict[str, Any] = {"op": f.op, "ranks": f.ranks, "scope": f.scope, "alpha_s": f.alpha_s,
                             "busbw_Bps": f.busbw_Bps}  # fmt: skip
    if f.quality is not None:
        entry["fit"] = _quality_json(f.quality)
    if f.protocols:
        simple = f.protocols.get("Simple")
        entry["protocols"] = {
            name: {"alpha_s": p.alpha_s, "busbw_Bps": p.busbw_Bps}
            | ({"efficiency": p.busbw_Bps / simple.busbw_Bps} if simple else {})
            for name, p in f.protocols.items()
        }
        entry["undetermined"] = list(f.undetermined)
    return entry


def profile_to_json(profile: CalibrationProfile) -> dict[str, Any]:
    """The profile as the JSON document :func:`profile_from_json` reads."""
    c = profile.cluster
    collectives = [_collective_json(profile.collectives[key]) for key in sorted(profile.collectives)]
    dtypes: dict[str, dict[str, Any]] = {}
    for dtype in sorted(profile.compute):
        curve = profile.compute[dtype]
        dtypes[dtype] = {"peak_flops": curve.peak_flops, "half_flops": curve.half_flops}
        if curve.quality is not None:
            dtypes[dtype]["fit"] = _quality_json(curve.quality)
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": profile.created,
        "cluster": {
            "backend": c.backend,
            "device_kind": c.device_kind,
            "device_name": c.device_name,
            "world_size": c.world_size,
            "ranks_per_node": c.ranks_per_node,
            "nodes": c.nodes,
            "hostnames": list(c.hostnames),
        },
        "collectives": collectives,
        **(
            {
                "collectives_after_compute": [
                    _collective_json(profile.after_compute[k]) for k in sorted(profile.after_compute)
                ]
            }
            if profile.after_compute
            else {}
        ),
        "compute": {
            "dtypes": dtypes,
            "memory_bandwidth_Bps": profile.memory_bandwidth_Bps,
            "comm_compute_slowdown": profile.comm_compute_slowdown,
            "threads": profile.threads,
            **(
                {"op_overhead_s": dict(sorted(profile.op_overhead_s.items()))}
                if profile.op_overhead_s
                else {}
            ),
        },
        "sources": list(profile.sources),
    }


class _Reader:
    """Typed access to one JSON object, with errors naming the file and the key path."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ProfileError(f"{where}: expected a JSON object, got {type(data).__name__}")
        self.data, self.where = data, where

    def _at(self, key: Any) -> str:
        """The key path of ``key`` in one line: a key with a line break or other control character
        (any JSON string may be a key) is written as its repr."""
        text = str(key)
        return f"{self.where}.{text if text.isprintable() else repr(text)}"

    def sub(self, key: str, default: Any = None) -> _Reader:
        value = self.data.get(key, default)
        if value is None:
            raise ProfileError(f"{self.where}: missing key {key!r}")
        return _Reader(value, f"{self._at(key)}")

    def finite(self, key: str) -> float:
        """A finite number (no physical range: fit statistics)."""
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProfileError(f"{self._at(key)}: expected a finite number, got {str(value)[:40]!r}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise ProfileError(f"{self._at(key)}: expected a finite number, got {str(value)[:40]!r}")
        return number

    def number(self, key: str, within: str) -> float:
        """A finite number inside the physical range called ``within``."""
        return physical_range(within).check(self.finite(key), f"{self._at(key)}")

    def optional(self, key: str, within: str) -> float | None:
        return None if self.data.get(key) is None else self.number(key, within)

    def integer(self, key: str, within: str = "ranks") -> int:
        value = self.data.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ProfileError(f"{self._at(key)}: expected a whole number, got {str(value)[:40]!r}")
        physical_range(within).check(float(max(min(value, 2**63), -(2**63))), f"{self._at(key)}")  # any size
        return value

    def text(self, key: str, allowed: tuple[str, ...] | None = None, default: str | None = None) -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str) or (allowed and value not in allowed):
            hint = f"; allowed: {', '.join(allowed)}" if allowed else ""
            raise ProfileError(f"{self._at(key)}: expected a string, got {value!r}{hint}")
        return value

    def quality(self) -> FitQuality | None:
        if "fit" not in self.data:
            return None
        q = self.sub("fit")
        points, mape, r2 = q.data.get("points"), q.finite("mape"), q.finite("r2")
        if isinstance(points, bool) or not isinstance(points, int) or points < 0:
            raise ProfileError(f"{q.where}.points: expected a whole number >= 0, got {str(points)[:40]!r}")
        if mape < 0 or r2 > 1:
            raise ProfileError(f"{q.where}: mape {mape!r} must be >= 0 and r2 {r2!r} at most 1")
        return FitQuality(points=points, mape=mape, r2=r2, poor=q.data.get("poor") is True)


def _cluster_from_json(r: _Reader) -> ClusterDescription:
    world, per_node, nodes = r.integer("world_size"), r.integer("ranks_per_node"), r.integer("nodes")
    if world != per_node * nodes:
        raise ProfileError(f"{r.where}: world_size {world} != ranks_per_node {per_node} x nodes {nodes}")
    hostnames = r.data.get("hostnames", [])
    if not isinstance(hostnames, list) or not all(isinstance(h, str) for h in hostnames):
        raise ProfileError(f"{r.where}.hostnames: expected a list of strings, got {hostnames!r}")
    return ClusterDescription(
        backend=r.text("backend"),
        device_kind=r.text("device_kind", ("gpu", "cpu")),
        device_name=r.text("device_name", default=""),
        world_size=world,
        ranks_per_node=per_node,
        nodes=nodes,
        hostnames=tuple(hostnames),
    )


def _collectives_from_json(
    entries: Any, where: str, name: str = "collectives"
) -> dict[tuple[str, int, str], CollectiveFit]:
    if not isinstance(entries, list):
        raise ProfileError(f"{where}.{name}: expected a list, got {type(entries).__name__}")
    fits: dict[tuple[str, int, str], CollectiveFit] = {}
    for i, entry in enumerate(entries):
        r = _Reader(entry, f"{where}.{name}[{i}]")
        fit = CollectiveFit(
            op=r.text("op", tuple(_BUSBW_FACTORS)),
            ranks=r.integer("ranks"),
            scope=r.text("scope", SCOPES),
            alpha_s=r.number("alpha_s", "latency_s"),
            busbw_Bps=r.number("busbw_Bps", "bandwidth_Bps"),
            quality=r.quality(),
            protocols=_protocols_from_json(r),
            undetermined=tuple(
                str(p) for p in r.data.get("undetermined", []) if str(p).split(" ")[0] in _PROTOCOLS
            ),
        )
        key = (fit.op, fit.ranks, fit.scope)
        if key in fits:
            raise ProfileError(f"{r.where}: a second fit for {fit.op} on {fit.ranks} ranks ({fit.scope})")
        fits[key] = fit
    return fits


_PROTOCOLS = ("LL", "LL128", "Simple")


def _protocols_from_json(r: _Reader) -> dict[str, ProtocolFit]:
    """The optional per-protocol lines of a collective fit (NCCL's LL, LL128, Simple)."""
    lines = r.sub("protocols", {})
    out = {}
    for name in sorted(lines.data):
        if name not in _PROTOCOLS:
            raise ProfileError(f"{lines.where}: unknown protocol {name!r}; allowed: {', '.join(_PROTOCOLS)}")
        line = lines.sub(name)
        out[name] = ProtocolFit(
            line.number("alpha_s", "latency_s"), line.number("busbw_Bps", "bandwidth_Bps")
        )
    return out


def profile_from_json(data: Any, where: str = "profile") -> CalibrationProfile:
    """Validate a parsed profile document; ProfileError naming the key that is wrong."""
    r = _Reader(data, where)
    if r.data.get("format") != FORMAT:
        raise ProfileError(
            f"{where}: not a trainsim profile (format {r.data.get('format')!r}, expected {FORMAT!r})"
        )
    if r.data.get("version") != VERSION:
        raise ProfileError(
            f"{where}: profile version {r.data.get('version')!r} is not supported; "
            f"this trainsim reads version {VERSION}"
        )
    compute = r.sub("compute", {})
    dtypes = compute.sub("dtypes", {})
    curves = {}
    for dtype in sorted(dtypes.data, key=str):
        d = dtypes.sub(dtype)
        curves[str(dtype)] = ComputeCurve(
            str(dtype),
            d.number("peak_flops", "peak_flops"),
            d.number("half_flops", "half_flops"),
            d.quality(),
        )
    sources = r.data.get("sources", [])
    overheads = compute.sub("op_overhead_s", {})
    op_overhead = {
        phase: overheads.number(phase, "op_overhead_s") for phase in OP_PHASES if phase in overheads.data
    }
    return CalibrationProfile(
        cluster=_cluster_from_json(r.sub("cluster")),
        collectives=_collectives_from_json(r.data.get("collectives", []), where),
        after_compute=_collectives_from_json(
            r.data.get("collectives_after_compute", []), where, "collectives_after_compute"
        ),
        compute=curves,
        memory_bandwidth_Bps=compute.optional("memory_bandwidth_Bps", "bandwidth_Bps"),
        comm_compute_slowdown=compute.optional("comm_compute_slowdown", "comm_compute_slowdown"),
        threads=None if compute.data.get("threads") is None else compute.integer("threads", "threads"),
        sources=tuple(str(s) for s in sources) if isinstance(sources, list) else (),
        created=str(r.data.get("created", "")),
        op_overhead_s=op_overhead,
    )


def load_profile(path: str | Path) -> CalibrationProfile:
    """Read and validate a profile written by ``calibrate.fit``; ProfileError naming what is wrong."""
    p = Path(path)
    if not p.exists():
        raise ProfileError(f"{p}: no such calibration profile")
    # a regular file of bounded size first: --calibration /dev/zero or a FIFO would never end
    raw = read_bytes(p, "a calibration profile (JSON, from calibrate.fit)", MEASUREMENT_FILE_BYTES)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ProfileError(
            f"{p}: not a JSON calibration profile ({str(exc) or 'nested too deeply'})"
        ) from None
    return profile_from_json(data, str(p))
