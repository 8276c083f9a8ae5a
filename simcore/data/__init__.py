"""Data files shipped with simcore (device specs, efficiencies, tuning tables), and how they are parsed.

:func:`parse_yaml` parses with libyaml where PyYAML was built with it (``yaml.CSafeLoader``: the
same safe constructor and resolver as ``yaml.safe_load``, several times faster), else with the
pure-Python safe loader; the tables are read at start-up by every command, so this is most of what
reading them costs. :func:`data_file` parses one shipped file once per process (several modules
read their own section of ``efficiency.yaml``) and hands each caller its own copy.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import IO, Any

import yaml

__all__ = ["data_file", "parse_yaml"]

_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse_yaml(stream: str | IO[str]) -> Any:
    """``yaml.safe_load(stream)``, through libyaml when it is available."""
    return yaml.load(stream, Loader=_SAFE_LOADER)


@functools.cache
def _parsed(name: str) -> Any:
    return parse_yaml(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))


def data_file(name: str) -> Any:
    """The parsed ``simcore/data/<name>`` (a copy: callers may keep and change what they get)."""
    return copy.deepcopy(_parsed(name))
