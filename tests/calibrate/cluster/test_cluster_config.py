"""The emulated Slurm cluster's configuration and its errors, without starting anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibrate.cluster import cli, daemons
from calibrate.cluster.config import ClusterLayout, hosts_file, slurm_conf
from calibrate.cluster.daemons import ClusterError
from calibrate.cluster.emulated import SlurmCluster

LAYOUT = ClusterLayout(name="trainsim", state_dir=Path("/state"), controller_host="login",
                       controller_addr="10.213.0.3", cpus_per_node=2,
                       nodes=(("node0", "10.213.0.1"), ("node1", "10.213.0.2")))  # fmt: skip


def _settings(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if not line.startswith(("NodeName", "Partition"))
    )


def test_conf_keeps_every_file_in_the_state_dir_and_our_own_munge() -> None:
    settings = _settings(slurm_conf(LAYOUT))
    assert settings["SlurmctldHost"] == "login(10.213.0.3)"
    assert settings["AuthInfo"] == "socket=/state/munge.socket"
    for key in ("StateSaveLocation", "SlurmdSpoolDir", "SlurmctldPidFile", "SlurmdPidFile", "SlurmctldLogFile",
                "SlurmdLogFile"):  # fmt: skip
        assert settings[key].startswith("/state/"), key
    assert "%n" in settings["SlurmdSpoolDir"] and "%n" in settings["SlurmdPidFile"]  # one of each per slurmd
    assert (settings["ProctrackType"], settings["TaskPlugin"]) == ("proctrack/linuxproc", "task/none")


def test_conf_names_every_node_at_its_namespace_address() -> None:
    lines = [line for line in slurm_conf(LAYOUT).splitlines() if line.startswith("NodeName=")]
    assert lines == ["NodeName=node0 NodeAddr=10.213.0.1 CPUs=2 State=UNKNOWN",
                     "NodeName=node1 NodeAddr=10.213.0.2 CPUs=2 State=UNKNOWN"]  # fmt: skip


def test_hosts_file_keeps_the_machines_entries_and_adds_the_nodes() -> None:
    text = hosts_file("127.0.0.1 localhost\n127.0.0.1 vm\n", LAYOUT)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == ["127.0.0.1 localhost", "127.0.0.1 vm", "10.213.0.1 node0", "10.213.0.2 node1"]


def test_missing_programs_name_the_debian_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        daemons.shutil, "which", lambda name, path=None: None if name in ("munged", "slurmd") else "/x"
    )
    message = daemons.missing_binaries()
    assert message is not None and "\n" not in message
    assert "munged, slurmd" in message and "apt-get install -y munge slurm-wlm" in message
    monkeypatch.setattr(daemons.shutil, "which", lambda name, path=None: "/x")
    assert daemons.missing_binaries() is None


@pytest.mark.parametrize(("nodes", "cpus", "match"), [(0, 2, "--nodes must be between 1 and 64"),
                                                      (2, 0, "--cpus must be at least 1")])  # fmt: skip
def test_cluster_size_is_checked(nodes: int, cpus: int, match: str) -> None:
    with pytest.raises(ClusterError, match=match):
        SlurmCluster(nodes, cpus_per_node=cpus)


def test_cli_without_slurm_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(daemons.shutil, "which", lambda name, path=None: None)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--nodes", "2", "--", "true"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the emulated Slurm cluster needs ") and err.count("\n") == 1
    assert "apt-get install -y munge slurm-wlm" in err


def test_cli_checks_the_size_before_building_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "cluster_unavailable", lambda: None)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--nodes", "0", "--", "true"])
    assert exc.value.code == 2
    assert capsys.readouterr().err == "error: --nodes: 0 is out of range; allowed 1..64\n"


def test_running_cluster_is_required_for_its_environment() -> None:
    with pytest.raises(ClusterError, match="not running"):
        SlurmCluster(2).env()
