"""experiments.what_if --power-limit: a cap below the default slows the step, is named in the header
and the JSON, and a limit the device cannot take is one error line with exit 2."""

from __future__ import annotations

import json

import pytest

from experiments.what_if.cli import main

SMALL = [
    "--model", "llama2-7b", "--cluster", "hgx-h100", "--gpus", "8", "--seq-len", "1024",
    "--global-batch", "16", "--micro-batch", "1", "--strategies", "ddp", "--quiet",
]  # fmt: skip


def _document(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main([*SMALL, *argv, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    return document if isinstance(document, dict) else {"records": document}


def _step_s(document: dict[str, object]) -> float:
    records = document["records"]
    assert isinstance(records, list)
    return float(records[-1]["step_time_s"])


def test_a_500_w_cap_slows_the_step_and_is_recorded(capsys: pytest.CaptureFixture[str]) -> None:
    default = _document([], capsys)
    capped = _document(["--power-limit", "500"], capsys)
    assert "power_limit_w" not in default and capped["power_limit_w"] == 500.0
    # compute at (430/630)^(1/3) = 0.88 of the clock: the step is slower, by at most 1/0.88
    assert _step_s(default) < _step_s(capped) <= _step_s(default) / 0.88 + 1e-9
    assert _step_s(_document(["--power-limit", "700"], capsys)) == pytest.approx(_step_s(default))
    assert main([*SMALL, "--power-limit", "500"]) == 0
    assert "power limit: 500 W per GPU" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--power-limit", "50"], "--power-limit 50 W is outside h100-sxm's settable range 200..700 W"),
        (["--power-limit", "nan"], "--power-limit"),
        (["--cluster", "dgx-a100", "--power-limit", "300"], "'a100-sxm-80gb' has no power data"),
        (["--cluster", "hgx-h100", "--power-limit", "200"], None),
    ],
)
def test_a_limit_the_device_cannot_take_is_one_line(
    argv: list[str], message: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    if message is None:  # the lowest settable limit runs
        assert main([*SMALL, *argv, "--format", "json"]) == 0
        return
    with pytest.raises(SystemExit) as exit_info:
        main([*SMALL, *argv])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
