"""Data files shipped with simcore (device specs, efficiencies, tuning tables).

:func:`data_file` parses one shipped file once per process (several modules read their own section
of ``efficiency.yaml``; every step plan asks for some of them) with :func:`simcore.yamlload.safe_load`
(libyaml's parser where PyYAML has it) and hands each caller its own copy.
"""

from __future__ import annotations

import copy
import functools
from importlib import resources
from typing import Any

from simcore.yamlload import safe_load

__all__ = ["data_file"]


@functools.cache
def _parsed(name: str) -> Any:
    return safe_load(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))


def data_file(name: str) -> Any:
    """The parsed ``simcore/data/<name>`` (a copy: callers may keep and change what they get)."""
    return copy.deepcopy(_parsed(name))
