"""TOML reading for the torchtitan reader: :mod:`tomllib` (Python 3.11+), else ``tomli`` if installed."""

from __future__ import annotations

import sys
from typing import Any

from simcore.errors import TrainsimError

__all__ = ["parse_toml"]


def parse_toml(text: str, where: str) -> dict[str, Any]:
    """The TOML document in ``text``; a clear line when it does not parse or no parser is installed."""
    if sys.version_info >= (3, 11):
        import tomllib as toml_module
    else:  # pragma: no cover - the 3.10 floor of pyproject.toml
        try:
            import tomli as toml_module
        except ImportError:
            raise TrainsimError(
                f"{where}: reading TOML needs Python 3.11+ or the 'tomli' package (pip install tomli)"
            ) from None
    try:
        return toml_module.loads(text)
    except (toml_module.TOMLDecodeError, UnicodeError, ValueError) as exc:
        raise TrainsimError(f"{where}: not valid TOML ({exc})") from None
