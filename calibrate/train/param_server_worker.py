"""The worker side of the parameter server (protocol in :mod:`calibrate.train.param_server`).

A worker keeps a full copy of the model only to compute gradients: every step it computes a
gradient on its data shard from the parameters it last pulled, pushes each server its range of
the gradient, and waits for each server's reply carrying the parameters to use next.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from calibrate.memory_truth.probe import TensorMemoryProbe
from calibrate.train.param_server import HEADER, PUSH, SHUTDOWN, PsLayout, shard_ranges
from calibrate.train.strategies import StepResult

__all__ = ["PsWorker", "flat_parameters"]


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """All parameters in ``model.parameters()`` order as one float32 CPU vector."""
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


class PsWorker:
    """One worker rank: :meth:`train_step` is one push of a gradient and one pull of parameters."""

    def __init__(
        self,
        model: nn.Module,
        layout: PsLayout,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        device: torch.device,
        group: Any = None,
    ) -> None:
        self.model = model.to(device)
        self.eval_model = self.model
        self.layout = layout
        self.loss_fn = loss_fn
        self.device = device
        self.group = group
        numel = sum(p.numel() for p in self.model.parameters())
        self.ranges = shard_ranges(numel, layout.servers)
        self.probe = TensorMemoryProbe(self.model.parameters)
        self._last_compute_s = 0.0
        self.version: list[int] = [0] * layout.servers
        self._started = False

    def _post_receives(self) -> list[tuple[Any, torch.Tensor]]:
        posted = []
        for server, (lo, hi) in enumerate(self.ranges):
            buffer = torch.empty(HEADER + hi - lo)
            posted.append((dist.irecv(buffer, src=server, group=self.group), buffer))
        return posted

    def _pull(self, posted: list[tuple[Any, torch.Tensor]]) -> dict[str, Any]:
        """Wait for every server's reply and load its parameter range into the model."""
        flat = torch.empty(self.ranges[-1][1])
        staleness, staleness_clocks, hold_s = [], [], []
        for server, (work, buffer) in enumerate(posted):
            work.wait()
            lo, hi = self.ranges[server]
            flat[lo:hi] = buffer[HEADER:]
            self.version[server] = int(buffer[0].item())
            staleness.append(int(buffer[1].item()))
            staleness_clocks.append(int(buffer[2].item()))
            hold_s.append(float(buffer[3].item()))
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(flat.to(self.device), self.model.parameters())
        return {"staleness": staleness, "staleness_clocks": staleness_clocks, "ssp_block_s": max(hold_s)}

    def train_step(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        step: int,
        slow_factor: float = 1.0,
        track_memory: bool = False,
    ) -> StepResult:
        """Gradient on this worker's shard, push, pull; sleeps (factor - 1) x compute if slowed."""
        del track_memory  # the worker's memory is a plain model + grads; the tensor probe covers it
        if not self._started:  # the servers' first message: the parameters to start from
            self._pull(self._post_receives())
            self._started = True
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        start = time.perf_counter()
        with self.probe.forward():
            loss = self.loss_fn(self.model(inputs), targets)
        self._sync()
        after_forward = time.perf_counter()
        loss.backward()
        self._sync()
        after_backward = time.perf_counter()
        compute_s = after_backward - start
        slow_sleep_s = (slow_factor - 1.0) * compute_s if slow_factor > 1.0 else 0.0
        if slow_sleep_s:
            time.sleep(slow_sleep_s)
        memory = self.probe.breakdown()
        grad = torch.cat([p.grad.reshape(-1) for p in self.model.parameters()]).float().cpu()  # type: ignore[union-attr]
        self.model.zero_grad(set_to_none=True)
        push_start = time.perf_counter()
        posted = self._post_receives()
        self._send(PUSH, step, grad)
        pull_start = time.perf_counter()
        reply = self._pull(posted)
        end = time.perf_counter()
        return StepResult(
            loss=float(loss.detach()),
            forward_s=after_forward - start,
            backward_s=after_backward - after_forward,
            optimizer_s=0.0,
            slow_sleep_s=slow_sleep_s,
            comm_s=end - push_start,
            memory=memory,
            extra={
                "push_s": pull_start - push_start,
                "pull_s": end - pull_start,
                "version": list(self.version),
                **reply,
            },
        )

    def _sync(self) -> None:
        if self.device.type == "cuda":  # kernels run asynchronously: wait so phase times are real
            torch.cuda.synchronize(self.device)

    def _send(self, kind: float, step: int, grad: torch.Tensor) -> None:
        works = []
        for server, (lo, hi) in enumerate(self.ranges):
            header = torch.tensor([kind, float(step), float(self.version[server]), 0.0])
            message = torch.cat([header, grad[lo:hi]])
            works.append((dist.isend(message, dst=server, group=self.group), message))
        for work, _ in works:
            if work is not None:  # None only for ranks outside the group, which never send here
                work.wait()

    def shutdown(self) -> None:
        """Tell every server this worker is done (its last message; no reply follows)."""
        self._send(SHUTDOWN, -1, torch.zeros(self.ranges[-1][1]))

    def state_tensors(self) -> list[torch.Tensor]:
        return []  # a worker's state is what it pulls; checkpoints live on the servers

    @torch.no_grad()
    def accuracy(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        logits = self.model(inputs.to(self.device))
        return float((logits.argmax(dim=-1) == targets.to(self.device)).float().mean())
