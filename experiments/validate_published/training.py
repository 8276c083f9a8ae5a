"""Training rows: a data-parallel step (``step``) or a parameter-server mode (``ps``).

``step`` runs :func:`simcore.strategies.runner.simulate_step` for one representative rank, as the
what-if does for a homogeneous cluster (:func:`simcore.whatif.sweep.run_what_if`): the strategy's
plan on the topology preset's ranks, the comm/compute slowdown default, seed 0. The global batch is
``micro_batch x gpus`` (the rows state a per-GPU batch; no accumulation). ``strategy: none`` is a
one-GPU step without a DDP wrapper: DDP's plan with nothing to reduce and bucket views (no copies).
A one-GPU row needs only its device, so ``single_gpu`` names a device spec instead of a preset.
Scaling efficiency compares with the same per-GPU batch on one GPU of the same preset.

``ps`` runs :func:`simcore.whatif.sweep.run_what_if` for one parameter-server mode (per-worker
processes, incast on the server's links) and reads its throughput and scaling efficiency. With
``gpus_per_worker`` g > 1 a worker drives the g GPUs of its machine, as MXNet's kvstore ``dist_*``
workers do: the GPUs compute their shares of the worker's batch at once and the worker pushes their
summed gradient once (the local sum over PCIe is left out). It is simulated as one worker per
machine on the machine's first GPU, computing one GPU's share (``micro_batch``) and exchanging the
whole gradient over the machine's NIC; its speed counts the g shares (``g x micro_batch`` samples
per step).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibrate.gpu_suite.predict import single_device_cluster
from experiments.validate_published.base import (
    ATTENTION,
    Prediction,
    attention_mode,
    first_known,
    missing_name,
    name_list,
    positive_int,
)
from simcore.compute.precision import PRECISION_MODES
from simcore.compute.roofline import software_eras
from simcore.errors import TrainsimError
from simcore.hardware import device_names
from simcore.paramserver import PS_MODES
from simcore.strategies import get_strategy, strategy_names
from simcore.strategies.base import COMPUTE_DTYPES, OPTIMIZERS, MiB, TrainingConfig, model_flops_per_step
from simcore.strategies.runner import make_context, simulate_step
from simcore.topology import Topology
from simcore.whatif.sweep import run_what_if
from simcore.workload.loader import load_workload
from simcore.workload.loader import preset_names as model_preset_names
from simcore.workload.types import Workload
from topologies import load_cluster
from topologies import preset_names as cluster_preset_names

__all__ = [
    "PS_KEYS",
    "PS_METRICS",
    "STEP_KEYS",
    "STEP_METRICS",
    "PSSetup",
    "StepSetup",
    "parse_ps",
    "parse_step",
    "single_gpu_cluster",
]

STEP_KEYS = (
    "topology",
    "single_gpu",
    "gpus",
    "nodes",
    "model",
    "strategy",
    "dtype",
    "micro_batch",
    "seq_len",
    "image_size",
    "optimizer",
    "bucket_mb",
    "activation_checkpointing",
    "precision",
    "software_era",
    "zero3_per_rank_lists",
    "attention",
)
STEP_METRICS = (
    "step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "megatron_tflops_per_gpu", "scaling_efficiency",
)  # fmt: skip
PS_KEYS = (
    "topology", "gpus", "gpus_per_worker", "model", "mode", "dtype", "micro_batch", "seq_len", "image_size",
    "optimizer", "software_era",
)  # fmt: skip
PS_METRICS = ("samples_per_s_per_worker", "scaling_efficiency")


# model shapes the rows need that are no preset (config.json files, see data/README.md)
DATA = Path(__file__).parent / "data"


def megatron_flops_per_step(workload: Workload, global_batch: int) -> float:
    """FLOPs of one step as Narayanan et al. (SC21, arXiv 2104.04473) count them (their Eq. 3, full
    activation recomputation included): ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``."""
    dims = workload.dims
    if dims is None:
        raise TrainsimError(f"workload {workload.name!r}: the Megatron FLOP count needs a transformer shape")
    s, layers, h, vocab = workload.tokens_per_sample, dims.layers, dims.hidden, dims.vocab
    return 96.0 * global_batch * s * layers * h * h * (1 + s / (6 * h) + vocab / (16 * layers * h))


def _presets() -> list[str]:
    return cluster_preset_names()


def _models() -> list[str]:
    return model_preset_names()


def _devices() -> list[str]:
    return device_names()


@functools.lru_cache(maxsize=16)
def single_gpu_cluster(device: str) -> Topology:
    """One rank on one ``device``, nothing else: a one-GPU step needs no links or fabric."""
    return single_device_cluster(device)


@functools.lru_cache(maxsize=32)
def _cluster(preset: str, gpus: int, nodes: int | None) -> Topology:
    return load_cluster(preset, gpus=gpus, nodes=nodes)


@dataclass(frozen=True, slots=True)
class _Common:
    """What a training row fixes whatever runs it: model, precision, batch, optimizer."""

    models: tuple[str, ...]
    dtype: str
    micro_batch: int
    seq_len: int | None
    image_size: int | None
    optimizer: str
    # the convolution library's era (efficiency.yaml software_eras), for runs that predate today's
    software_era: str = "current"
    # how the blocks compute attention (base.ATTENTION): the model's own default, flash or eager
    attention: str = "preset"

    def missing(self) -> list[str]:
        reasons = []
        if first_known(self.models, _models) is None and self._model_file() is None:
            reasons.append(missing_name("model preset", self.models))
        if self.dtype not in COMPUTE_DTYPES:
            reasons.append(
                f"training precision {self.dtype} not modelled (allowed: {', '.join(COMPUTE_DTYPES)})"
            )
        if self.optimizer not in OPTIMIZERS:
            reasons.append(f"optimizer {self.optimizer} not modelled (allowed: {', '.join(OPTIMIZERS)})")
        return reasons

    def _model_file(self) -> str | None:
        return next(
            (str(DATA / m) for m in self.models if m.endswith(".json") and (DATA / m).is_file()), None
        )

    def model(self) -> str:
        return first_known(self.models, _models) or self._model_file() or self.models[0]

    def workload(self) -> Any:
        return load_workload(
            self.model(), seq_len=self.seq_len, image_size=self.image_size, dtype=self.dtype,
            flash_attention=ATTENTION[self.attention],
        )  # fmt: skip

    def describe(self, gpus: int) -> str:
        shape = f" seq {self.seq_len}" if self.seq_len else ""
        shape += f" {self.image_size}px" if self.image_size else ""
        shape += f", {self.attention} attention" if self.attention != "preset" else ""
        precision = self.dtype if self.dtype == "fp32" else f"{self.dtype} + fp32 master weights"
        return (
            f"{Path(self.model()).stem}{shape}, {precision}, batch {self.micro_batch}/GPU "
            f"(global {self.micro_batch * gpus}), {self.optimizer}"
        )


@dataclass(frozen=True, slots=True)
class StepSetup:
    """A synchronous data-parallel step (DDP, FSDP, ZeRO, HSDP) on a preset or one device."""

    hardware: str
    topologies: tuple[str, ...]
    single_gpu: tuple[str, ...]
    gpus: int
    nodes: int
    strategy: str
    common: _Common
    bucket_mb: int
    recompute: bool
    precision: str = "auto"
    # every compute kernel's time multiplied by this (the calibrated column's one scalar; 1 = shipped)
    compute_scale: float = 1.0
    # DeepSpeed 2021's per-rank list collectives (TrainingConfig.zero3_per_rank_lists)
    zero3_per_rank_lists: bool = False

    def missing(self) -> list[str]:
        reasons = []
        if self.single_gpu:
            if first_known(self.single_gpu, _devices) is None:
                reasons.append(missing_name("device spec", self.single_gpu, self.hardware))
        elif first_known(self.topologies, _presets) is None:
            reasons.append(missing_name("topology preset", self.topologies, self.hardware))
        if self.strategy != "none" and self.strategy not in strategy_names():
            reasons.append(f"strategy {self.strategy} not modelled")
        return reasons + self.common.missing()

    def _where(self) -> str:
        if self.single_gpu:
            return f"one {first_known(self.single_gpu, _devices) or self.single_gpu[0]}"
        preset = first_known(self.topologies, _presets) or (self.topologies or ("?",))[0]
        return f"{preset}, {self.gpus} GPUs / {self.nodes} node(s)"

    def describe(self) -> str:
        how = "no DDP wrapper" if self.strategy == "none" else self.strategy
        extras = f", DDP buckets {self.bucket_mb} MiB" if self.strategy in ("ddp", "none") else ""
        extras += ", full recompute" if self.recompute else ""
        extras += f", precision {self.precision}" if self.precision != "auto" else ""
        return f"{how} on {self._where()}: {self.common.describe(self.gpus)}{extras}"

    def _topology(self, gpus: int) -> Topology:
        if self.single_gpu:
            return single_gpu_cluster(first_known(self.single_gpu, _devices) or self.single_gpu[0])
        preset = first_known(self.topologies, _presets) or self.topologies[0]
        return _cluster(preset, gpus, self.nodes if gpus == self.gpus else None)

    def _samples_per_s(self, gpus: int) -> tuple[float, float, bool]:
        """(samples/s, step seconds, fits in memory) of the step on ``gpus`` GPUs."""
        c = self.common
        config = TrainingConfig(
            global_batch=c.micro_batch * gpus,
            micro_batch=c.micro_batch,
            seq_len=c.seq_len,
            dtype=c.dtype,
            optimizer=c.optimizer,
            software_era=c.software_era,
            bucket_size_bytes=self.bucket_mb * MiB,
            gradient_as_bucket_view=self.strategy == "none",
            activation_checkpointing=self.recompute,
            precision=self.precision,
            zero3_per_rank_lists=self.zero3_per_rank_lists,
        )
        ctx = make_context(c.workload(), config, self._topology(gpus))
        strategy = get_strategy("ddp" if self.strategy == "none" else self.strategy)
        scale = self.compute_scale
        fixed = None if scale == 1.0 else (lambda _sim, _step: scale)
        step = simulate_step(strategy, ctx, seed=0, slowdown=config.slowdown(None), compute_scale=fixed)
        seconds = step.step_times_s[0]
        return config.global_batch / seconds, seconds, bool(step.run.memory.peak().fits)

    def predict(self, metric: str) -> Prediction:
        rate, seconds, fits = self._samples_per_s(self.gpus)
        if metric == "step_time_s":
            value = seconds
        elif metric == "tokens_per_s_per_gpu":
            value = rate * self.common.workload().tokens_per_sample / self.gpus
        elif metric == "tflops_per_gpu":
            flops = model_flops_per_step(self.common.workload(), self.common.micro_batch * self.gpus)
            value = flops / seconds / self.gpus / 1e12
        elif metric == "megatron_tflops_per_gpu":
            flops = megatron_flops_per_step(self.common.workload(), self.common.micro_batch * self.gpus)
            value = flops / seconds / self.gpus / 1e12
        else:
            value = 100.0 * rate / (self.gpus * self._samples_per_s(1)[0])
        warning = "" if fits else "the simulated peak memory exceeds the device (out-of-memory verdict)"
        return Prediction(value, self.describe(), warning=warning)


@dataclass(frozen=True, slots=True)
class PSSetup:
    """A parameter-server mode (``ps-sync``, ``ps-async``, ...) with one worker per GPU."""

    hardware: str
    topologies: tuple[str, ...]
    gpus: int
    mode: str
    common: _Common
    gpus_per_worker: int = 1

    @property
    def workers(self) -> int:
        return self.gpus // self.gpus_per_worker

    def missing(self) -> list[str]:
        reasons = []
        if first_known(self.topologies, _presets) is None:
            reasons.append(missing_name("topology preset", self.topologies, self.hardware))
        if self.mode not in PS_MODES:
            reasons.append(f"parameter-server mode {self.mode} not modelled (allowed: {', '.join(PS_MODES)})")
        return reasons + self.common.missing()

    def describe(self) -> str:
        preset = first_known(self.topologies, _presets) or (self.topologies or ("?",))[0]
        if self.gpus_per_worker == 1:
            return f"{self.mode} on {preset}, {self.gpus} workers: {self.common.describe(self.gpus)}"
        return (
            f"{self.mode} on {preset}, {self.workers} workers of {self.gpus_per_worker} GPUs (one push "
            f"per worker): {self.common.describe(self.gpus)}"
        )

    def predict(self, metric: str) -> Prediction:
        c = self.common
        config = TrainingConfig(
            global_batch=c.micro_batch * self.workers,
            micro_batch=c.micro_batch,
            seq_len=c.seq_len,
            dtype=c.dtype,
            optimizer=c.optimizer,
            software_era=c.software_era,
        )
        preset = first_known(self.topologies, _presets) or self.topologies[0]
        loader = load_cluster if self.gpus_per_worker == 1 else _first_gpus(self.gpus_per_worker)
        result = run_what_if(
            c.workload(), [preset], [self.workers], loader=loader, strategies=[self.mode], config=config
        )
        report = next(r for r in result.reports if r.gpus == self.workers)
        if metric == "samples_per_s_per_worker":
            return Prediction(report.samples_per_s / self.workers * self.gpus_per_worker, self.describe())
        return Prediction(100.0 * float(report.scaling_efficiency or 0.0), self.describe())


def _first_gpus(per_worker: int) -> Any:
    """A cluster loader placing worker w on GPU ``w x per_worker``: the first of the consecutive
    ``per_worker`` GPUs it drives (on a machine of exactly that many GPUs, its first GPU)."""

    def load(name: str, *, gpus: int | None = None, nodes: int | None = None) -> Topology:
        full = load_cluster(name, gpus=None if gpus is None else gpus * per_worker, nodes=nodes)
        return full.subset(range(0, full.world_size - per_worker + 1, per_worker))

    return load


def _optional_int(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    return positive_int(entry, key, where) if entry.get(key) is not None else None


def _common(entry: Mapping[str, Any], where: str) -> _Common:
    for key in ("dtype", "optimizer"):
        if not isinstance(entry.get(key), str):
            raise TrainsimError(f"{where}: {key!r} is required (a name)")
    return _Common(
        name_list(entry, "model", where),
        str(entry["dtype"]),
        positive_int(entry, "micro_batch", where),
        _optional_int(entry, "seq_len", where),
        _optional_int(entry, "image_size", where),
        str(entry["optimizer"]),
        _software_era(entry, where),
        attention_mode(entry, where),
    )


def _software_era(entry: Mapping[str, Any], where: str) -> str:
    era = entry.get("software_era", "current")
    if era not in software_eras():
        raise TrainsimError(f"{where}: software_era {era!r}; allowed: {', '.join(software_eras())}")
    return str(era)


def parse_step(entry: Mapping[str, Any], where: str, hardware: str) -> StepSetup:
    """The setup of a ``kind: step`` entry (a preset list in ``topology`` or devices in ``single_gpu``)."""
    single = name_list(entry, "single_gpu", where, required=False)
    presets = name_list(entry, "topology", where, required=not single)
    if single and presets:
        raise TrainsimError(f"{where}: give 'topology' or 'single_gpu', not both")
    gpus = positive_int(entry, "gpus", where)
    if single and gpus != 1:
        raise TrainsimError(f"{where}: 'single_gpu' is for one-GPU rows, got gpus {gpus}")
    recompute = entry.get("activation_checkpointing", False)
    if not isinstance(recompute, bool):
        raise TrainsimError(f"{where}: 'activation_checkpointing' must be true or false")
    strategy = entry.get("strategy")
    if not isinstance(strategy, str):
        raise TrainsimError(f"{where}: 'strategy' is required (ddp, fsdp, zero1..3, hsdp or none)")
    if strategy == "none" and gpus != 1:
        raise TrainsimError(f"{where}: strategy 'none' (no DDP wrapper) is for one GPU")
    lists = entry.get("zero3_per_rank_lists", False)
    if not isinstance(lists, bool):
        raise TrainsimError(f"{where}: 'zero3_per_rank_lists' must be true or false")
    precision = entry.get("precision", "auto")
    if precision not in PRECISION_MODES:
        raise TrainsimError(f"{where}: precision {precision!r}; allowed: {', '.join(PRECISION_MODES)}")
    return StepSetup(
        hardware,
        presets,
        single,
        gpus,
        positive_int(entry, "nodes", where),
        strategy,
        _common(entry, where),
        positive_int(entry, "bucket_mb", where, default=25),
        recompute,
        str(precision),
        zero3_per_rank_lists=lists,
    )


def parse_ps(entry: Mapping[str, Any], where: str, hardware: str) -> PSSetup:
    """The setup of a ``kind: ps`` entry."""
    mode = entry.get("mode")
    if not isinstance(mode, str):
        raise TrainsimError(f"{where}: 'mode' is required (a parameter-server mode)")
    gpus = positive_int(entry, "gpus", where)
    per_worker = positive_int(entry, "gpus_per_worker", where, default=1)
    if gpus % per_worker:
        raise TrainsimError(f"{where}: {gpus} GPUs do not make workers of {per_worker} GPUs each")
    return PSSetup(
        hardware, name_list(entry, "topology", where), gpus, mode, _common(entry, where), per_worker
    )
