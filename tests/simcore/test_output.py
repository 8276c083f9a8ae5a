"""The output layer: whole files or none, one line per failure, one run per --out folder."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simcore.errors import TrainsimError
from simcore.output import (
    LOCK_NAME,
    OutLock,
    atomic_path,
    output_set,
    save_figure,
    write_error,
    write_json_atomic,
    write_text_atomic,
)


def test_write_text_atomic_writes_exactly_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "plan.json"
    assert write_text_atomic(target, "héllo\n") == target
    assert target.read_bytes() == "héllo\n".encode()
    assert sorted(p.name for p in target.parent.iterdir()) == ["plan.json"]


def test_write_json_atomic_round_trips(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "a.json", {"x": 1})
    assert (tmp_path / "a.json").read_text() == '{\n  "x": 1\n}\n'


def test_a_failed_writer_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "throughput.png"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the plotting library failed")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["throughput.png"]


def test_an_oserror_while_writing_is_one_line_naming_the_path(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    full = r"^cannot write .*plan\.json: no space left on the device$"
    with pytest.raises(TrainsimError, match=full), atomic_path(target):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_write_error_words() -> None:
    assert str(write_error("x", OSError(errno.EROFS, "x"))) == "cannot write x: the file system is read-only"
    assert str(write_error("x", OSError(errno.EACCES, "x"))) == "cannot write x: permission denied"


def test_a_dangling_symlink_is_refused_and_kept(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "missing" / "target.json")
    with pytest.raises(TrainsimError, match=r"symlink to .*does not exist"):
        write_text_atomic(link, "x")
    assert link.is_symlink()


def test_a_symlink_to_a_file_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_folder_in_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plan.json").mkdir()
    with pytest.raises(TrainsimError, match="is a folder"):
        write_text_atomic(tmp_path / "plan.json", "x")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(TrainsimError, match="permission denied"):
            write_text_atomic(folder / "a.txt", "x")
    finally:
        folder.chmod(0o700)


def test_lock_refuses_a_second_holder_naming_its_pid(tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys,time; from simcore.output import OutLock; OutLock(sys.argv[1]).acquire(); "
         "print('held', flush=True); time.sleep(30)", str(out)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(TrainsimError, match=rf"in use by another run \(pid {holder.pid}\)"):
            OutLock(out).acquire()
    finally:
        holder.kill()
        holder.wait()
    with OutLock(out):  # the holder died: its flock went with it
        assert (out / LOCK_NAME).exists()


def test_the_holder_checking_its_own_out_again_is_not_refused(tmp_path: Path) -> None:
    """A command that checks --out twice (before its work, and again when writing) holds one lock."""
    out = tmp_path / "run"
    with OutLock(out):
        with OutLock(out):  # the same process: a no-op, not "in use by another run"
            pass
        assert (out / LOCK_NAME).exists()  # the inner release left the outer lock in place


def test_lock_release_removes_the_lock_and_a_folder_it_made_when_empty(tmp_path: Path) -> None:
    out = tmp_path / "new"
    with OutLock(out):
        assert (out / LOCK_NAME).read_text().strip() == str(os.getpid())
    assert not out.exists()
    with OutLock(out):
        (out / "plan.json").write_text("{}")
    assert [p.name for p in out.iterdir()] == ["plan.json"]


def test_a_new_file_gets_the_usual_permissions_and_a_replaced_one_keeps_its_own(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "new.txt", "x")
        assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
        (tmp_path / "kept.txt").write_text("old")
        (tmp_path / "kept.txt").chmod(0o640)
        write_text_atomic(tmp_path / "kept.txt", "new")
        assert (tmp_path / "kept.txt").stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(umask)


class _Figure:
    """Stands in for a matplotlib figure: writes the format it was asked for."""

    def savefig(self, path: Path, *, format: str, dpi: int) -> None:
        Path(path).write_text(f"{format} {dpi}")


def test_save_figure_writes_exactly_the_path_given(tmp_path: Path) -> None:
    assert save_figure(_Figure(), tmp_path / "plot", dpi=90) == tmp_path / "plot"
    assert (tmp_path / "plot").read_text() == "png 90"
    save_figure(_Figure(), tmp_path / "p.PNG", dpi=90)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.PNG", "plot"]


def test_a_process_the_holder_started_is_let_in_as_part_of_its_run(tmp_path: Path) -> None:
    """A launcher that locked --out for a whole job (``calibrate.collectives --nproc``) starts the
    ranks that write there: they are of its run (its descendants), not another run."""
    out = tmp_path / "run"
    with OutLock(out):
        child = subprocess.run(
            [sys.executable, "-c", "import sys; from simcore.output import OutLock; OutLock(sys.argv[1]).acquire(); "
             "print('in')", str(out)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert (child.returncode, child.stdout.strip()) == (0, "in"), child.stderr
        assert (out / LOCK_NAME).read_text().strip() == str(os.getpid())  # still this process's lock


@pytest.mark.skipif(not Path("/dev/full").is_char_device(), reason="needs /dev/null and /dev/full")
def test_a_device_is_written_into_and_never_replaced_by_a_file() -> None:
    """Renaming a temporary file over ``/dev/null`` would turn the device into a regular file."""
    write_text_atomic("/dev/null", "discarded")
    with pytest.raises(TrainsimError, match="cannot write /dev/full: no space left"):
        write_text_atomic("/dev/full", "x" * 10_000)
    assert Path("/dev/null").is_char_device() and Path("/dev/full").is_char_device()


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    with pytest.raises(TrainsimError, match="not a regular file"):
        write_text_atomic(fifo, "x")
    assert [p.name for p in tmp_path.iterdir()] == ["pipe.png"]  # no temporary file left


def test_a_failed_output_set_removes_what_it_made_and_keeps_what_it_replaced(tmp_path: Path) -> None:
    kept = tmp_path / "plan.json"
    kept.write_text("old")
    with pytest.raises(TrainsimError, match="folder"), output_set():
        write_text_atomic(kept, "new")
        write_text_atomic(tmp_path / "report.html", "<html>")
        write_text_atomic(tmp_path, "a folder is in the way")  # the set's last file fails
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]
    assert kept.read_text() == "new"  # replaced whole: the new content, never half of it


def test_a_completed_output_set_keeps_every_file(tmp_path: Path) -> None:
    with output_set():
        write_text_atomic(tmp_path / "a.json", "{}")
        write_text_atomic(tmp_path / "b.html", "<html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.html"]
