"""The published measurements, as copied into ``data/published_measurements.csv``.

Rows are numbered from 1 in file order (the mapping in ``data/mapping.yaml`` uses these numbers).
Every column of the copy is kept; ``source`` carries the publication and, appended as
``[note: ...]``, the collector's caveats. See ``data/README.md`` for where the file comes from.
"""

from __future__ import annotations

import csv
import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

from simcore.errors import TrainsimError

__all__ = [
    "ADDED_PATH",
    "COLUMNS",
    "CSV_PATH",
    "PublishedRow",
    "content_sha256",
    "load_all_rows",
    "load_rows",
]

CSV_PATH = Path(__file__).parent / "data" / "published_measurements.csv"
# rows the project added later, from other publications (same columns; numbered after CSV_PATH's)
ADDED_PATH = Path(__file__).parent / "data" / "added_rows.csv"
COLUMNS = (
    "category",
    "hardware",
    "gpus",
    "nodes",
    "interconnect",
    "workload",
    "strategy",
    "metric",
    "value",
    "unit",
    "source",
)


@dataclass(frozen=True, slots=True)
class PublishedRow:
    """One published measurement, every column as the file has it (value as a number); ``id`` is
    the row number, or the id column of a file that has one (``modern_runs.csv``: ``modern-01``)."""

    id: int | str
    category: str
    hardware: str
    gpus: int
    nodes: int
    interconnect: str
    workload: str
    strategy: str
    metric: str
    value: float
    unit: str
    source: str

    @property
    def note(self) -> str:
        """The collector's caveat (the ``[note: ...]`` part of ``source``), or ''."""
        start = self.source.find("[note:")
        return self.source[start + 6 :].rstrip("] ").strip() if start >= 0 else ""


def content_sha256(path: Path = CSV_PATH) -> str:
    """SHA-256 of the file with line endings normalised to LF (a checkout may convert them)."""
    return hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def _row(number: int, record: dict[str, str], where: str) -> PublishedRow:
    try:
        return PublishedRow(
            number,
            record["category"],
            record["hardware"],
            int(record["gpus"]),
            int(record["nodes"]),
            record["interconnect"],
            record["workload"],
            record["strategy"],
            record["metric"],
            float(record["value"]),
            record["unit"],
            record["source"],
        )
    except (KeyError, ValueError) as exc:
        raise TrainsimError(f"{where}: row {number} is malformed ({exc})") from None


@functools.lru_cache(maxsize=4)
def load_rows(path: Path = CSV_PATH, first: int = 1) -> tuple[PublishedRow, ...]:
    """Every row of ``path``, numbered from ``first``; the header must be exactly :data:`COLUMNS`."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise TrainsimError(f"{path.name}: columns {reader.fieldnames} are not {list(COLUMNS)}")
        return tuple(_row(number, record, path.name) for number, record in enumerate(reader, first))


def load_all_rows() -> tuple[PublishedRow, ...]:
    """The reference set's rows (:data:`CSV_PATH`, 1-157) and then the added ones (:data:`ADDED_PATH`)."""
    rows = load_rows()
    return rows + load_rows(ADDED_PATH, len(rows) + 1)
