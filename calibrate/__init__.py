"""Calibration: jobs that measure real clusters (torchrun, gloo on CPU, NCCL on GPU), parsers for
standard tools' output, and fitting of a profile the simulator reads as plain JSON.

torch is imported only inside the jobs, never by the simulator.
"""

import importlib.util as _importlib_util
import os as _os
import sys as _sys
import types as _types

if _importlib_util.find_spec("torch") is None:  # pragma: no cover - exercised without torch
    _previous_hook = _sys.excepthook

    def _torch_missing(
        exc_type: type[BaseException], exc: BaseException, tb: _types.TracebackType | None
    ) -> None:
        """A job run without torch ends with one clear line instead of an import traceback."""
        if (
            issubclass(exc_type, ModuleNotFoundError)
            and str(getattr(exc, "name", "")).split(".")[0] == "torch"
        ):
            print(
                "error: calibration jobs need torch, which is not installed; "
                "install it with `pip install 'trainsim[calibrate]'` (or the torch build for your platform)",
                file=_sys.stderr,
                flush=True,
            )
            _os._exit(2)
        _previous_hook(exc_type, exc, tb)

    _sys.excepthook = _torch_missing
