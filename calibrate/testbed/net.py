"""Network plumbing of the emulated cluster: namespaces, a bridge, veth links shaped with tc.

Layout for ``n`` nodes, every piece inside network namespaces this module creates (nothing is
added to the namespace the caller runs in, so the host's own interfaces, firewall and routes are
never touched)::

    namespace <tag>-sw :  bridge br0 ── port p0 ── ... ── port p{n-1}
                                         │veth              │veth
    namespace <tag>-0  :  eth0 10.213.0.1/24        namespace <tag>-{n-1}: eth0 10.213.0.n/24

Each link is shaped in both directions (egress of ``eth<i>`` and of ``p<i>``): ``tbf`` limits the
rate, and ``netem`` adds the one-way delay when asked for one (kernels without
``CONFIG_NET_SCH_NETEM`` cannot delay; :func:`netem_available` tells). Deleting the namespaces
removes every interface, bridge and qdisc with them; a namespace whose name is deleted lives on
while a process runs inside it, so :func:`clean_namespace` kills those first.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from simcore.errors import TrainsimError

__all__ = [
    "LinkShape",
    "NamespaceCleanup",
    "Testbed",
    "TestbedError",
    "can_create_namespaces",
    "clean_namespace",
    "list_namespaces",
    "namespace_pids",
    "netem_available",
    "shaping_commands",
    "stale_namespaces",
    "testbed_namespaces",
]

SUBNET = "10.213.0"  # private addresses, only ever configured inside our own namespaces
_TIMEOUT_S = 30


class TestbedError(TrainsimError):
    """The emulated cluster cannot be built here (not root, no iproute2, kernel lacks a qdisc)."""

    __test__ = False  # not a pytest test class, despite the name


@dataclass(frozen=True, slots=True)
class LinkShape:
    """What every node's link to the switch looks like, in each direction."""

    bandwidth_Bps: float
    delay_s: float = 0.0

    @property
    def burst_bytes(self) -> int:
        # At least one 64 KiB GSO segment (veth hands tbf whole segments), else 1 ms at line rate.
        return max(65536, int(self.bandwidth_Bps * 1e-3))


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_TIMEOUT_S)
    if check and result.returncode != 0:
        raise TestbedError(f"'ip {' '.join(args)}' failed: {result.stderr.strip()}")
    return result


def can_create_namespaces() -> str | None:
    """None when this process may build a testbed, else why not (for skips and error messages)."""
    if os.name != "posix" or os.geteuid() != 0:
        return "the testbed needs root (network namespaces and tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the testbed needs '{tool}' from iproute2"
    probe = f"tsprobe-{os.getpid()}"
    created = _ip("netns", "add", probe, check=False)
    if created.returncode != 0:
        return f"'ip netns add' does not work here: {created.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def netem_available(namespace: str, device: str) -> bool:
    """Whether this kernel has the netem qdisc (tried on ``device``, then removed)."""
    add = [
        "tc",
        "-n",
        namespace,
        "qdisc",
        "add",
        "dev",
        device,
        "root",
        "handle",
        "9:",
        "netem",
        "delay",
        "1us",
    ]
    if subprocess.run(add, capture_output=True, timeout=_TIMEOUT_S).returncode != 0:
        return False
    subprocess.run(
        ["tc", "-n", namespace, "qdisc", "del", "dev", device, "root"],
        capture_output=True,
        timeout=_TIMEOUT_S,
    )
    return True


def shaping_commands(namespace: str, device: str, shape: LinkShape) -> list[list[str]]:
    """tc commands shaping ``device``'s egress: netem delay (if any) with tbf rate beneath it."""
    rate = f"{int(shape.bandwidth_Bps * 8)}bit"
    tbf = ["tbf", "rate", rate, "burst", str(shape.burst_bytes), "latency", "100ms"]
    tc = ["tc", "-n", namespace, "qdisc", "add", "dev", device]
    if shape.delay_s <= 0:
        return [[*tc, "root", "handle", "1:", *tbf]]
    delay = f"{shape.delay_s * 1e6:.0f}us"
    return [[*tc, "root", "handle", "1:", "netem", "delay", delay, "limit", "100000"],
            [*tc, "parent", "1:1", "handle", "10:", *tbf]]  # fmt: skip


class Testbed:
    """``nodes`` namespaces on one bridge; build with :meth:`create`, always :meth:`destroy`."""

    __test__ = False

    def __init__(self, nodes: int, shape: LinkShape, tag: str | None = None) -> None:
        if not 2 <= nodes <= 250:
            raise TestbedError(f"--nodes must be between 2 and 250, got {nodes}")
        self.nodes, self.shape = nodes, shape
        self.tag = tag or f"trainsim-{os.getpid()}"
        self.switch = f"{self.tag}-sw"
        self.created: list[str] = []

    def namespace(self, node: int) -> str:
        return f"{self.tag}-{node}"

    @staticmethod
    def address(node: int) -> str:
        return f"{SUBNET}.{node + 1}"

    def create(self) -> None:
        """Build namespaces, bridge, links and shaping; on any failure what exists is left for destroy()."""
        self._add_namespace(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        if self.shape.delay_s > 0 and not netem_available(self.switch, "br0"):
            raise TestbedError("this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so links cannot be delayed; "
                               "use --delay 0 (rate shaping with tbf still works) or a kernel with netem")  # fmt: skip
        for node in range(self.nodes):
            self._add_node(node)

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self.created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def _add_node(self, node: int) -> None:
        ns, port = self.namespace(node), f"p{node}"
        self._add_namespace(ns)
        _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("-n", self.switch, "link", "set", port, "master", "br0")
        _ip("-n", self.switch, "link", "set", port, "up")
        _ip("-n", ns, "addr", "add", f"{self.address(node)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        for namespace, device in ((ns, "eth0"), (self.switch, port)):
            for command in shaping_commands(namespace, device, self.shape):
                result = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
                if result.returncode != 0:
                    raise TestbedError(f"'{' '.join(command)}' failed: {result.stderr.strip()}")

    def destroy(self) -> list[str]:
        """Delete every namespace this testbed created (with its links); returns what failed."""
        failed = []
        for name in reversed(self.created):
            if _ip("netns", "del", name, check=False).returncode != 0:
                failed.append(name)
        self.created = failed
        return failed


def list_namespaces() -> list[str]:
    """Names of every named network namespace (``ip netns list``)."""
    listing = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in listing.splitlines() if line.strip()]


def testbed_namespaces(names: Sequence[str] | None = None) -> tuple[list[str], list[str]]:
    """Testbed namespaces (``trainsim-<pid>-...``) split into those whose testbed is gone (stale)
    and those whose testbed still runs."""
    stale: list[str] = []
    live: list[str] = []
    for name in list_namespaces() if names is None else names:
        parts = name.split("-")
        if len(parts) >= 3 and parts[0] == "trainsim" and parts[1].isdigit():
            (live if alive(int(parts[1])) else stale).append(name)
    return stale, live


def stale_namespaces(names: Sequence[str] | None = None) -> list[str]:
    """Namespaces left by testbeds whose process is gone (``trainsim-<pid>-...``), for cleanup."""
    return testbed_namespaces(names)[0]


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: trust the signal probe
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def namespace_pids(name: str) -> list[int]:
    """Processes running inside network namespace ``name`` (``ip netns pids``)."""
    listing = _ip("netns", "pids", name, check=False).stdout
    return sorted(int(tok) for tok in listing.split() if tok.isdigit())


@dataclass(frozen=True, slots=True)
class NamespaceCleanup:
    """What cleaning one stale namespace did: processes killed inside, processes still inside after
    that (they keep the namespace alive even when its name is gone), and the name's removal."""

    name: str
    removed: bool
    killed: tuple[int, ...] = ()
    left: tuple[int, ...] = ()
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.removed and not self.left


def clean_namespace(name: str, grace_s: float = 5.0) -> NamespaceCleanup:
    """SIGKILL every process inside ``name`` (again for any it started meanwhile) until none is left
    or ``grace_s`` passed, then delete the name."""
    killed: set[int] = set()
    deadline = time.monotonic() + grace_s
    inside = namespace_pids(name)
    while inside and time.monotonic() < deadline:
        for pid in inside:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        time.sleep(0.05)
        inside = [pid for pid in namespace_pids(name) if alive(pid)]
    result = _ip("netns", "del", name, check=False)
    gone = tuple(sorted(killed - set(inside)))
    return NamespaceCleanup(name, result.returncode == 0, gone, tuple(inside), result.stderr.strip())
