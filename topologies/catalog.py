"""The built-in presets: one YAML file per node type (plus its default fabric) in ``presets/``."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import yaml

from topologies.spec import ClusterSpec, parse_cluster_spec
from topologies.yamlcheck import SpecError

__all__ = ["preset_names", "preset_spec"]


def _preset_files() -> dict[str, str]:
    folder = resources.files("topologies").joinpath("presets")
    return {Path(entry.name).stem: entry.name for entry in folder.iterdir() if entry.name.endswith(".yaml")}


def preset_names() -> list[str]:
    """Names of the built-in cluster presets (``dgx-a100``, ``hgx-h100``, ...), sorted."""
    return sorted(_preset_files())


@functools.cache
def preset_spec(name: str) -> ClusterSpec:
    """The parsed spec of preset ``name``; a :class:`SpecError` listing the presets otherwise."""
    files = _preset_files()
    if name not in files:
        raise SpecError(
            f"unknown topology {name!r}; presets: {', '.join(sorted(files))} (or a YAML spec file path)"
        )
    text = resources.files("topologies").joinpath("presets").joinpath(files[name]).read_text(encoding="utf-8")
    where = f"topologies/presets/{files[name]}"
    return parse_cluster_spec(yaml.safe_load(text), where, default_name=name)
