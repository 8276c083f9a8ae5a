"""Reading a capture file as users have it: UTF-8, or UTF-16 from a Windows PowerShell redirect.

Windows PowerShell 5.1's ``>`` and ``Out-File`` write UTF-16 LE with a byte-order mark (PowerShell
7 writes UTF-8); a capture copied from such a session is decoded by its byte-order mark (UTF-8,
UTF-16 LE/BE, UTF-32 LE/BE), or, without one, recognised as UTF-16 by the zero high bytes of its
ASCII text. Any other file with NUL bytes is binary and refused.
"""

from __future__ import annotations

import codecs
from pathlib import Path

from simcore.errors import TrainsimError
from simcore.inputs import read_bytes
from simcore.limits import MEASUREMENT_FILE_BYTES

__all__ = ["read_capture"]

# UTF-32 first: its little-endian mark begins with UTF-16 LE's.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _decode(data: bytes, codec: str, path: Path, why: str) -> str:
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        raise TrainsimError(f"{path}: {why} but is not valid {codec} text ({exc.reason} at byte {exc.start}); "
                            "save it as UTF-8 (PowerShell: Out-File -Encoding utf8)") from None  # fmt: skip


def _utf16_without_bom(data: bytes) -> str | None:
    """``utf-16-le``/``-be`` when every other byte of the start is zero (ASCII text in UTF-16)."""
    sample = data[:4096]
    if len(sample) < 4:
        return None
    sample = sample[: len(sample) // 2 * 2]
    for codec, zeros in (("utf-16-le", sample[1::2]), ("utf-16-be", sample[0::2])):
        if zeros.count(0) >= 0.9 * len(zeros):
            return codec
    return None


def read_capture(path: str | Path) -> str:
    """The text of a capture, decoded as above; TrainsimError for a missing or binary file."""
    p = Path(path)
    if not p.exists():
        raise TrainsimError(f"{p}: no such file")
    # a regular file of bounded size, checked before reading: a FIFO or /dev/zero would never end
    data = read_bytes(p, "an nccl-tests log (text output or -J JSON)", MEASUREMENT_FILE_BYTES)
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return _decode(data[len(bom) :], codec, p, f"starts with a {codec} byte-order mark")
    if b"\x00" in data:
        utf16 = _utf16_without_bom(data)
        if utf16 is None:
            raise TrainsimError(f"{p}: a binary file (NUL bytes), not nccl-tests text output or -J JSON")
        return _decode(data, utf16, p, f"looks like {utf16} text without a byte-order mark")
    return data.decode("utf-8", errors="replace")
