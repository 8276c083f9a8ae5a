"""The claims report of ``python -m experiments.reproduce_paper`` as text: table, markdown or JSON.

:func:`render` turns a list of :class:`experiments.reproduce_paper.claims.ClaimResult` and the
:class:`experiments.reproduce_paper.claims.PaperSetting` they were simulated in into one of :data:`FORMATS`
(re-exported by :mod:`experiments.reproduce_paper`, which runs the claims).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict

from experiments.reproduce_paper.claims import (
    ARTICLE_TITLE,
    CLAIMS,
    STUDY,
    ClaimResult,
    PaperSetting,
    describe_rule,
)

__all__ = ["FORMATS", "SCHEMA", "SUFFIX", "render"]

SCHEMA = "trainsim-reproduce-paper"
FORMATS = ("table", "json", "markdown")
SUFFIX = {"table": "txt", "json": "json", "markdown": "md"}


def _header(setting: PaperSetting, quick: bool) -> list[str]:
    return [
        f"Claims of the seed study and the hardware article vs trainsim ({'quick' if quick else 'full'} setting)",
        f"Sources: {STUDY}; the article {ARTICLE_TITLE}.",
        f"Paper setting: {setting.describe()}.",
        f"PS conditions: {', '.join(setting.ps_conditions)} (jitter = lognormal sigma {setting.jitter_sigma:g}); "
        f"article comparisons: {setting.article_model}, {setting.gpus} GPUs.",
    ]


def _sections(r: ClaimResult) -> list[tuple[str, str]]:
    claim = CLAIMS[r.claim_id]
    return [
        ("source", f'{claim.source}: "{claim.statement}"'),
        ("reading", claim.reading),
        ("rule", describe_rule(claim)),
        ("predicted", r.predicted),
    ]


def _assumptions(r: ClaimResult) -> tuple[str, ...]:
    return (*CLAIMS[r.claim_id].assumptions, *r.assumptions)


def _table(results: Sequence[ClaimResult], setting: PaperSetting, quick: bool) -> str:
    lines = [
        *_header(setting, quick),
        "",
        f"{'claim':24s} {'source states':16s} {'verdict':11s} simulator predicts",
    ]
    lines.append("-" * 110)
    lines += [
        f"{r.claim_id:24s} {CLAIMS[r.claim_id].claimed:16s} {r.verdict:11s} {r.predicted}" for r in results
    ]
    for r in results:
        lines += ["", f"[{r.claim_id}] {r.verdict.upper()}", *(f"  {k}: {v}" for k, v in _sections(r))]
        lines += [*(f"    {d}" for d in r.details), *(f"  assumes: {a}" for a in _assumptions(r))]
    return "\n".join(lines) + "\n"


def _markdown(results: Sequence[ClaimResult], setting: PaperSetting, quick: bool) -> str:
    head = _header(setting, quick)
    lines = [
        f"# {head[0]}",
        "",
        *head[1:],
        "",
        "| claim | source states | verdict | simulator predicts |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r.claim_id} | {CLAIMS[r.claim_id].claimed} | **{r.verdict}** | {r.predicted} |" for r in results
    ]
    for r in results:
        lines += [
            "",
            f"## {r.claim_id}: {r.verdict}",
            "",
            *(f"- {k.capitalize()}: {v}" for k, v in _sections(r)),
        ]
        lines += [*(f"  - {d}" for d in r.details), *(f"- Assumes: {a}" for a in _assumptions(r))]
    return "\n".join(lines) + "\n"


def render(results: Sequence[ClaimResult], setting: PaperSetting, fmt: str, *, quick: bool = False) -> str:
    """The report as ``table``, ``json`` or ``markdown`` text."""
    if fmt == "json":
        setting_record = asdict(setting)
        setting_record["fabric_presets"] = {
            fabric: list(presets) for fabric, presets in setting.fabric_presets
        }
        document = {
            "schema": SCHEMA,
            "version": 1,
            "quick": quick,
            "setting": setting_record,
            "claims": [r.to_record() for r in results],
        }
        return json.dumps(document, indent=2) + "\n"
    if fmt == "markdown":
        return _markdown(results, setting, quick)
    return _table(results, setting, quick)
