"""Framework configs in and out: Megatron-LM argument lines, torchtitan TOML, DeepSpeed JSON.

Readers turn a framework's own config into what-if/plan flag values (:mod:`.settings`); writers
print a plan's layout in the framework's terms (:mod:`.emit`); :mod:`.wiring` puts them on the
command lines.
"""
