"""What the emulated Slurm cluster is made of: its layout, ``slurm.conf`` and the hosts file of each node.

Everything the daemons write (state, spool, logs, pid files, the munge key and socket) lives in one
state directory, so a cluster never touches ``/etc/slurm``, ``/etc/munge`` or a site's running
Slurm; :func:`slurm_conf` is the whole configuration, for the settings that Debian's Slurm 22.05
needs to schedule on a machine without cgroups or accounting (see ``man slurm.conf``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ClusterLayout", "hosts_file", "slurm_conf"]

PARTITION = "emulated"


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """Names and addresses of one emulated cluster, and where its files go.

    ``nodes`` are ``(NodeName, NodeAddr)`` pairs; the controller runs on ``controller_addr`` under
    this machine's short hostname (slurmctld only starts on a host named in ``SlurmctldHost``).
    """

    name: str
    state_dir: Path
    nodes: tuple[tuple[str, str], ...]
    controller_host: str
    controller_addr: str
    cpus_per_node: int

    @property
    def munge_socket(self) -> Path:
        return self.state_dir / "munge.socket"

    @property
    def conf_path(self) -> Path:
        return self.state_dir / "slurm.conf"

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.nodes)

    def log(self, daemon: str) -> Path:
        """The log file of ``munged``, ``slurmctld`` or ``slurmd-<node>``."""
        return self.state_dir / f"{daemon}.log"


def slurm_conf(layout: ClusterLayout) -> str:
    """A minimal ``slurm.conf``: root runs everything, no cgroups, no accounting, fast timeouts."""
    s = layout.state_dir
    lines = [
        f"ClusterName={layout.name}",
        f"SlurmctldHost={layout.controller_host}({layout.controller_addr})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={layout.munge_socket}",  # our own munged, never the system's
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={s}/ctld",
        f"SlurmdSpoolDir={s}/spool-%n",  # %n: the node name, one directory per slurmd
        f"SlurmctldPidFile={s}/slurmctld.pid",
        f"SlurmdPidFile={s}/slurmd-%n.pid",
        f"SlurmctldLogFile={layout.log('slurmctld')}",
        f"SlurmdLogFile={s}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",  # no cgroups needed; the namespaces hold the processes
        "TaskPlugin=task/none",
        "SchedulerType=sched/builtin",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "SlurmdParameters=config_overrides",  # trust CPUs= below even on a machine with fewer cores
        "ReturnToService=2",
        "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "KillWait=5",  # seconds between SIGTERM and SIGKILL at a time limit or scancel (default 30)
        "InactiveLimit=0",
        "MinJobAge=600",  # keep finished jobs visible to scontrol for ten minutes
        "MessageTimeout=20",
        "SlurmdTimeout=120",
        "SlurmctldTimeout=120",
    ]
    for name, addr in layout.nodes:
        lines.append(f"NodeName={name} NodeAddr={addr} CPUs={layout.cpus_per_node} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def hosts_file(base: str, layout: ClusterLayout) -> str:
    """``/etc/hosts`` as the nodes see it: the machine's own entries plus every node's name.

    Jobs name their peers by Slurm node name (``scontrol show hostnames``), so each namespace must
    resolve them to the namespace addresses.
    """
    ours = [f"{addr} {name}" for name, addr in layout.nodes]
    return base.rstrip("\n") + "\n# emulated Slurm cluster " + layout.name + "\n" + "\n".join(ours) + "\n"
