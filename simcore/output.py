"""The one output layer: every file a command writes goes through here.

- :func:`write_text_atomic`, :func:`write_bytes_atomic`, :func:`write_json_atomic`,
  :func:`save_figure` (matplotlib) and :func:`atomic_path` (for any library that writes to a name)
  write a temporary file beside the target, fsync it and rename it over the target, so a reader
  (or a full disk, or a kill) never leaves half a file or a 0-byte ``plan.json`` behind;
- every failure (no space left, read-only file system, permission denied, a dangling symlink, a
  folder in the way) is one :class:`~simcore.errors.TrainsimError` line naming the path (exit 2
  under :func:`~simcore.errors.cli_entry`), with the temporary file removed;
- :class:`OutLock`: an advisory lock (``fcntl.flock``) on a lock file inside an ``--out`` folder,
  so a second run on the same folder is refused naming the pid that holds it.

A symlink to an existing file is written through (its target is replaced); a dangling one is
refused rather than silently replaced by a regular file. A character device (``/dev/null``,
``/dev/full``) is written into, never replaced by a file; a FIFO or a socket is refused.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from simcore.errors import TrainsimError
from simcore.procs import lineage_pids

__all__ = [
    "LOCK_NAME",
    "OutLock",
    "atomic_path",
    "output_set",
    "save_figure",
    "write_bytes_atomic",
    "write_error",
    "write_json_atomic",
    "write_text_atomic",
]

LOCK_NAME = ".trainsim.lock"  # inside an --out folder while a command writes there
# the files made new inside an :func:`output_set` (None outside one)
_MADE: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar("trainsim_output_set", default=None)

_REASONS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EPIPE: "the reader closed the pipe",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "it is a folder",
    errno.ENAMETOOLONG: "the name is too long",
}


def write_error(path: str | os.PathLike[str], exc: OSError, action: str = "cannot write") -> TrainsimError:
    """One line for a failed write of ``path``: what failed and why (``exc``'s errno in words)."""
    reason = _REASONS.get(exc.errno or 0) or exc.strerror or str(exc)
    return TrainsimError(f"{action} {os.fspath(path)}: {reason}")


def _target(path: str | os.PathLike[str]) -> Path:
    """The file to replace: ``path``, or the file a symlink at ``path`` points to."""
    p = Path(path)
    if p.is_symlink():
        resolved = p.resolve()
        if not resolved.exists():
            raise TrainsimError(
                f"cannot write {p}: it is a symlink to {resolved}, which does not exist; "
                "remove the link or give another path"
            )
        p = resolved
    if p.is_dir():
        raise TrainsimError(f"cannot write {p}: it is a folder; give a file name")
    if p.exists() and not p.is_file() and not p.is_char_device():
        raise TrainsimError(
            f"cannot write {p}: not a regular file (a pipe, a socket or a block device); give a file name"
        )
    return p


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` (same suffix) to write to; renamed over ``path`` on success.

    On any error, the temporary file is removed and an ``OSError`` becomes one :class:`TrainsimError`
    naming ``path``; nothing at ``path`` changes.
    """
    target = _target(path)
    device = target.is_char_device()  # /dev/null, /dev/full: written through, never replaced
    try:
        if not device:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=f".tmp{target.suffix}", dir=None if device else target.parent
        )
        os.close(fd)
    except OSError as exc:
        raise write_error(path, exc) from None
    tmp = Path(name)
    try:
        yield tmp
        if device:
            with target.open("wb") as sink:
                sink.write(tmp.read_bytes())
            tmp.unlink()
            return
        _fsync(tmp)
        os.chmod(tmp, _mode(target))
        made = _MADE.get()
        if made is not None and not target.exists():
            made.append(target)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def output_set() -> Iterator[None]:
    """The files a command writes together (the json, report and plots of one ``--out``): when one
    fails (a full disk), the files this block made new are removed again, so a failed run leaves no
    half set beside the one error line. A file it replaced keeps its new, complete content."""
    made: list[Path] = []
    token = _MADE.set(made)
    try:
        yield
    except BaseException:
        for path in made:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    finally:
        _MADE.reset(token)


def _mode(target: Path) -> int:
    """The permissions the file gets: the replaced file's, else what ``open`` would give (mkstemp's
    0600 would hide results from the rest of a group)."""
    try:
        return target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` all at once or not at all (see :func:`atomic_path`); the path."""
    with atomic_path(path) as tmp, tmp.open("wb") as handle:
        handle.write(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` all at once or not at all (see :func:`atomic_path`)."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike[str], data: Any, *, indent: int = 2) -> Path:
    """Write ``data`` as JSON (one trailing newline) to ``path`` all at once or not at all."""
    return write_text_atomic(path, json.dumps(data, indent=indent, sort_keys=False) + "\n")


class OutLock:
    """An advisory lock on an ``--out`` folder for one run: :data:`LOCK_NAME` inside it, ``flock``-ed.

    :meth:`acquire` creates the folder if needed and refuses, with one line naming the holder's pid,
    when another process holds the lock (a second acquire by the holder itself is a no-op); :meth:`release` unlocks, removes the lock file and removes
    the folder again if this lock made it and nothing was written there.
    """

    def __init__(
        self, folder: str | os.PathLike[str], *, name: str = LOCK_NAME, target: Path | None = None,
        what: str = "--out",
    ) -> None:  # fmt: skip
        self.folder = Path(folder)
        self.path = self.folder / name
        self._target = target or self.folder  # what the refusal names
        self._what = what
        self._fd: int | None = None
        self._made_folder = False

    @classmethod
    def for_file(cls, path: str | os.PathLike[str]) -> OutLock:
        """A lock on one output file that runs append to (a record file): ``.NAME.lock`` beside it."""
        p = Path(path)
        return cls(p.parent, name=f".{p.name}.lock", target=p, what="output file")

    def acquire(self) -> OutLock:
        import fcntl

        try:
            self._made_folder = not self.folder.exists()
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(self.folder, exc, "cannot make the folder") from None
        while True:  # a holder may remove the file between our open and flock: retry on a new one
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise write_error(self.path, exc) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                # this run holds it already: a second check of --out, or a rank whose launcher
                # (``calibrate.collectives --nproc``) took the lock for the whole job
                if holder in lineage_pids():
                    self._made_folder = False
                    return self
                raise TrainsimError(
                    f"{self._target} is in use by another run (pid {holder}); wait for it to end, "
                    f"or give another {self._what}"
                ) from None
            if self._same_file(fd):
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return self

    def _same_file(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)  # closing drops the flock
        self._fd = None
        if self._made_folder:
            with contextlib.suppress(OSError):
                self.folder.rmdir()  # only when empty: the run failed before writing anything

    def __enter__(self) -> OutLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig: Any) -> Path:
    """Save a matplotlib figure to exactly ``path``, all at once or not at all (:func:`atomic_path`).

    The format is ``path``'s suffix, PNG when it has none (so ``--png plot`` writes ``plot``, not
    ``plot.png``); ``savefig`` is passed on (``dpi``, ``bbox_inches``).
    """
    fmt = Path(path).suffix.lstrip(".").lower() or "png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, **savefig)
    return Path(path)
