"""Per-stage memory in closed form: the activation formulas of Korthikanti et al. 2022 and the
model states each pipeline stage holds.

The step itself measures memory on the data-parallel strategy's timeline (:mod:`simcore.parallel.step`);
these closed forms are what it is checked against and what a reader can reproduce by hand.

Activations per transformer layer and micro-batch of ``b`` sequences of ``s`` tokens (16-bit, with
dropout, attention scores materialised; Korthikanti et al. 2022, arXiv 2205.05198, eqs. 1-4 and
Table 2), ``t`` tensor-parallel ranks, ``a`` heads, hidden ``h``:

==============================  ===========================
no parallelism                  ``sbh (34 + 5as/h)``
tensor parallel                 ``sbh (10 + 24/t + 5as/(ht))``
tensor + sequence parallel      ``sbh (34/t + 5as/(ht))``
tensor parallel, selective      ``sbh (10 + 24/t)``
tensor + sequence, selective    ``sbh 34/t``
full recompute                  ``2sbh`` (``2sbh/t`` with sequence parallelism)
==============================  ===========================

With 1F1B the first stage keeps ``pp`` micro-batches of these in flight (``pp + (pp-1)/vpp`` with
interleaving; sec. 4.2.3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simcore.parallel.shard import ShardSpec, param_split
from simcore.workload.types import Workload

__all__ = ["StageStates", "activation_bytes_per_layer", "stage_states"]


def activation_bytes_per_layer(
    s: int, b: int, h: int, a: int, *, tp: int = 1, sequence_parallel: bool = False, recompute: str = "none"
) -> float:
    """Korthikanti et al. 2022's activation bytes of one transformer layer (see the module table)."""
    sbh = float(s) * b * h
    scores = 5.0 * a * s / h
    t = float(tp)
    if recompute == "full":
        return 2.0 * sbh / (t if sequence_parallel else 1.0)
    kept_scores = 0.0 if recompute == "selective" else scores / t
    if sequence_parallel:
        return sbh * (34.0 / t + kept_scores)
    return sbh * (10.0 + 24.0 / t + kept_scores)


@dataclass(frozen=True, slots=True)
class StageStates:
    """The parameters of one pipeline stage: split over its model-parallel shards, and held whole
    by every tensor-parallel rank (norms, biases of row-parallel layers, position tables ...)."""

    split_params: float
    whole_params: float
    shards: int  # ranks the split part is spread over (tp, and tp x ep for routed experts: see per_rank)
    per_rank_params: float

    @property
    def unique_params(self) -> float:
        """Parameters the stage holds counted once: what its shards add up to."""
        return self.split_params + self.whole_params


def stage_states(workload: Workload, stages: Sequence[Sequence[int]], spec: ShardSpec) -> list[StageStates]:
    """:class:`StageStates` of each stage (``stages[i]``: layer indices of stage ``i``)."""
    dims = workload.dims
    out = []
    for layers in stages:
        split = whole = per_rank = 0.0
        for i in layers:
            layer = workload.layers[i]
            if dims is None:
                whole += layer.params
                per_rank += layer.params
                continue
            a, b = param_split(layer, dims, spec)
            shards = spec.tp * spec.ep if layer.name.endswith(("experts_in", "experts_out")) else spec.tp
            split, whole, per_rank = split + a, whole + b, per_rank + a / shards + b
        out.append(StageStates(split, whole, spec.tp, per_rank))
    return out
