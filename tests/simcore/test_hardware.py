"""Device specs: datasheet figures load, are dense (not sparsity) and fail loudly when malformed."""

import pytest

from simcore.errors import TrainsimError
from simcore.hardware import DTYPES, device_names, device_spec, load_device_specs

REQUIRED = [
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "a100-pcie-40gb",
    "a100-pcie-80gb",
    "a10g",
    "h100-sxm",
    "h200-sxm",
    "v100-sxm2-16gb",
    "v100-sxm2-32gb",
    "cpu",
]


def test_every_required_device_is_registered_with_a_source():
    assert set(REQUIRED) <= set(device_names())
    for name in device_names():
        spec = device_spec(name)
        assert spec.name == name
        assert spec.source.strip()
        assert spec.memory_bytes > 0 and spec.memory_bandwidth_Bps > 0
        assert set(spec.peak_flops) <= set(DTYPES)


def test_datasheet_figures_are_dense_si_values():
    a100 = device_spec("a100-sxm-80gb")
    assert a100.flops("bf16") == 312e12  # 624 is the sparsity figure
    assert a100.memory_bandwidth_Bps == 2039e9
    assert a100.memory_bytes == 80 * 2**30
    h100 = device_spec("h100-sxm")
    assert h100.flops("bf16") == 989.5e12
    assert h100.flops("fp8") == 2 * h100.flops("bf16")
    assert device_spec("h200-sxm").memory_bandwidth_Bps == 4.8e12
    assert device_spec("cpu").kind == "cpu"
    assert "placeholder" in device_spec("cpu").source


def test_metas_96_gb_hbm2e_h100_is_the_sxm_die_with_six_hbm2e_stacks():
    """torchtitan's hosts: 2.4 TB/s stated; by hand, H100 PCIe's 2.0 TB/s over 5 HBM2e stacks x 6."""
    part, sxm, pcie = device_spec("h100-sxm-96gb-hbm2e"), device_spec("h100-sxm"), device_spec("h100-pcie")
    assert part.memory_bandwidth_Bps == pytest.approx(pcie.memory_bandwidth_Bps / 5 * 6) == 2.4e12
    assert part.memory_bytes == 6 * 16 * 2**30
    assert part.peak_flops == sxm.peak_flops  # same die and clock; its 500 W is a run setting


def test_unsupported_dtype_names_allowed_ones():
    with pytest.raises(TrainsimError, match="allowed: fp32, fp16"):
        device_spec("v100-sxm2-32gb").flops("bf16")


def test_unknown_device_lists_known_names():
    with pytest.raises(TrainsimError, match=r"known: .*a100-sxm-80gb"):
        device_spec("tpu-v9")


GOOD = "x:\n  kind: gpu\n  memory: 1GiB\n  memory_bandwidth: 100GB/s\n  peak_flops: {fp32: 1TFLOP/s}\n  source: s\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("  source: s\n", ""), r"x\.source is missing"),
        (GOOD + "  colour: red\n", r"x\.colour is not a known key"),
        (GOOD.replace("kind: gpu", "kind: tpu"), "allowed: gpu, cpu"),
        (GOOD.replace("fp32: 1TFLOP/s", "fp64: 1TFLOP/s"), "fp64 is not a known dtype"),
        (GOOD.replace("100GB/s", "fast"), r"x\.memory_bandwidth: .*cannot parse 'fast'"),
        ("[1, 2", "not valid YAML"),
    ],
)
def test_malformed_entries_name_file_and_key(text, message):
    with pytest.raises(TrainsimError, match=message) as info:
        load_device_specs(text, "devices.yaml")
    assert "devices.yaml" in str(info.value)


def test_a_well_formed_entry_parses():
    assert load_device_specs(GOOD, "f.yaml")["x"].flops("fp32") == 1e12


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("1GiB", "8000GiB"), r"x\.memory: 8000GiB is outside the physical range 1GiB to 512GiB"),
        (("100GB/s", "1e-300GB/s"), r"x\.memory_bandwidth: 1e-300GB/s is outside the physical range 50GB/s"),
        (
            ("1TFLOP/s", "1e30"),
            r"x\.peak_flops\.fp32: 1e30 is outside the physical range 1GFLOP/s to 10PFLOP/s",
        ),
        (("kind: gpu", "kind: cpu"), None),  # a CPU rank: 1 GiB and 100 GB/s are inside the cpu ranges
    ],
)
def test_device_figures_must_lie_in_their_physical_ranges(change, message):
    text = GOOD.replace(*change)
    if message is None:
        assert load_device_specs(text, "mine.yaml")["x"].kind == "cpu"
        return
    with pytest.raises(TrainsimError, match=message) as info:
        load_device_specs(text, "mine.yaml")
    assert str(info.value).startswith("mine.yaml: ") and "(source: " in str(info.value)


def test_device_spec_files_refuse_alias_bombs():
    lines = ["x: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    with pytest.raises(TrainsimError, match="aliases are expanded"):
        load_device_specs("\n".join(lines), "mine.yaml")
