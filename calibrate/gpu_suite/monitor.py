"""SM clock, power and temperature of a GPU while it works: pynvml if installed, else ``nvidia-smi``,
else "not available" (a CPU run, or a machine without the NVIDIA tools).

Each sample is a plain dict of numbers (None where the source does not give one), so a record can
carry it as it is.
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

__all__ = ["NOT_AVAILABLE", "QUERY", "Monitor", "open_monitor", "parse_smi_line"]

NOT_AVAILABLE = "not available"
# nvidia-smi --query-gpu fields, in this order (nvidia-smi --help-query-gpu names them)
QUERY = (
    "clocks.sm",
    "clocks.max.sm",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "clocks_throttle_reasons.active",
    "driver_version",
)
_NAMES = (
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "power_w",
    "power_limit_w",
    "temperature_c",
    "throttle_reasons",
    "driver",
)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def parse_smi_line(line: str) -> dict[str, Any]:
    """One ``nvidia-smi --query-gpu=QUERY --format=csv,noheader,nounits`` line as a sample."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(QUERY):
        return {"source": "nvidia-smi", "error": f"unexpected line {line.strip()!r}"}
    sample: dict[str, Any] = {"source": "nvidia-smi"}
    for name, cell in zip(_NAMES, cells, strict=True):
        sample[name] = cell if name in ("throttle_reasons", "driver") else _number(cell)
    return sample


class Monitor:
    """Samples one GPU; ``source`` says how (``pynvml``, ``nvidia-smi`` or :data:`NOT_AVAILABLE`)."""

    def __init__(self, source: str, read: Callable[[], dict[str, Any]]) -> None:
        self.source = source
        self._read = read

    def sample(self) -> dict[str, Any]:
        try:
            return self._read()
        except Exception as exc:
            return {"source": self.source, "error": f"{type(exc).__name__}: {exc}"}


def _pynvml_monitor(index: int) -> Monitor | None:
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None

    def read() -> dict[str, Any]:
        return {
            "source": "pynvml",
            "sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "sm_clock_max_mhz": float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "power_w": nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "power_limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0,
            "temperature_c": float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            "throttle_reasons": hex(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle)),
            "driver": str(nvml.nvmlSystemGetDriverVersion()),
        }

    return Monitor("pynvml", read)


def _smi_monitor(index: int) -> Monitor | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    command = [smi, f"--id={index}", f"--query-gpu={','.join(QUERY)}", "--format=csv,noheader,nounits"]

    def read() -> dict[str, Any]:
        done = subprocess.run(command, capture_output=True, text=True, timeout=10, check=False)
        if done.returncode != 0:
            return {"source": "nvidia-smi", "error": done.stderr.strip()[:200]}
        return parse_smi_line(done.stdout.strip().splitlines()[0])

    with contextlib.suppress(Exception):
        if "error" not in read():
            return Monitor("nvidia-smi", read)
    return None


def open_monitor(device_type: str, index: int = 0) -> Monitor:
    """The best monitor for this device (a CPU gets the :data:`NOT_AVAILABLE` one)."""
    if device_type == "cuda":
        found = _pynvml_monitor(index) or _smi_monitor(index)
        if found is not None:
            return found
    return Monitor(NOT_AVAILABLE, lambda: {"source": NOT_AVAILABLE})
