"""``plan --calibration``: a profile is checked against the cluster exactly as the what-if checks it
(:func:`simcore.calibration.compat.check_profile_for`), before the search (issue 23: a CPU profile
was accepted for an A100 cluster and priced steps at 1,100 s)."""

from __future__ import annotations

from experiments.plan.cli import main as plan_main
from experiments.what_if.cli import main as what_if_main
from tests.fuzzing import run_cli
from tests.paths import REPO

CPU_PROFILE = REPO / "experiments" / "results" / "validation" / "profile.json"  # measured on 2 CPU ranks


def test_the_plan_refuses_a_profile_of_other_devices_with_the_what_ifs_line() -> None:
    common = ["--cluster", "dgx-a100", "--gpus", "8", "--calibration", str(CPU_PROFILE), "--quiet"]
    plan = run_cli(plan_main, [*common, "--model", "gpt2-small"], seconds=60)
    what_if = run_cli(what_if_main, [*common, "--model", "gpt2-small", "--strategies", "ddp"], seconds=60)
    assert plan[0] == what_if[0] == 2
    assert plan[2].strip() == what_if[2].strip()
    assert plan[2].startswith("error: calibration profile (measured on 2 cpu ranks) does not fit topology")
