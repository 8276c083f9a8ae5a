"""The claims of the seed study and the hardware article as data, the setting that tests them, results.

The study: M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A
Quantitative Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters",
arXiv 2505.12832, 2025.
The article: "Understanding Distributed Training Strategies and Hardware Effects".

Each :class:`Claim` holds what the source states (quoted), how we read it (which ratio, against which
baseline), the rule that turns simulated numbers into a verdict, and the assumptions behind the
reading. :func:`judge` applies the rule to a claim's *evidence* (the simulated numbers), so a
verdict is always computed, never written down: ``agrees``, ``partly`` or ``disagrees``, or
``untestable`` when the simulation has no case the claim speaks about, or ``not yet simulated``.

The rules (``range``, ``up-to``, ``negated``, ``checks``) and the verdicts are defined in
:mod:`experiments.reproduce_paper.claim_rules` (its names are re-exported here).

The sources give neither GPU counts nor batch sizes; :class:`PaperSetting` fixes our reading of the
setting (``FULL_SETTING`` for the report, ``QUICK_SETTING`` for CI) and every row states it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from experiments.reproduce_paper.claim_rules import (
    AGREES,
    DISAGREES,
    NOT_SIMULATED,
    PARTLY,
    RULES,
    UNTESTABLE,
    Claim,
    describe_rule,
    effect_band,
    judge,
)

__all__ = [
    "AGREES",
    "ARTICLE_TITLE",
    "CLAIMS",
    "DISAGREES",
    "FULL_SETTING",
    "NOT_SIMULATED",
    "PARTLY",
    "QUICK_SETTING",
    "RULES",
    "STUDY",
    "UNTESTABLE",
    "Claim",
    "ClaimResult",
    "PaperSetting",
    "describe_rule",
    "effect_band",
    "judge",
]


STUDY = (
    'M. S. I. Ovi, "Performance Characterization of Distributed Deep Learning Strategies: A Quantitative '
    'Evaluation of DDP, FSDP, and Parameter Server Architectures on GPU Clusters", arXiv 2505.12832, 2025'
)
ARTICLE_TITLE = '"Understanding Distributed Training Strategies and Hardware Effects"'
PAPER = "Ovi, arXiv 2505.12832 (2025), abstract"  # where a claim of the study is quoted from
ARTICLE = f"article {ARTICLE_TITLE}"


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """A claim's simulated evidence, the verdict :func:`judge` gives it, and what it rests on."""

    claim_id: str
    verdict: str
    predicted: str  # one line: the simulator's numbers in the claim's terms
    evidence: tuple[float, ...]
    labels: tuple[str, ...]  # what each evidence value is (cluster, model, condition, check)
    details: tuple[str, ...] = ()  # extra lines: per-point numbers, why a check failed
    assumptions: tuple[str, ...] = ()  # beyond the claim's own: the setting actually simulated

    @classmethod
    def judged(
        cls,
        claim_id: str,
        predicted: str,
        evidence: Sequence[float],
        labels: Sequence[str],
        details: Sequence[str] = (),
        assumptions: Sequence[str] = (),
    ) -> ClaimResult:
        """A result whose verdict is :func:`judge` of the claim's rule on ``evidence``."""
        values = tuple(float(v) for v in evidence)
        verdict = judge(CLAIMS[claim_id], values)
        return cls(claim_id, verdict, predicted, values, tuple(labels), tuple(details), tuple(assumptions))

    def to_record(self) -> dict[str, object]:
        claim = CLAIMS[self.claim_id]
        return {
            "id": self.claim_id,
            "source": claim.source,
            "statement": claim.statement,
            "reading": claim.reading,
            "rule": describe_rule(claim),
            "verdict": self.verdict,
            "predicted": self.predicted,
            "evidence": dict(zip(self.labels, self.evidence, strict=True)),
            "details": list(self.details),
            "assumptions": [*claim.assumptions, *self.assumptions],
        }


@dataclass(frozen=True, slots=True)
class PaperSetting:
    """Our reading of the sources' setting: clusters, models, batch, PS conditions, hardware sweeps."""

    a100_cluster: str = "dgx-a100"  # 8x A100 SXM 80GB on NVSwitch, InfiniBand between servers
    a10g_cluster: str = "g5.48xlarge"  # 8x A10G 24GB on PCIe, 100 Gb/s Ethernet between servers
    gpus: int = 8  # one server of each class
    models: tuple[str, ...] = (
        "resnet50-cifar10",
        "vgg16-cifar10",
        "densenet121-cifar10",
        "efficientnetv2-s-cifar10",
        "convnext-large-cifar10",
    )
    micro_batch: int = 128  # per GPU: the usual CIFAR-10 batch
    dtype: str = "bf16"  # automatic mixed precision with fp32 master weights
    optimizer: str = "sgd-momentum"
    ps_models: tuple[str, ...] = ("resnet50-cifar10", "vgg16-cifar10")
    ps_placement: str = "dedicated"  # one server node of the cluster's type, a shard per GPU
    ps_steps: int = 8
    ps_conditions: tuple[str, ...] = ("a100", "a10g", "a100-jitter", "a10g-jitter", "mixed")
    jitter_sigma: float = 0.1  # lognormal compute jitter per step and worker
    ps_gain_floor: float = 0.05  # the asynchronous gain a mitigated run is judged against
    nvlink_presets: tuple[str, ...] = ("dgx-a100", "hgx-h100", "hgx-h200")
    nvlink_gpus: tuple[int, ...] = (2, 4, 8)
    message_bytes: int = 1 << 30  # nccl-tests' large-message end, where bus bandwidth plateaus
    fabric_presets: tuple[tuple[str, tuple[str, ...]], ...] = (
        ("NVSwitch", ("dgx-a100", "hgx-h100")),
        ("NVL groups", ("pcie-nvl-pairs",)),
        ("PCIe", ("g5.48xlarge",)),
    )
    fabric_gpus: tuple[int, ...] = (2, 4, 8, 16)
    article_model: str = "gpt2-xl"  # fits a DDP replica on an 80 GB A100, so DDP is a real option
    article_seq_len: int = 1024
    article_micro_batch: int = 4
    article_global_batch: int = 32
    article_example: str = "mistral-7b"  # the article's own memory example
    seed: int = 0

    def describe(self) -> str:
        return (
            f"{self.gpus} GPUs: {self.a100_cluster} (A100) and {self.a10g_cluster} (A10G); CIFAR-10 32x32, "
            f"micro-batch {self.micro_batch}/GPU, {self.dtype} AMP, {self.optimizer}"
        )


FULL_SETTING = PaperSetting()
QUICK_SETTING = PaperSetting(
    models=("resnet50-cifar10", "vgg16-cifar10"),
    ps_models=("resnet50-cifar10",),
    ps_steps=4,
    ps_conditions=("a100", "a10g-jitter", "mixed"),
    nvlink_presets=("dgx-a100", "hgx-h100"),
    nvlink_gpus=(2, 8),
    fabric_presets=(
        ("NVSwitch", ("dgx-a100",)),
        ("NVL groups", ("pcie-nvl-pairs",)),
        ("PCIe", ("g5.48xlarge",)),
    ),
    fabric_gpus=(2, 4, 8),
)

_SETTING = "setting: our reading (the sources give no GPU count or batch size); see the report header"
_CNN = "models: the seed study's CNNs on CIFAR-10 (32x32) as trainsim workload presets"
_PS = (
    "parameter server: dedicated server node (8 shards, one per GPU and NIC), training time = time to "
    "apply the same number of gradients (samples); conditions: each cluster homogeneous, with lognormal "
    "compute jitter, and 8 A100 + 8 A10G workers (the paper's 'workers were not identical'); the PS "
    "uses that extra server node, DDP only the workers"
)
_ARTICLE_MODEL = (
    "model: GPT-2 XL, seq 1024, micro-batch 4, global batch 32, bf16 + fp32 master, AdamW "
    "(the article names no model for this comparison; GPT-2 XL fits a DDP replica on 80 GB)"
)
_PEAK = "peak memory = tensors only (as torch.cuda.max_memory_allocated; CUDA context excluded)"

CLAIMS: dict[str, Claim] = {
    c.id: c
    for c in (
        Claim(
            "ddp-vs-fsdp",
            PAPER,
            "DDP achieves a 2-3x speedup in training throughput for standard architectures",
            "primary reading: DDP throughput / FSDP throughput on the same cluster and GPUs. The abstract "
            "pairs it with FSDP's memory reduction (also against DDP), and the study's author adds that DDP was 'the "
            "fastest option ... and it was not close' for models that fit",
            "range",
            2.0,
            3.0,
            claimed="2-3x",
            assumptions=(_SETTING, _CNN),
        ),
        Claim(
            "ddp-vs-ps",
            PAPER,
            "DDP achieves a 2-3x speedup in training throughput for standard architectures",
            "alternative reading: DDP throughput / synchronous parameter-server throughput, same workers",
            "range",
            2.0,
            3.0,
            claimed="2-3x",
            assumptions=(_SETTING, _CNN, _PS),
        ),
        Claim(
            "ddp-vs-1gpu",
            PAPER,
            "DDP achieves a 2-3x speedup in training throughput for standard architectures",
            "alternative reading: DDP on all GPUs / one GPU of the same cluster (same global batch, the "
            "one GPU accumulating gradients)",
            "range",
            2.0,
            3.0,
            claimed="2-3x",
            assumptions=(_SETTING, _CNN),
        ),
        Claim(
            "fsdp-memory",
            PAPER,
            "FSDP demonstrates a 4-6x reduction in peak memory usage",
            "DDP peak memory / FSDP peak memory per GPU (FULL_SHARD); it depends on the model (parameter "
            "bytes vs activations) and on the GPU count (the state is divided by it)",
            "range",
            4.0,
            6.0,
            claimed="4-6x",
            assumptions=(_SETTING, _CNN, _PEAK),
        ),
        Claim(
            "async-time",
            PAPER,
            "Asynchronous PS reduced training time by up to 28% compared to synchronous approaches",
            "1 - T(async) / T(sync) for the same number of applied gradients, per model and condition; "
            "the largest is the simulator's 'up to'",
            "up-to",
            0.28,
            tolerance=0.25,
            unit="",
            null=0.0,
            claimed="up to 28%",
            assumptions=(_SETTING, _CNN, _PS),
        ),
        Claim(
            "async-accuracy",
            PAPER,
            "it incurred significant accuracy penalties (ranging from 4% to 17%) due to gradient staleness",
            "accuracy points lost, ESTIMATED from the simulated staleness (mean, p99) with "
            "simcore.staleness.penalty.estimate_accuracy_penalty (a small-model delayed-SGD study, not these CNNs)",
            "range",
            4.0,
            17.0,
            unit=" points",
            null=0.0,
            claimed="4-17 points",
            assumptions=(_SETTING, _CNN, _PS),
        ),
        Claim(
            "mitigated-negates",
            PAPER,
            "a modified, staleness-mitigating asynchronous protocol ... introduced synchronization overheads "
            "that negated throughput gains",
            "kept share of the async gain = (T(sync) - T(mitigated)) / (T(sync) - T(async)) per model and "
            "condition where async gained; the protocol is a version check before every push and a re-pull "
            "+ recompute past staleness 3 (simcore.paramserver ps-mitigated)",
            "negated",
            tolerance=0.25,
            unit="",
            claimed="gain negated",
            assumptions=(_SETTING, _CNN, _PS),
        ),
        Claim(
            "nvlink-10x",
            ARTICLE,
            "NVLink vs. forced PCIe: Up to 10x bandwidth difference",
            "all-reduce bus bandwidth (nccl-tests definition, 1 GiB) of a preset / the same preset with its "
            "NVLink and NVSwitch links removed (GPU peer traffic over PCIe), per preset and GPU count",
            "up-to",
            10.0,
            tolerance=0.25,
            claimed="up to 10x",
            assumptions=(
                "forced PCIe = peer-to-peer over the PCIe switches/host bridges; a real NCCL_P2P_DISABLE run "
                "stages through host memory and would be slower still",
            ),
        ),
        Claim(
            "fabric-scaling",
            ARTICLE,
            "NVSwitch maintains consistent bandwidth as GPU count increases. NVL performs well within a "
            "group but degrades when crossing groups. PCIe-based systems show the steepest decline",
            "all-reduce bus bandwidth (1 GiB) against GPU count for NVSwitch, NVL-group and PCIe presets; "
            "checks: NVSwitch keeps >= 80% of its 2-GPU figure; NVL within a group >= 80% of NVSwitch's and "
            "<= 50% once crossing groups; PCIe keeps the smallest share of its 2-GPU figure",
            "checks",
            claimed="qualitative",
            assumptions=("counts beyond one server add servers on the preset's own fabric",),
        ),
        Claim(
            "fsdp-close-on-nvswitch",
            ARTICLE,
            "On fast fabrics (NVSwitch) FSDP closely matches DDP in speed ... on slow fabrics (cross-group "
            "NVL or PCIe) communication dominates runtime. Sharding strategies lose much of their advantage",
            "FSDP step time / DDP step time; checks: <= 1.10 on NVSwitch (close); > 1.10 on forced PCIe and "
            "on cross-group NVL (losing); larger on forced PCIe than on NVSwitch",
            "checks",
            claimed="qualitative",
            assumptions=(_ARTICLE_MODEL, _PEAK),
        ),
        Claim(
            "zero-stages",
            ARTICLE,
            "Memory savings decrease predictably across ZeRO stages, but performance varies based on "
            "hardware ... If spanning multiple NVL groups or using PCIe ... DDP or ZeRO-1 may be preferable",
            "per-GPU peak and step time of DDP, ZeRO-1/2/3 on NVSwitch and forced PCIe; checks: peak falls "
            "stage by stage; ZeRO-3's slowdown vs DDP is larger on PCIe; on PCIe ZeRO-1 is no slower than "
            "ZeRO-3",
            "checks",
            claimed="qualitative",
            assumptions=(_ARTICLE_MODEL, _PEAK),
        ),
        Claim(
            "mistral-memory",
            ARTICLE,
            "Mistral-7B with Adam in BF16 ... Total: ~87 GB per GPU. An A100 GPU has only 80 GB, so full "
            "replication is impossible",
            "checks: model state (bf16 parameters and gradients, fp32 Adam moments, no master copy) within "
            "10% of 87 GB; DDP's simulated peak exceeds the 80 GB A100",
            "checks",
            claimed="~87 GB > 80 GB",
            assumptions=("seq 1024, micro-batch 4 on dgx-a100 (the article gives no batch)",),
        ),
    )
}
