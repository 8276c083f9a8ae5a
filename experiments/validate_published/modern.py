"""The modern runs (``data/modern_runs.csv``): torchtitan and NeMo training of 2024-25, as their
own categories (``modern_runs`` for throughput, ``modern_runs_memory`` for peak memory).

Each row's ``layout`` column (``dp=8 tp=1 pp=1 cp=1 ep=1 vpp=1 sp=off mbs=2 recompute=full
compile=on fp8=on``) is parsed into settings, and every setting is looked up in one table
(``data/modern.yaml``, ``settings``): what it sets in the training config or the parallel options,
or what the simulator still needs to run it. A row with a setting that is still needed is *not
expressible*, with the need as its reason; deleting the ``needs`` line of a setting enables it (its
config and options are then applied). Hardware strings map to topology presets, workloads to model
presets, strategies to the data-parallel axis, in the same file.

A row is run with :func:`simcore.parallel.simulate_parallel_step`: global batch = the row's
``batch``, micro-batch ``mbs``, the row's sequence, AdamW; throughput per GPU is
``batch x seq / step time / gpus``, peak memory the report's peak (the largest stage's) as torchtitan logs it, the allocator's reserved peak
(:func:`reserved_bytes`: without the CUDA context and NCCL's buffers).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from experiments.validate_published.base import Prediction, first_known, missing_name
from experiments.validate_published.mapping import RowPlan
from experiments.validate_published.metrics import METRICS
from experiments.validate_published.published import PublishedRow
from simcore.errors import TrainsimError
from simcore.parallel import ParallelLayout, ParallelOptions, simulate_parallel_step
from simcore.parallel.layout import parse_stage_layers
from simcore.strategies.base import TrainingConfig
from simcore.workload.loader import load_workload
from simcore.workload.loader import preset_names as model_preset_names
from simcore.yamlload import safe_load
from topologies import load_cluster
from topologies import preset_names as cluster_preset_names

__all__ = [
    "MODERN_COLUMNS",
    "MODERN_CSV",
    "MODERN_TABLE",
    "ModernSetup",
    "SettingsTable",
    "load_modern",
    "load_table",
    "modern_plan",
    "parse_layout",
]

DATA = Path(__file__).parent / "data"
MODERN_CSV = DATA / "modern_runs.csv"
MODERN_TABLE = DATA / "modern.yaml"
MODERN_COLUMNS = (
    "id", "category", "hardware", "gpus", "nodes", "interconnect", "workload", "strategy", "layout",
    "precision", "batch", "seq", "metric", "value", "unit", "source", "where", "notes",
)  # fmt: skip
LAYOUT_KEYS = ("dp", "tp", "pp", "cp", "ep", "vpp", "sp", "mbs", "recompute", "compile", "fp8")
_DEGREES = ("dp", "tp", "pp", "cp", "ep", "vpp", "mbs")
# the layout's own settings looked up in the table (degrees and mbs are the layout itself)
_LOOKED_UP = ("sp", "recompute", "compile", "fp8", "asynctp")
_PAIR = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|$)")
_METRIC = {"throughput per GPU": "tokens_per_s_per_gpu", "peak memory per GPU": "peak_memory_gib"}
_CATEGORY = {"tokens_per_s_per_gpu": "modern_runs", "peak_memory_gib": "modern_runs_memory"}
GiB = 2**30


def parse_layout(text: str, where: str) -> dict[str, str]:
    """``key=value`` pairs of a layout cell (a value may hold spaces: ``recompute=not stated``)."""
    pairs = {key: value.strip() for key, value in _PAIR.findall(text.strip())}
    missing = [k for k in LAYOUT_KEYS if k not in pairs]
    if missing:
        raise TrainsimError(f"{where}: layout {text!r} lacks {', '.join(missing)}")
    for key in _DEGREES:
        if not pairs[key].isdigit() or int(pairs[key]) < 1:
            raise TrainsimError(f"{where}: layout {key}={pairs[key]!r} is not a positive integer")
    return pairs


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting's entry: what it sets, or what the simulator needs before it can run it."""

    config: Mapping[str, Any]
    options: Mapping[str, Any]
    layout: Mapping[str, Any]
    needs: str = ""
    approximate: str = ""


@dataclass(frozen=True, slots=True)
class SettingsTable:
    """``data/modern.yaml``: settings, hardware, workloads and strategies."""

    settings: Mapping[str, Setting]
    hardware: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]  # topology presets, settings
    workloads: Mapping[str, tuple[str, ...]]
    # strategy, extra options, settings of the framework's own defaults (names in ``settings``)
    strategies: Mapping[str, tuple[str, Mapping[str, Any], tuple[str, ...]]]
    quick: tuple[str, ...]
    # settings of the framework recipe a (strategy, workload) ran with, where the recipe's file
    # states them: applied after the row's own (they override the layout column's guesses)
    recipes: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)


def _setting(name: str, entry: Any) -> Setting:
    allowed = ("config", "options", "layout", "needs", "approximate")
    if not isinstance(entry, Mapping) or not set(entry) <= set(allowed):
        raise TrainsimError(f"modern.yaml setting {name!r}: keys allowed are {', '.join(allowed)}")
    config, options, layout = (dict(entry.get(k) or {}) for k in ("config", "options", "layout"))
    needs, approximate = (" ".join(str(entry.get(k, "")).split()) for k in ("needs", "approximate"))
    return Setting(config, options, layout, needs, approximate)


def load_table(path: Path = MODERN_TABLE) -> SettingsTable:
    """The settings table, validated (an entry with an unknown key is an error naming it)."""
    with path.open(encoding="utf-8") as handle:
        data = safe_load(handle) or {}
    settings = {str(k): _setting(str(k), v) for k, v in (data.get("settings") or {}).items()}
    hardware = {
        str(k): (tuple(v.get("topology", ())), tuple(v.get("settings", ())))
        for k, v in (data.get("hardware") or {}).items()
    }
    for name, (_, wanted) in hardware.items():
        unknown = [s for s in wanted if s not in settings]
        if unknown:
            raise TrainsimError(f"modern.yaml hardware {name!r}: setting {unknown[0]!r} is not in settings")
    workloads = {str(k): tuple(v) for k, v in (data.get("workloads") or {}).items()}
    strategies = {
        str(k): (str(v["strategy"]), dict(v.get("options") or {}), tuple(v.get("settings", ())))
        for k, v in (data.get("strategies") or {}).items()
    }
    for name, (_, _, wanted) in strategies.items():
        unknown = [s for s in wanted if s not in settings]
        if unknown:
            raise TrainsimError(f"modern.yaml strategy {name!r}: setting {unknown[0]!r} is not in settings")
    recipes: dict[tuple[str, str], tuple[str, ...]] = {}
    for strategy, entries in (data.get("recipes") or {}).items():
        for workload, wanted in (entries or {}).items():
            unknown = [s for s in wanted or () if s not in settings]
            if unknown or strategy not in strategies or workload not in workloads:
                what = (
                    f"setting {unknown[0]!r} is not in settings"
                    if unknown
                    else "is not a strategy x workload"
                )
                raise TrainsimError(f"modern.yaml recipe {strategy!r} / {workload!r}: {what}")
            recipes[str(strategy), str(workload)] = tuple(wanted or ())
    return SettingsTable(settings, hardware, workloads, strategies, tuple(data.get("quick") or ()), recipes)


@dataclass(frozen=True, slots=True)
class ModernSetup:
    """A modern run as the simulator runs it: presets, layout, config and options, and what blocks it."""

    hardware: str
    topologies: tuple[str, ...]
    models: tuple[str, ...]
    strategy: str
    gpus: int
    nodes: int
    layout: ParallelLayout
    global_batch: int
    micro_batch: int
    seq_len: int
    config: tuple[tuple[str, Any], ...]
    options: tuple[tuple[str, Any], ...]
    needs: tuple[str, ...]
    approximations: tuple[str, ...]

    def _model(self) -> str | None:
        found = first_known(self.models, model_preset_names)
        if found is not None:
            return found
        return next(
            (str(DATA / m) for m in self.models if m.endswith(".json") and (DATA / m).is_file()), None
        )

    def missing(self) -> list[str]:
        reasons = [f"needs {need}" for need in self.needs]
        if first_known(self.topologies, cluster_preset_names) is None:
            reasons.append(missing_name("topology preset", self.topologies, self.hardware))
        if self._model() is None:
            reasons.append(missing_name("model preset", self.models))
        return reasons

    def describe(self) -> str:
        preset = first_known(self.topologies, cluster_preset_names) or (self.topologies or ("?",))[0]
        model = Path(self._model() or self.models[0]).stem
        l = self.layout  # noqa: E741 - the layout's degrees, read below
        dp = self.gpus // (l.tp * l.pp * l.cp)
        degrees = f"dp{dp} tp{l.tp} pp{l.pp} cp{l.cp}" + (f" vpp{l.vpp}" if l.vpp > 1 else "")
        settings = ", ".join(f"{k}={v}" for k, v in (*self.config, *self.options))
        return (
            f"{self.strategy} {degrees} on {preset}, {self.gpus} GPUs: {model} seq {self.seq_len}, "
            f"batch {self.global_batch} (micro {self.micro_batch}), adamw; {settings}"
        )

    def _run(self) -> tuple[Any, TrainingConfig]:
        model, preset = self._model(), first_known(self.topologies, cluster_preset_names)
        if model is None or preset is None:
            raise TrainsimError(f"{self.hardware}: no preset to run ({'; '.join(self.missing())})")
        config = TrainingConfig(
            global_batch=self.global_batch, micro_batch=self.micro_batch, seq_len=self.seq_len,
            dtype="bf16", optimizer="adamw",
        )  # fmt: skip
        config = _with(config, dict(self.config), "the training config")
        options = _with(ParallelOptions(), dict(self.options), "the parallel options")
        # activations in bf16 whatever the GEMMs run in (FP8 recipes keep tensors in bf16)
        workload = load_workload(model, seq_len=self.seq_len, dtype="bf16")
        topology = load_cluster(preset, gpus=self.gpus, nodes=self.nodes)
        result = simulate_parallel_step(
            workload, config, topology, self.strategy, self.layout, options, cluster=preset, trace=False
        )
        return result.report, config

    def predict(self, metric: str) -> Prediction:
        report, config = self._run()
        if metric == "tokens_per_s_per_gpu":
            value = self.global_batch * self.seq_len / report.step_time_s / self.gpus
        else:
            value = reserved_bytes(report, config.fragmentation("gpu")) / GiB
        warning = (
            "" if report.fits else "the simulated peak memory exceeds the device (out-of-memory verdict)"
        )
        return Prediction(value, self.describe(), warning=warning)


def reserved_bytes(report: Any, fragmentation: float) -> float:
    """The report's peak as torchtitan logs its memory: ``torch.cuda.max_memory_reserved``, the
    caching allocator's reserved peak (torchtitan 9dec370 ``utils/metrics.py`` DeviceMemoryMonitor
    ``max_reserved_gib`` from ``reserved_bytes.all.peak``, printed by ``train.py`` as ``memory:``),
    which holds the tensors and the allocator's cached free blocks but not the CUDA context or NCCL's
    own buffers: the peak less that runtime share of ``overhead`` (the rest of ``overhead`` is the
    fragmentation charged on the tensors, :func:`simcore.compute.memory.allocator_peak`)."""
    breakdown = report.memory_breakdown
    tensors = math.fsum(v for k, v in breakdown.items() if k != "overhead")
    runtime = max(0.0, breakdown.get("overhead", 0.0) - fragmentation * tensors)
    return float(report.peak_memory_bytes) - runtime


def _with(base: Any, changes: Mapping[str, Any], what: str) -> Any:
    known = {f.name for f in fields(base)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise TrainsimError(
            f"{what} has no field {unknown[0]!r} (the feature it enables is not in this build)"
        )
    return replace(base, **changes)


@dataclass(frozen=True, slots=True)
class _Resolved:
    config: dict[str, Any]
    options: dict[str, Any]
    layout: dict[str, Any]
    needs: list[str]
    approximations: list[str]


def _resolve(names: Sequence[str], table: SettingsTable, where: str) -> _Resolved:
    out = _Resolved({}, {}, {}, [], [])
    for name in names:
        setting = table.settings.get(name)
        if setting is None:
            raise TrainsimError(f"{where}: setting {name!r} is not in modern.yaml's settings table")
        if setting.needs and setting.approximate:
            out.approximations.append(f"approximated: {setting.approximate} (needs {setting.needs})")
        elif setting.needs:
            out.needs.append(setting.needs)
        else:
            out.config.update(setting.config)
            out.options.update(setting.options)
            out.layout.update({k: tuple(v) if isinstance(v, list) else v for k, v in setting.layout.items()})
        if setting.approximate and not setting.needs:
            out.approximations.append(f"approximated: {setting.approximate}")
    return out


def _row_settings(
    row: Mapping[str, str], pairs: Mapping[str, str], table: SettingsTable, where: str
) -> list[str]:
    hardware = table.hardware.get(row["hardware"])
    if hardware is None:
        raise TrainsimError(f"{where}: hardware {row['hardware']!r} is not in modern.yaml's hardware table")
    names = [f"{k}={pairs[k]}" for k in _LOOKED_UP if k in pairs]
    return [*names, f"precision={row['precision']}", *hardware[1]]


def _uneven(models: Sequence[str], layout: ParallelLayout) -> bool:
    """Whether the model's blocks do not divide over pp x vpp stages (a model not found: no)."""
    model = first_known(models, model_preset_names)
    dims = load_workload(model).dims if model is not None and layout.pp > 1 else None
    return dims is not None and dims.layers % (layout.pp * layout.vpp) != 0


def modern_plan(row: Mapping[str, str], table: SettingsTable) -> RowPlan:
    """The plan of one modern row (a :class:`RowPlan` the shared evaluator runs)."""
    where = f"modern_runs.csv row {row['id']}"
    pairs = parse_layout(row["layout"], where)
    metric = METRICS[_METRIC[row["metric"].split(" (")[0]]]
    if metric.unit != row["unit"]:
        raise TrainsimError(f"{where}: metric {metric.name} is in {metric.unit}, the row in {row['unit']}")
    d = {k: int(pairs[k]) for k in _DEGREES}
    if d["dp"] * d["tp"] * d["pp"] * d["cp"] != int(row["gpus"]):
        raise TrainsimError(f"{where}: dp x tp x pp x cp = {d['dp'] * d['tp'] * d['pp'] * d['cp']}, not gpus")
    strategy = table.strategies.get(row["strategy"])
    models = table.workloads.get(row["workload"])
    if strategy is None or models is None:
        raise TrainsimError(
            f"{where}: strategy or workload not in modern.yaml ({row['strategy']!r}, {row['workload']!r})"
        )
    layout = ParallelLayout(tp=d["tp"], pp=d["pp"], cp=d["cp"], ep=d["ep"], vpp=d["vpp"])
    names = _row_settings(row, pairs, table, where) + (["stages=uneven"] if _uneven(models, layout) else [])
    names += [n for n in strategy[2] if n not in names]
    names += list(table.recipes.get((row["strategy"], row["workload"]), ()))
    resolved = _resolve(names, table, where)
    split = resolved.layout.get("stage_layers")
    if isinstance(split, str):  # a --pp-layers form (torchtitan, first:F,last:L): the model's blocks
        dims = load_workload(first_known(models, model_preset_names) or models[0]).dims
        assert dims is not None  # a pipelined row's model is a transformer
        resolved.layout["stage_layers"] = parse_stage_layers(split, layout.pp, layout.vpp, dims.layers)
    layout = _with(layout, resolved.layout, "the parallel layout")
    topologies = table.hardware[row["hardware"]][0]
    setup = ModernSetup(
        row["hardware"], topologies, models, strategy[0], int(row["gpus"]), int(row["nodes"]), layout,
        int(row["batch"]), d["mbs"], int(row["seq"]),
        tuple(sorted(resolved.config.items())), tuple(sorted({**resolved.options, **strategy[1]}.items())),
        tuple(resolved.needs), tuple(resolved.approximations),
    )  # fmt: skip
    source = f"{row['source']} ({row['where']}) [note: {row['notes']}]"
    published = PublishedRow(
        row["id"], row["category"], row["hardware"], int(row["gpus"]), int(row["nodes"]),
        row["interconnect"], row["workload"], f"{row['strategy']}; {row['layout']}", row["metric"],
        float(row["value"]), row["unit"], source,
    )  # fmt: skip
    note = "; ".join(setup.approximations)
    return RowPlan(published, "modern", _CATEGORY[metric.name], metric, setup, (), note, row["hardware"], "")


def load_modern(
    path: Path = MODERN_CSV, table_path: Path = MODERN_TABLE
) -> tuple[list[RowPlan], tuple[str, ...]]:
    """Every modern row's plan, in file order, and the rows ``--quick`` runs."""
    table = load_table(table_path)
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != MODERN_COLUMNS:
            raise TrainsimError(f"{path.name}: columns {reader.fieldnames} are not {list(MODERN_COLUMNS)}")
        plans = [modern_plan(row, table) for row in reader]
    unknown = sorted(set(table.quick) - {str(p.row.id) for p in plans})
    if unknown:
        raise TrainsimError(f"modern.yaml: quick lists rows that do not exist: {unknown}")
    return plans, table.quick
