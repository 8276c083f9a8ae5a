"""Measurement records: appended and flushed as they arrive; provenance; atomic JSON writes.

Every calibration job writes JSONL (one record per line) and optionally CSV through
:class:`RecordWriter`, so a job killed mid-run keeps everything but the measurement in flight, and
``--resume`` can skip what is already there (:func:`resume_keys`, :func:`read_records`). A
half-written last line (the job died writing it) is dropped before anything is appended, with a
warning on stderr naming the file and line; ``--resume`` says on stderr what it skips.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import json
import os
import platform
import socket
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TextIO

from simcore.errors import TrainsimError
from simcore.output import write_json_atomic

__all__ = [
    "RecordWriter",
    "atomic_write_json",
    "describe_done",
    "done_keys",
    "drop_torn_tail",
    "provenance",
    "read_records",
    "resume_keys",
]

_ENV_KNOBS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "CUDA_VISIBLE_DEVICES",
    "SLURM_JOB_ID",
    "SLURM_NNODES",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
)


def provenance(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Where and how a measurement was taken: host, Python, torch/backend versions, threads, argv."""
    info: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "argv": list(sys.argv),
        "env": {k: os.environ[k] for k in _ENV_KNOBS if k in os.environ},
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = str(torch.__version__)
        info["torch_threads"] = int(torch.get_num_threads())
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_available():
            info["cuda"] = str(torch.version.cuda)
            info["devices"] = [cuda.get_device_name(i) for i in range(cuda.device_count())]
            with contextlib.suppress(Exception):  # version probing must never fail a job
                info["nccl"] = ".".join(str(x) for x in cuda.nccl.version())
        else:
            info["devices"] = ["cpu"]
    if extra:
        info.update(extra)
    return info


class RecordWriter:
    """Append records to ``path`` (``.jsonl`` or ``.csv``), flushing and fsyncing each one."""

    def __init__(
        self, path: str | os.PathLike[str], fieldnames: Iterable[str] | None = None, *, drop_torn: bool = True
    ) -> None:
        """``drop_torn=False`` where several processes append to one file: only one of them may cut
        a torn line, before the others open it (else it could cut a line another is writing)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._csv = self.path.suffix == ".csv"
        self._fieldnames = list(fieldnames) if fieldnames is not None else None
        if drop_torn:
            drop_torn_tail(self.path)  # a job killed mid-write left half a line: never append onto it
        new = not self.path.exists() or self.path.stat().st_size == 0
        self._fh: TextIO = self.path.open("a", encoding="utf-8", newline="")
        self._writer: csv.DictWriter[str] | None = None
        if self._csv:
            if self._fieldnames is None:
                raise TrainsimError(f"{self.path}: a CSV record file needs its column names")
            self._writer = csv.DictWriter(self._fh, fieldnames=self._fieldnames, extrasaction="ignore")
            if new:
                self._writer.writeheader()
                self._flush()

    def write(self, record: Mapping[str, Any]) -> None:
        if self._writer is not None:
            self._writer.writerow(dict(record))
        else:
            self._fh.write(json.dumps(record, sort_keys=False, default=str) + "\n")
        self._flush()

    def _flush(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete records of a JSONL or CSV file; a torn last line (a killed job) is skipped."""
    p = Path(path)
    if not p.exists():
        return []
    if p.suffix == ".csv":
        with p.open(encoding="utf-8", newline="") as fh:
            return [dict(row) for row in csv.DictReader(fh) if None not in row.values()]
    records = []
    lines = p.read_text(encoding="utf-8").splitlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if lineno == len(lines):
                break  # the measurement in flight when the job died
            raise TrainsimError(f"{p}:{lineno}: not a JSON record: {line[:60]!r}") from None
    return records


def done_keys(path: str | os.PathLike[str], keys: Iterable[str]) -> set[tuple[Any, ...]]:
    """The key tuples already measured in ``path`` (records that carry every key), for ``--resume``."""
    names = list(keys)
    rows = (tuple(r.get(k) for k in names) for r in read_records(path))
    return {row for row in rows if None not in row}


def describe_done(path: str | os.PathLike[str], done: set[tuple[Any, ...]]) -> str:
    """One line for ``--resume``: how many measurements ``path`` holds, by kind (the first key up
    to its first ``/``), all of them skipped."""
    if not done:
        return f"resume: {path} holds no measurements yet; measuring everything"
    kinds = Counter(str(key[0]).split("/")[0] for key in done)
    by_kind = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items()))
    return f"resume: {path} already holds {len(done)} measurement(s) ({by_kind}); skipping them"


def resume_keys(path: str | os.PathLike[str], keys: Iterable[str]) -> set[tuple[Any, ...]]:
    """For ``--resume``: drop a torn last record (with a warning), then the keys already measured,
    saying on stderr how many are skipped."""
    drop_torn_tail(path)
    done = done_keys(path, keys)
    print(describe_done(path, done), file=sys.stderr, flush=True)
    return done


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it over: readers never see half
    (:func:`simcore.output.write_json_atomic`, the one output layer)."""
    write_json_atomic(path, data)


def drop_torn_tail(path: str | os.PathLike[str], *, warn: bool = True) -> int:
    """Cut a torn last line (a job killed mid-write) so appending starts on a fresh line.

    Returns the number of bytes removed and, with ``warn``, says on stderr which line of which file
    it dropped. Call before reopening a record file for appending.
    """
    p = Path(path)
    if not p.exists() or p.stat().st_size == 0:
        return 0
    with p.open("rb+") as fh:
        data = fh.read()
        if data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        fh.truncate(keep)
    removed = len(data) - keep
    if warn:
        line = data.count(b"\n", 0, keep) + 1
        print(f"warning: {p}:{line}: dropped a torn record ({removed} bytes, half-written when the job "
              "was killed); it is measured again", file=sys.stderr, flush=True)  # fmt: skip
    return removed
