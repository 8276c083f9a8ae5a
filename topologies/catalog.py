"""The built-in presets: one YAML file per node type (plus its default fabric) in ``presets/``.

A cluster file may name a preset's node type without declaring it (``{type: dgx-a100, count: 2}``):
:func:`preset_node_type` resolves it, and :func:`parse_spec` / :func:`load_spec_file` read a
cluster spec that way.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

from simcore.data import parse_yaml
from topologies.spec import parse_cluster_spec
from topologies.spec_types import ClusterSpec, NodeType
from topologies.yamlcheck import SpecError, read_yaml

__all__ = ["load_spec_file", "parse_spec", "preset_names", "preset_node_type", "preset_spec"]


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
    return parse_spec(parse_yaml(text), where, default_name=name)


def preset_node_type(name: str, declared: tuple[str, ...], where: str) -> NodeType:
    """A node type not declared in the file, taken from the preset of that name."""
    if name not in preset_names():
        raise SpecError(
            f"{where}: {name!r} is neither declared in node_types ({', '.join(declared) or 'none'}) "
            f"nor a preset ({', '.join(preset_names())})"
        )
    return preset_spec(name).node_types[name]


def parse_spec(data: Any, where: str, *, default_name: str = "", base_dir: Path | None = None) -> ClusterSpec:
    """A cluster spec document whose undeclared node types are presets' (see the module docstring)."""
    return parse_cluster_spec(
        data, where, undeclared=preset_node_type, default_name=default_name, base_dir=base_dir
    )


def load_spec_file(path: Path | str) -> ClusterSpec:
    """Read and validate a cluster spec YAML file."""
    path = Path(path)
    return parse_spec(read_yaml(path), str(path), default_name=path.stem, base_dir=path.parent)
