"""PyYAML's safe loading of the YAML files the project ships, with libyaml's C parser where PyYAML
was built with it (about ten times faster than the pure-Python one: a what-if reads a dozen files).

Files a user hands in are read by :func:`simcore.inputs.read_yaml`, which also bounds aliases and
nesting before building the document.
"""

from __future__ import annotations

from typing import IO, Any

__all__ = ["safe_load", "safe_loader"]


def safe_loader() -> Any:
    """``yaml.CSafeLoader`` where PyYAML has it, else ``yaml.SafeLoader`` (same documents, same types)."""
    import yaml  # here, not at the top: PyYAML would slow every --help

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream: str | IO[str]) -> Any:
    """The one YAML document in ``stream`` (plain data only, like ``yaml.safe_load``)."""
    import yaml

    return yaml.load(stream, Loader=safe_loader())
