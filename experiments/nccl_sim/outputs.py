"""``--out DIR`` of the simulated nccl-tests: ``nccl_sim.json`` (the ``--format json`` document plus
``alternatives``: the same sizes with each (algorithm, protocol) the topology allows pinned, and
``measured``: the rows of ``--compare LOG``) and ``report.html`` rendered from it
(:mod:`experiments.report_html.nccl`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from calibrate.nccl_tests.parser import parse_file
from experiments.report_html.nccl import render_nccl
from experiments.report_html.write import write_json, write_report
from simcore.errors import TrainsimError
from simcore.output import output_set

__all__ = ["MAX_ALTERNATIVE_WORK", "alternatives", "measured_rows", "write_outputs"]

# Sizes x ranks x combinations simulated for the pinned series: beyond this (many ranks, a long
# ladder) the page shows NCCL's choice only and says so. 8 ranks x 28 sizes x 9 pairs took 0.6 s.
MAX_ALTERNATIVE_WORK = 20_000

Simulate = Callable[[str, str], list[dict[str, Any]]]


def measured_rows(path: str, op: str) -> dict[str, Any]:
    """The out-of-place rows of ``op`` in a real nccl-tests log (text or ``-J`` JSON); one error line
    when the log holds none."""
    rows = parse_file(path)
    mine = [r for r in rows if r.get("op") == op and not r.get("in_place")]
    if not mine:
        found = sorted({str(r.get("op")) for r in rows}) or ["no rows"]
        raise TrainsimError(f"--compare {path}: no out-of-place {op} rows (it holds: {', '.join(found)})")
    keep = ("size_bytes", "time_us_mean", "algbw_GBps", "busbw_GBps", "ranks", "device")
    return {"source": Path(path).name, "rows": [{k: r.get(k) for k in keep} for r in mine]}


def alternatives(
    algorithms: Sequence[str], protocols: Sequence[str], simulate: Simulate, work: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """Each (algorithm, protocol) pinned, as ``{"algorithm", "protocol", "results"}``; the ones the
    topology refuses are named in the notes returned beside them."""
    if work * len(algorithms) * len(protocols) > MAX_ALTERNATIVE_WORK:
        return [], ["Pinned algorithm/protocol series left out: too many ranks x sizes to simulate each."]
    found: list[dict[str, Any]] = []
    refused: dict[str, list[str]] = {}  # reason -> the pairs it refuses
    for algorithm in algorithms:
        for protocol in protocols:
            try:
                found.append(
                    {"algorithm": algorithm, "protocol": protocol, "results": simulate(algorithm, protocol)}
                )
            except TrainsimError as exc:
                refused.setdefault(str(exc), []).append(f"{algorithm}/{protocol}")
    notes = [f"Not drawn: {', '.join(pairs)} ({reason})." for reason, pairs in refused.items()]
    return found, notes


def write_outputs(out: Path, document: Mapping[str, Any], command: str) -> list[Path]:
    """Write ``nccl_sim.json`` and ``report.html`` (from that same document) under ``out``: both or,
    when one fails, neither (:func:`simcore.output.output_set`)."""
    with output_set():
        return [
            write_json(out / "nccl_sim.json", document),
            write_report(out, render_nccl(document, command)),
        ]
