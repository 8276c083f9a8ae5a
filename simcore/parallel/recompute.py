"""Activation recomputation: what a rank keeps from forward to backward, and what it recomputes.

- ``selective`` (Korthikanti et al. 2022, sec. 5): only the attention core is recomputed; its
  saved tensors (scores, softmax, dropout: the ``5as/h`` term) are dropped and its inputs Q, K, V
  kept; backward first reruns the core's forward.
- ``full`` (Chen et al. 2016; Megatron's ``--recompute-granularity full``): every block keeps
  only its input and reruns its forward (with the forward's tensor-parallel collectives) before its
  backward; run by the data-parallel step plan's activation checkpointing
  (:mod:`simcore.strategies.passes`), which also holds the recomputed block's activations while its
  backward runs.
- ``every-K``: the same for every K-th block only (blocks 0, K, 2K ... of the model), the others
  keep all their activations.
- ``selective-op``: torchtitan's per-op policy (:mod:`simcore.compute.checkpointing`): every block
  keeps its input and the outputs of its saved ops, and reruns the rest (shares of fused layers)
  before its backward.

:func:`apply_recompute` rewrites the saved bytes of a rank's (sharded) layers for ``selective``
and ``every-K`` and says which forwards each backward reruns; ``full`` and ``none`` leave them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from simcore.compute.checkpointing import selective_op_policy
from simcore.workload.types import Layer, TransformerDims

__all__ = ["RecomputePlan", "apply_recompute", "held_bytes"]


@dataclass(frozen=True, slots=True)
class RecomputePlan:
    """Layers with their saved bytes after recompute, and the forwards rerun before each backward.

    ``rerun[i]`` lists the layers whose forward runs again just before layer ``i``'s backward, and
    ``shares[i]`` the (compute, collective) share of each one's forward that reruns (1, 1 but for
    ``selective-op``); ``transient_bytes`` is the largest set of activations rematerialised at
    once, per sample.
    """

    layers: tuple[Layer, ...]
    rerun: tuple[tuple[int, ...], ...]
    transient_bytes: float
    shares: tuple[tuple[tuple[float, float], ...], ...] = ()

    def rerun_shares(self, i: int) -> tuple[tuple[float, float], ...]:
        """(compute, collective) shares of ``rerun[i]``'s forwards."""
        return self.shares[i] if self.shares else tuple((1.0, 1.0) for _ in self.rerun[i])


def apply_recompute(
    layers: Sequence[Layer],
    global_blocks: Sequence[int],
    mode: str,
    every: int,
    *,
    dims: TransformerDims | None = None,
    sequence_parallel: bool = False,
    elem: int = 2,
    fp8_linears: bool = False,
) -> RecomputePlan:
    """The rank's ``layers`` (``global_blocks[i]``: layer i's block in the whole model) under ``mode``
    (``selective-op`` needs the model's ``dims``, whether ``sequence_parallel`` runs, ``elem``, and
    whether the linears run in FP8, ``fp8_linears``)."""
    if mode == "selective-op" and dims is not None:
        return _selective_op(layers, global_blocks, dims, (sequence_parallel, fp8_linears), elem)
    out = list(layers)
    rerun: list[tuple[int, ...]] = [()] * len(out)
    transient = 0.0
    if mode == "selective":
        for i, layer in enumerate(out):
            if layer.name.endswith("attn_core") and i > 0:
                keep = out[i - 1].output_bytes  # Q, K, V: the qkv projection's output
                transient = max(transient, layer.activation_bytes - keep)
                out[i] = replace(layer, activation_bytes=min(layer.activation_bytes, keep))
                rerun[i] = (i,)
    elif mode == "every":
        for members in _blocks(out, global_blocks):
            if global_blocks[members[0]] % every:
                continue
            first = members[0]
            kept = out[first - 1].output_bytes if first > 0 else out[first].output_bytes
            saved = sum(out[i].activation_bytes for i in members)
            transient = max(transient, saved - kept)
            for i in members:
                out[i] = replace(out[i], activation_bytes=kept if i == first else 0.0)
            rerun[members[-1]] = tuple(members)
    return RecomputePlan(tuple(out), tuple(rerun), max(0.0, transient))


def _selective_op(
    layers: Sequence[Layer],
    global_blocks: Sequence[int],
    dims: TransformerDims,
    flags: tuple[bool, bool],
    elem: int,
) -> RecomputePlan:
    sp, fp8 = flags
    out = list(layers)
    rerun: list[tuple[int, ...]] = [()] * len(out)
    shares: list[tuple[tuple[float, float], ...]] = [()] * len(out)
    transient = 0.0
    for members in _blocks(out, global_blocks):
        first = members[0]
        kept = out[first - 1].output_bytes if first > 0 else out[first].output_bytes  # the block input
        block = [out[i] for i in members]
        policy = selective_op_policy(block, dims, sequence_parallel=sp, elem=elem, fp8_linears=fp8)
        before = sum(out[i].activation_bytes for i in members)
        for k, (i, rule) in enumerate(zip(members, policy, strict=True)):
            out[i] = replace(out[i], activation_bytes=rule.saved_bytes + (kept if k == 0 else 0.0))
        held = sum(out[i].activation_bytes for i in members)
        transient = max(transient, before - held)
        rerun[members[-1]] = tuple(i for i, rule in zip(members, policy, strict=True) if rule.compute_share)
        shares[members[-1]] = tuple((r.compute_share, r.comm_share) for r in policy if r.compute_share)
    return RecomputePlan(tuple(out), tuple(rerun), max(0.0, transient), tuple(shares))


def _blocks(layers: Sequence[Layer], global_blocks: Sequence[int]) -> list[list[int]]:
    groups: dict[int, list[int]] = {}
    for i, layer in enumerate(layers):
        if layer.block >= 0:
            groups.setdefault(global_blocks[i], []).append(i)
    return [groups[b] for b in sorted(groups)]


def held_bytes(layers: Sequence[Layer], full: bool) -> float:
    """Bytes per sample a rank holds from forward to backward (``full``: block inputs only, as
    the step plan's activation checkpointing keeps them)."""
    if not full:
        return float(sum(layer.activation_bytes for layer in layers))
    total = 0.0
    for i, layer in enumerate(layers):
        if layer.block < 0:
            total += layer.activation_bytes
        elif i == 0 or layers[i - 1].block != layer.block:
            total += layers[i - 1].output_bytes if i > 0 else layer.output_bytes
    return total
