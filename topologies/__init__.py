"""Cluster topologies: presets as data, builders for multi-node fabrics, user YAML specs and
``nvidia-smi topo -m`` import, all producing :class:`simcore.topology.Topology`."""
