"""The emulated cluster: shaping commands, environment per rank, and (as root) real runs torn down."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibrate.common.records import read_records
from calibrate.testbed import cli as testbed
from calibrate.testbed.net import (
    LinkShape,
    NamespaceCleanup,
    Testbed,
    TestbedError,
    alive,
    can_create_namespaces,
    namespace_pids,
    shaping_commands,
    stale_namespaces,
)
from calibrate.testbed.net import testbed_namespaces as find_testbed_namespaces

ROOT_REASON = can_create_namespaces()
needs_root = pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")


def test_rate_only_link_is_one_tbf() -> None:
    rate_Bps = 12.5e6
    (command,) = shaping_commands("ns", "eth0", LinkShape(rate_Bps))
    assert command[:7] == ["tc", "-n", "ns", "qdisc", "add", "dev", "eth0"]
    assert command[command.index("rate") + 1] == f"{int(rate_Bps * 8)}bit" == "100000000bit"
    assert int(command[command.index("burst") + 1]) == 65536  # one GSO segment at least


def test_delayed_link_is_netem_over_tbf() -> None:
    netem, tbf = shaping_commands("ns", "p0", LinkShape(1.25e8, 100e-6))
    assert netem[netem.index("delay") + 1] == "100us" and "root" in netem
    assert tbf[tbf.index("parent") + 1] == "1:1" and "tbf" in tbf
    assert int(tbf[tbf.index("burst") + 1]) == 125000  # 1 ms at 1 Gbit/s


def test_each_rank_sees_a_node_of_its_own() -> None:
    bed = Testbed(3, LinkShape(1e9), tag="trainsim-test")
    env = testbed.rank_environment(bed, 2, 29511, threads=1)
    assert {k: env[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")} == {
        "RANK": "2", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "10.213.0.1", "MASTER_PORT": "29511",
    }  # fmt: skip
    assert env["GLOO_SOCKET_IFNAME"] == "eth0" and bed.namespace(2) == "trainsim-test-2"


def test_only_namespaces_of_dead_testbeds_are_stale() -> None:
    names = [f"trainsim-{os.getpid()}-0", "trainsim-999999999-sw", "trainsim-x-1", "other-999999999-0"]
    assert stale_namespaces(names) == ["trainsim-999999999-sw"]


def test_node_count_is_checked() -> None:
    with pytest.raises(TestbedError, match="between 2 and 250"):
        Testbed(1, LinkShape(1e9))


def test_cli_without_root_or_job_is_one_error_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        testbed, "can_create_namespaces", lambda: "the testbed needs root (network namespaces and tc)"
    )
    for argv in (["--nodes", "2", "--", "calibrate.collectives"], ["--nodes", "2"]):
        with pytest.raises(SystemExit) as exc:
            testbed.main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1


def _our_namespaces(pid: int) -> list[str]:
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return [line.split()[0] for line in listing.splitlines() if line.startswith(f"trainsim-{pid}-")]


def _testbed_command(out: Path, *job: str) -> list[str]:
    return [sys.executable, "-m", "calibrate.testbed", "--nodes", "2", "--bandwidth", "100Mbit/s", "--timeout", "200",
            "--", "calibrate.collectives", "--out", str(out), "--threads", "1", *job]  # fmt: skip


@needs_root
@pytest.mark.root
@pytest.mark.integration
@pytest.mark.slow
def test_two_namespaces_run_a_shaped_all_reduce_and_are_removed(tmp_path: Path) -> None:
    job = ["--ops", "all_reduce", "-b", "256K", "-e", "1M", "-f", "4", "-n", "2", "-w", "1", "--repeats", "1"]
    proc = subprocess.Popen(
        _testbed_command(tmp_path, *job), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _, err = proc.communicate(timeout=280)
    assert proc.returncode == 0, err[-3000:]
    assert _our_namespaces(proc.pid) == []
    rows = [r for r in read_records(tmp_path / "collectives.jsonl") if r["kind"] == "collective"]
    assert [(r["size_bytes"], r["nodes"], r["scope"]) for r in rows] == [
        (262144, 2, "inter_node"),
        (1048576, 2, "inter_node"),
    ]
    # 100 Mbit/s is 12.5 MB/s: nothing crosses the shaped link faster (a 64 KiB burst aside).
    assert rows[-1]["busbw_GBps"] * 1e9 < 12.5e6 * 1.2


@needs_root
@pytest.mark.root
@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="runs a torch job")
def test_failing_job_still_tears_down(tmp_path: Path) -> None:
    # Options the job can only refuse once it runs: every rank exits with a user error
    command = [sys.executable, "-m", "calibrate.testbed", "--nodes", "2", "--timeout", "200", "--",
               "calibrate.compute", "--out", str(tmp_path), "--threads", "1", "--dtypes", "fp16"]  # fmt: skip
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=200)
    assert proc.returncode == 2
    assert "--- rank 0" in err and "error: --dtypes" in err
    assert _our_namespaces(proc.pid) == []


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="checks a torch job's options")
@pytest.mark.parametrize(
    ("job", "error"),
    [
        (["--ops", "all_reduce", "-b", "0"], "error: -b/--minbytes: size: '0' is not allowed"),
        (
            ["--ops", "all_reduce"],
            "error: --out {out!r} already holds earlier measurements (collectives.jsonl)",
        ),
    ],
)
def test_a_bad_job_is_refused_before_any_namespace_exists(
    job: list[str],
    error: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "collectives.jsonl").write_text('{"kind": "provenance"}\n')
    monkeypatch.setattr(testbed, "can_create_namespaces", lambda: None)
    monkeypatch.setattr(Testbed, "create", lambda self: pytest.fail("made namespaces for a bad job"))
    with pytest.raises(SystemExit) as exc:
        testbed.main(["--nodes", "2", "--", "calibrate.collectives", "--out", str(tmp_path), *job])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(error.format(out=str(tmp_path))) and err.count("\n") == 1


@needs_root
@pytest.mark.root
@pytest.mark.integration
@pytest.mark.slow
def test_interrupt_tears_down(tmp_path: Path) -> None:
    job = ["--ops", "all_reduce", "-b", "4M", "-e", "4M", "-n", "1000", "-w", "0", "--repeats", "1"]
    proc = subprocess.Popen(
        _testbed_command(tmp_path, *job), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (tmp_path / "collectives.jsonl").exists():
            time.sleep(0.1)
        assert _our_namespaces(proc.pid), "the testbed never came up"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert _our_namespaces(proc.pid) == []


def test_cleanup_names_what_it_could_not_remove_and_the_processes_inside(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = ["trainsim-999999999-0", "trainsim-999999999-sw"]
    outcomes = {
        stale[0]: NamespaceCleanup(stale[0], removed=True, killed=(4101,)),
        stale[1]: NamespaceCleanup(stale[1], removed=True, killed=(4102,), left=(4103,)),
    }
    monkeypatch.setattr(testbed, "can_create_namespaces", lambda: None)
    monkeypatch.setattr(testbed, "testbed_namespaces", lambda: (stale, [f"trainsim-{os.getpid()}-0"]))
    monkeypatch.setattr(testbed, "clean_namespace", outcomes.__getitem__)
    assert testbed.main(["--cleanup"]) == 1
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "removed trainsim-999999999-0; killed 1 process(es) inside: pid 4101",
        f"left 1 namespace(s) of running testbed(s) alone (pid {os.getpid()})",
        "removed 1 of 2 stale namespace(s)",
    ]
    assert err.splitlines() == [
        "could not remove trainsim-999999999-sw: its name is gone but processes keep the namespace alive; "
        "killed 1 process(es) inside: pid 4102; still inside: pid 4103"
    ]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs procfs")
def test_a_zombie_is_not_alive() -> None:
    """A testbed killed but not yet reaped by its parent is gone: its namespaces are stale."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    stat = Path(f"/proc/{child.pid}/stat")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and stat.read_text().rpartition(")")[2].split()[0] != "Z":
        time.sleep(0.02)
    try:
        assert not alive(child.pid) and alive(os.getpid())
    finally:
        child.wait()


@needs_root
@pytest.mark.root
def test_cleanup_kills_what_runs_inside_and_removes_the_namespace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "trainsim-999999999-0"  # above Linux's largest pid (2^22): its testbed is surely gone
    subprocess.run(["ip", "netns", "add", name], check=True, timeout=30)
    inside = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and inside.pid not in namespace_pids(name):
            time.sleep(0.05)
        # only this test's namespace: others on the machine belong to other testbeds
        monkeypatch.setattr(testbed, "testbed_namespaces", lambda: find_testbed_namespaces([name]))
        assert testbed.main(["--cleanup"]) == 0
        assert inside.wait(timeout=30) == -signal.SIGKILL
    finally:
        if inside.poll() is None:
            inside.kill()
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True, timeout=30)
    assert capsys.readouterr().out.splitlines() == [
        f"removed {name}; killed 1 process(es) inside: pid {inside.pid}",
        "removed 1 of 1 stale namespace(s)",
    ]
    assert name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@needs_root
@pytest.mark.root
@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="runs a torch job")
def test_ranks_die_with_a_killed_testbed_and_cleanup_removes_its_namespaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job = ["--ops", "all_reduce", "-b", "4M", "-e", "4M", "-n", "1000", "-w", "0", "--repeats", "1"]
    proc = subprocess.Popen(
        _testbed_command(tmp_path, *job), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (tmp_path / "collectives.jsonl").exists():
            time.sleep(0.1)  # rank 0 wrote its provenance: every rank is up
        names = _our_namespaces(proc.pid)
        ranks = [pid for name in names for pid in namespace_pids(name)]
        assert len(names) == 3 and len(ranks) == 2, (names, ranks)
        assert proc.poll() is None, "the job ended before the testbed was killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(pid) for pid in ranks):
            time.sleep(0.05)
        assert not any(alive(pid) for pid in ranks), "ranks outlived their testbed"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    monkeypatch.setattr(testbed, "testbed_namespaces", lambda: find_testbed_namespaces(names))
    assert testbed.main(["--cleanup"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        *(f"removed {name}" for name in names),
        "removed 3 of 3 stale namespace(s)",
    ]
    assert _our_namespaces(proc.pid) == []


def test_the_next_start_removes_what_a_killed_testbed_left_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No root needed: the namespaces and their removal are stand-ins; what is checked is that a
    start removes the stale ones (never a live testbed's) and names each, and what failed."""
    from calibrate.testbed.net import NamespaceCleanup

    stale, live = ["trainsim-11-node0", "trainsim-11-node1"], ["trainsim-22-node0"]
    cleaned: list[str] = []

    def clean(name: str) -> NamespaceCleanup:
        cleaned.append(name)
        return NamespaceCleanup(name, name.endswith("node0"), error="" if name.endswith("node0") else "busy")

    monkeypatch.setattr(testbed, "testbed_namespaces", lambda: (stale, live))
    monkeypatch.setattr(testbed, "clean_namespace", clean)
    testbed._remove_stale()
    out, err = capsys.readouterr()
    assert cleaned == stale  # the live testbed's namespace is left alone
    assert out == "testbed: removed 1 namespace(s) left by killed testbeds: trainsim-11-node0\n"
    assert "could not remove trainsim-11-node1: busy" in err and "--cleanup" in err
