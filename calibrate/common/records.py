"""Measurement records: appended and flushed as they arrive; provenance; atomic JSON writes.

Every calibration job writes JSONL (one record per line) and optionally CSV through
:class:`RecordWriter`, so a job killed mid-run keeps everything but the measurement in flight, and
``--resume`` can skip what is already there (:func:`resume_keys`, :func:`read_records`). A
half-written last line (the job died writing it) is dropped before anything is appended, with a
warning on stderr naming the file and line; ``--resume`` says on stderr what it skips.

A measurement is named by its kind and key (:data:`MEASUREMENT_KEYS`): a file holds each once. Two
writers on one file (a launcher killed while its workers went on, then ``--resume``) can append
one twice; :func:`read_records` keeps the first and says on stderr how many it dropped.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import hashlib
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
from simcore.inputs import check_input_file, input_lines
from simcore.limits import MEASUREMENT_FILE_BYTES
from simcore.output import write_json_atomic
from simcore.progress import note

__all__ = [
    "MEASUREMENT_KEYS",
    "RecordWriter",
    "atomic_write_json",
    "dedupe_records",
    "describe_done",
    "distinct_files",
    "done_keys",
    "drop_torn_tail",
    "measurement_key",
    "provenance",
    "read_records",
    "resume_keys",
]

# Per record kind, the fields that name one measurement (the jobs' --resume keys). Kinds not listed
# (provenance, training steps) are never deduplicated: each run writes its own.
MEASUREMENT_KEYS: dict[str, tuple[str, ...]] = {
    "collective": ("op", "size_bytes", "group", "repeat"),  # calibrate.collectives
    "matmul": ("item", "repeat"),  # calibrate.compute
    "memory": ("item", "repeat"),
    "slowdown": ("item", "repeat"),
    "memory_truth": ("model", "strategy", "world_size", "optimizer"),  # calibrate.memory_truth
}

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


def measurement_key(record: Any) -> tuple[Any, ...] | None:
    """``(kind, *key fields)`` of a measurement record; None for other records (and for a
    measurement that lacks one of its key fields, which names nothing to compare)."""
    if not isinstance(record, dict):
        return None
    fields = MEASUREMENT_KEYS.get(str(record.get("kind")))
    if fields is None or any(record.get(f) is None for f in fields):
        return None
    return (record["kind"], *(str(record[f]) for f in fields))  # str: CSV cells and JSON agree


def dedupe_records(records: list[dict[str, Any]], source: object) -> list[dict[str, Any]]:
    """``records`` with each measurement key once (the first kept), saying on stderr how many went."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for record in records:
        key = measurement_key(record)
        if key is not None:
            if key in seen:
                continue
            seen.add(key)
        kept.append(record)
    dropped = len(records) - len(kept)
    if dropped:
        print(
            f"{source}: {dropped} duplicate record(s) of a measurement already in the file dropped "
            "(the first of each kept)",
            file=sys.stderr,
            flush=True,
        )
    return kept


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All complete records of a JSONL or CSV file, each measurement once (:func:`dedupe_records`);
    a torn last line (a killed job) is skipped."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        return []
    # streamed a line at a time from a regular file of bounded size (a FIFO or /dev/zero is refused)
    lines = input_lines(p, "a record file (JSONL or CSV)", MEASUREMENT_FILE_BYTES)
    if p.suffix == ".csv":
        rows = [dict(row) for row in csv.DictReader(lines) if None not in row.values()]
        return dedupe_records(rows, p)
    return dedupe_records(_json_records(p, lines), p)


def _json_records(p: Path, lines: Iterable[str]) -> list[dict[str, Any]]:
    records = []
    bad: tuple[int, str] | None = None  # a line that is not JSON: an error unless it is the last
    for lineno, line in enumerate(lines, 1):
        if bad is not None:
            raise TrainsimError(f"{p}:{bad[0]}: not a JSON record: {bad[1][:60]!r}")
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            bad = (lineno, line.rstrip("\r\n"))
        except RecursionError:
            raise TrainsimError(f"{p}:{lineno}: a record nested too deeply to read") from None
    return records  # a bad last line is the measurement in flight when the job died


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


def distinct_files(files: Iterable[Path], what: str, *, quiet: bool) -> list[Path]:
    """``files`` without repeats: a file given twice, or a copy with the same bytes, is read once
    (its measurements would count twice in every fit), with a note naming both; each is first checked (:func:`simcore.inputs.check_input_file`)."""
    seen: dict[str, Path] = {}
    kept = []
    for file in files:
        check_input_file(file, what, MEASUREMENT_FILE_BYTES)
        digest = hashlib.sha256()
        with file.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        first = seen.get(digest.hexdigest())
        if first is None:
            seen[digest.hexdigest()] = file
            kept.append(file)
        else:
            same = "given twice" if first.resolve() == file.resolve() else f"the same bytes as {first}"
            note(f"{file}: {same}; its measurements are read once", quiet=quiet)
    return kept


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write JSON to a temporary file beside ``path`` and rename it over: readers never see half
    (:func:`simcore.output.write_json_atomic`, the one output layer)."""
    write_json_atomic(path, data)


_CHUNK = 1 << 16


def _tail_start(fh: Any, size: int) -> int:
    """Where the last line starts when the file does not end in a newline (``size`` when it does),
    read backwards a chunk at a time: a long record file is never read whole."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        fh.seek(start)
        chunk = fh.read(end - start)
        if end == size and chunk.endswith(b"\n"):
            return size
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def _count_lines(path: Path, upto: int) -> int:
    """Newlines in the first ``upto`` bytes of ``path``, a chunk at a time."""
    count = 0
    with path.open("rb") as fh:
        while upto > 0:
            chunk = fh.read(min(_CHUNK, upto))
            if not chunk:
                break
            count += chunk.count(b"\n")
            upto -= len(chunk)
    return count


def drop_torn_tail(path: str | os.PathLike[str], *, warn: bool = True) -> int:
    """Cut a torn last line (a job killed mid-write) so appending starts on a fresh line.

    Returns the number of bytes removed and, with ``warn``, says on stderr which line of which file
    it dropped. Call before reopening a record file for appending.
    """
    p = Path(path)
    if not p.is_file() or p.stat().st_size == 0:
        return 0
    with p.open("rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        keep = _tail_start(fh, size)
        if keep == size:
            return 0
        fh.truncate(keep)
    removed = size - keep
    if warn:
        line = _count_lines(p, keep) + 1
        print(f"warning: {p}:{line}: dropped a torn record ({removed} bytes, half-written when the job "
              "was killed); it is measured again", file=sys.stderr, flush=True)  # fmt: skip
    return removed
