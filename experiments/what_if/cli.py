"""The main job: which data-parallel strategy for this model on these clusters, and why.

``python -m experiments.what_if`` in full: :mod:`experiments.what_if.plain` (the what-if itself,
documented there) plus ``--from`` (a framework's config read into flags) and ``--out`` (plots, the
staleness histogram, a Chrome trace and ``report.html``).

The split is for start-up time: the framework readers, the plots and the page are imported only by
this module, so a plain run (``python -m experiments.what_if --gpus 16``, dispatched to
:mod:`~experiments.what_if.plain` by :mod:`experiments.console` when
:func:`~experiments.what_if.plain.handles` says so) does not pay for them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.common.frameworks.wiring import expand_from, framework_workload
from experiments.common.progress import bar
from experiments.report_html.page import command_line
from experiments.report_html.whatif import render_whatif, whatif_document
from experiments.report_html.write import write_report
from experiments.what_if.plain import (
    MAX_PS_SECONDS,
    NOTE_PS_SECONDS,
    PS_GROWTH_EXPONENT,
    PS_RECOMPUTE_SECONDS_PER_STEP_AT_64,
    PS_SECONDS_PER_STEP_AT_64,
    Extras,
    Report,
    build_parser,
    format_table,
    micro_steps,
    ps_seconds,
    run,
)
from experiments.what_if.plots import plot_staleness, plot_what_if, write_step_trace
from simcore.errors import cli_entry
from simcore.output import output_set
from simcore.whatif.sweep import WhatIfResult

__all__ = [
    "MAX_PS_SECONDS",
    "NOTE_PS_SECONDS",
    "PS_GROWTH_EXPONENT",
    "PS_RECOMPUTE_SECONDS_PER_STEP_AT_64",
    "PS_SECONDS_PER_STEP_AT_64",
    "build_parser",
    "format_table",
    "main",
    "micro_steps",
    "ps_seconds",
]


@cli_entry
def main(argv: list[str] | None = None) -> int:
    expanded, framework = expand_from(build_parser(), argv, "what_if")
    # the page names the command as typed (python -m) or as called (a list: after --from's expansion)
    command = command_line("python -m experiments.what_if", sys.argv[1:] if argv is None else expanded)

    def write_out(result: WhatIfResult, out: Path, args: argparse.Namespace, report: Report) -> None:
        records, recommendations, extra, header = report
        _write_outputs(result, out, args.quiet)
        doc = whatif_document(result, records, recommendations, extra, header)  # the page: the JSON's records
        print(f"wrote {write_report(out, render_whatif(doc, command))}", file=sys.stderr)

    return run(expanded, Extras(framework, framework_workload, write_out))


def _write_outputs(result: WhatIfResult, out: Path, quiet: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # all of them or, when one fails (a full disk), none made new
    with output_set(), bar(3, "plots", quiet=quiet, unit="file") as progress:
        written = plot_what_if(result.reports, out)
        progress.update(1)
        if result.ps_results:
            written.append(plot_staleness(list(result.ps_results.values()), out / "staleness.png"))
        progress.update(1)
        trace, traced = write_step_trace(result, out / "step_trace.json")
        progress.update(1)
    for path in written:
        print(f"wrote {path}", file=sys.stderr)
    print(f"wrote {trace}: {traced}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
