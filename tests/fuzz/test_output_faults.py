"""Fault kinds at the output and input edges: every one ends in one line (or a correct answer).

Outputs: a full disk (a small tmpfs, when this user may mount one), a read-only file system, a
dangling symlink, a standard output on ``/dev/full`` or closed early, a second run on a locked
``--out``: one ``error:`` line naming the path, exit 2, nothing partial left. Inputs: a FIFO,
``/dev/zero``, a folder and a huge file where a log or profile is meant: one line, at once.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from calibrate.fit.cli import main as fit_main
from calibrate.nccl_tests.parser import main as nccl_tests_main
from experiments.plan.cli import main as plan_main
from experiments.reproduce_paper.cli import main as reproduce_main
from simcore.errors import cli_entry
from simcore.output import OutLock
from tests.fuzzing import check_cli_outcome, run_cli
from tests.paths import REPO, TESTS
from topologies.show import main as show_main

LOG = TESTS / "data" / "nccl" / "all_reduce_perf_8xa100.txt"


def _error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    return lines[0]


def _refused(main: object, argv: list[str], *needles: str) -> str:
    code, out, err = run_cli(main, argv, seconds=30)  # type: ignore[arg-type]
    check_cli_outcome(argv, code, out, err)
    assert code == 2, (argv, out, err)
    line = _error(err)
    for needle in needles:
        assert needle in line, line
    return line


@contextlib.contextmanager
def _tmpfs(folder: Path, options: str) -> Iterator[Path]:
    """A tmpfs at ``folder`` (root only; skips where mounting is not allowed)."""
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], capture_output=True,
                          check=False)  # fmt: skip
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


# --- outputs -------------------------------------------------------------------------------------


def test_a_full_disk_is_one_line_and_leaves_no_partial_png(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "full", "size=32k") as full:
        png = full / "graph.png"  # the drawing is ~127 kB
        line = _refused(show_main, ["dgx-a100", "--png", str(png)], str(png), "no space left")
        assert list(full.iterdir()) == [], line  # no 0-byte graph.png, no temporary


def test_a_read_only_file_system_is_one_line(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        _refused(show_main, ["dgx-a100", "--png", str(ro / "g.png")], "read-only")
        _refused(reproduce_main, ["--quick", "--quiet", "--out", str(ro / "run")], str(ro))


def test_a_dangling_symlink_is_one_line_and_kept(tmp_path: Path) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "gone")
    _refused(reproduce_main, ["--quick", "--quiet", "--out", str(link)], "symlink", "does not exist")
    _refused(show_main, ["dgx-a100", "--png", str(link)], "symlink", "does not exist")
    assert link.is_symlink() and not (tmp_path / "gone").exists()


def test_png_takes_exactly_the_name_given(tmp_path: Path) -> None:
    _refused(show_main, ["dgx-a100", "--png", str(tmp_path / "x.txt")], ".png")
    target = tmp_path / "new" / "plot"  # no suffix, in a folder that does not exist yet
    code, out, err = run_cli(show_main, ["dgx-a100", "--png", str(target)])
    assert code == 0, err
    assert out.splitlines()[-1] == f"wrote {target}"
    assert target.read_bytes().startswith(b"\x89PNG") and not target.with_suffix(".png").exists()


def test_a_second_run_on_a_locked_out_is_refused_naming_the_holder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys,time; from simcore.output import OutLock; OutLock(sys.argv[1]).acquire();"
         " print('held', flush=True); time.sleep(60)", str(out)],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        _refused(reproduce_main, ["--quick", "--quiet", "--out", str(out), "--force"], f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_released_when_the_command_ends(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _refused(reproduce_main, ["--quick", "--quiet", "--out", str(out), "--format", "nope"], "--format")
    assert not out.exists()  # refused before anything ran: nothing made, nothing locked
    with OutLock(out):
        pass


def _stdout_that_fails(number: int) -> io.TextIOBase:
    class Failing(io.TextIOBase):
        def write(self, text: str) -> int:
            raise OSError(number, os.strerror(number))

    return Failing()


@pytest.mark.parametrize(("number", "status"), [(errno.ENOSPC, 2), (errno.EPIPE, 0)])
def test_a_standard_output_that_cannot_be_written_is_handled_once(
    number: int, status: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    @cli_entry
    def main() -> int:
        print("a table")
        return 0

    monkeypatch.setattr(sys, "stdout", _stdout_that_fails(number))
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == status
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err == ("error: cannot write standard output: No space left on device\n" if status else "")


@pytest.mark.parametrize("shell", ["> /dev/full", "| head -c 1 > /dev/null"])
def test_standard_output_faults_in_a_real_process(shell: str) -> None:
    done = subprocess.run(f"{sys.executable} -m topologies.show dgx-a100 {shell}", shell=True, cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    if "full" in shell:
        assert (
            done.returncode == 2
            and done.stderr == "error: cannot write standard output: No space left on device\n"
        )


# --- inputs --------------------------------------------------------------------------------------


def test_a_fifo_device_or_folder_as_a_log_or_profile_is_one_line_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "log.txt"
    os.mkfifo(fifo)
    for bad in (str(fifo), "/dev/zero", str(tmp_path)):
        _refused(nccl_tests_main, [bad, "-o", str(tmp_path / "rows.jsonl")], bad)
        _refused(fit_main, [bad, "-o", str(tmp_path / "p.json")], bad)
    for bad in (str(fifo), "/dev/zero"):
        _refused(plan_main, ["--count", "--model", "gpt2-small", "--gpus", "8", "--calibration", bad], bad)
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "rows.jsonl").exists()


def test_the_same_log_twice_is_read_once_with_a_note(tmp_path: Path) -> None:
    copy = tmp_path / "copy.txt"
    copy.write_bytes(LOG.read_bytes())
    out = tmp_path / "rows.jsonl"
    code, stdout, err = run_cli(nccl_tests_main, [str(LOG), str(copy), str(LOG), "-o", str(out)])
    assert code == 0, err
    assert err.count("note:") == 2 and "read once" in err
    assert stdout.startswith("62 rows from 1 capture(s)")


def _huge(path: Path, size: int) -> Path:
    with path.open("wb") as handle:  # sparse: its size is real, its blocks are not written
        handle.truncate(size)
    return path


def test_a_huge_log_is_refused_from_its_size_before_it_is_read(tmp_path: Path) -> None:
    log = _huge(tmp_path / "all_reduce_perf.txt", 100 * 2**20)
    line = _refused(
        fit_main, [str(log), "-o", str(tmp_path / "p.json")], "at most 67,108,864", "TRAINSIM_MAX_INPUT_BYTES"
    )
    assert "104,857,600" in line
    _refused(nccl_tests_main, [str(log), "-o", str(tmp_path / "rows.jsonl")], "104,857,600")


@pytest.mark.slow
def test_a_100_mb_real_log_neither_hangs_nor_eats_memory(tmp_path: Path) -> None:
    """A real 100 MB nccl-tests log, refused at the default bound in well under a second; with the
    bound lifted, fitted in bounded time and memory (the protocol search is linear in rows)."""
    text = LOG.read_text()
    log = tmp_path / "all_reduce_perf.txt"
    with log.open("w") as handle:
        while handle.tell() < 100 * 2**20:
            handle.write(text * 64)
    probe = ("import resource, sys, time; from calibrate.fit.cli import main; t = time.process_time(); "
             "code = main(sys.argv[1:]); print(time.process_time() - t, "
             "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")  # fmt: skip
    refused = subprocess.run([sys.executable, "-c", probe, str(log), "-o", str(tmp_path / "p.json")], cwd=REPO,
                             capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert refused.returncode == 2 and "at most" in refused.stderr, refused.stderr
    small = tmp_path / "all_reduce_perf_8k.txt"
    small.write_text(text * 256)  # ~8,000 rows of one collective: the size that exhausted 8 GB
    fitted = subprocess.run([sys.executable, "-c", probe, str(small), "-o", str(tmp_path / "p.json")], cwd=REPO,
                            capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
    assert fitted.returncode == 0, fitted.stderr
    cpu_s, max_rss_kb = (float(x) for x in fitted.stdout.split()[-2:])
    assert cpu_s < 60 and max_rss_kb < 1_000_000, fitted.stdout


@pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="needs /dev/full")
def test_a_png_on_a_full_device_is_one_line_and_the_device_stays_a_device() -> None:
    _refused(show_main, ["dgx-a100", "--png", "/dev/full"], "/dev/full", "no space left")
    assert Path("/dev/full").is_char_device()  # not replaced by a renamed temporary file


def test_a_png_on_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "g.png"
    os.mkfifo(fifo)
    _refused(show_main, ["dgx-a100", "--png", str(fifo)], str(fifo), "not a regular file")
