"""Regenerate the README's screenshots of the four report pages (``docs/report-*.png``).

    python -m tests.experiments.report_html.screenshots docs/

Runs each command with ``--out`` into a temporary folder (the validate_published page is rendered
from the committed full comparison instead: the full run takes minutes), opens the page in headless
Chromium at 1280 px and keeps the top of it as a 256-colour PNG (a tenth of the size, same look).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from experiments.nccl_sim.cli import main as nccl_main
from experiments.plan.cli import main as plan_main
from experiments.report_html.published import render_published
from experiments.report_html.write import write_report
from experiments.what_if.cli import main as whatif_main
from tests.experiments.report_html.browser import screenshot
from tests.experiments.report_html.docs import NCCL_LOG, PUBLISHED

COMMANDS = {
    "what-if": (whatif_main, ["--gpus", "16", "--quiet"], 1500),
    "plan": (plan_main, ["--model", "gpt2-xl", "--cluster", "dgx-a100", "--gpus", "8,16,32", "--global-batch",
                         "512", "--price-per-gpu-hour", "2", "--train-tokens", "1B", "--max-tp", "1", "--quiet"], 1300),
    "nccl-sim": (nccl_main, ["--gpus", "8", "-b", "8", "-e", "1G", "-f", "2", "--compare", NCCL_LOG.name], 1100),
}  # fmt: skip


def _small_png(png: Path) -> None:
    from PIL import Image  # Pillow comes with matplotlib

    with Image.open(png) as image:
        image.convert("RGB").quantize(colors=256).save(png, optimize=True)


def main(argv: list[str]) -> int:
    target = Path(argv[0] if argv else "docs").resolve()
    target.mkdir(parents=True, exist_ok=True)
    here = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="trainsim-shots-") as tmp:
        # Run inside the temporary folder with relative paths: the command each page shows names
        # no folder of this machine.
        shutil.copy(NCCL_LOG, Path(tmp) / NCCL_LOG.name)
        os.chdir(tmp)
        pages = {}
        try:
            for name, (command, args, height) in COMMANDS.items():
                command([*args, "--out", name])
                pages[name] = (Path(tmp) / name / "report.html", height)
        finally:
            os.chdir(here)
        doc = json.loads(PUBLISHED.read_text(encoding="utf-8"))
        pages["validate-published"] = (
            write_report(Path(tmp) / "published", render_published(doc, doc["provenance"]["command"])),
            1400,
        )
        for name, (page, height) in pages.items():
            png = screenshot(page, target / f"report-{name}.png", width=1280, height=height)
            _small_png(png)
            print(f"wrote {png} ({png.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
