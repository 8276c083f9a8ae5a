"""What a torn-down emulated cluster must not leave: processes in its (deleted) network namespaces."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

NETNS_RUN = Path("/run/netns")


def namespace_inodes(names: Iterable[str]) -> set[int]:
    """Identities of live named namespaces, valid after ``ip netns del`` while a process holds one."""
    return {os.stat(NETNS_RUN / name).st_ino for name in names}


def processes_in(inodes: set[int]) -> list[int]:
    """PIDs of processes inside any of these network namespaces, deleted ones included."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if os.stat(proc / "ns" / "net").st_ino in inodes:
                    found.append(int(proc.name))
            except OSError:  # gone meanwhile, or a kernel thread
                continue
    return found
