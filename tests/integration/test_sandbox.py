"""The sandbox's isolation and kill guarantees, checked against the real Docker engine."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import docker
import pytest

from harness.agent.snapshots import Snapshots
from harness.agent.tools import ARTIFACT_ALLOWANCE_BYTES, ToolRunner
from harness.infra.gpu_slots import GpuSlots
from harness.infra.sandbox import WORKSPACE, OrphanReport, Sandbox, SandboxLimits, cleanup_orphans
from harness.infra.workspace import DiffTooLarge, extract_tree, workspace_archive
from harness.paths import REPO_ROOT
from harness.records import events
from harness.records.budget import Budget, Ledger
from harness.records.transcript import TranscriptWriter, read_events
from tests.conftest import TEST_LABEL


def processes(box: Sandbox) -> list[str]:
    """Every process in the container except PID 1 and the ps that lists them."""
    out = box.exec(["ps", "-eo", "pid=,args="], timeout_s=30).output.splitlines()
    return [line for line in out if line.split()[0] != "1" and "ps -eo" not in line]


def test_no_network_inside(sandbox: Sandbox) -> None:
    probe = ("import socket\ns = socket.socket(); s.settimeout(3)\n"
             "try:\n    s.connect(('1.1.1.1', 80)); print('CONNECTED')\n"
             "except OSError as e:\n    print('refused', e.errno)\n")
    result = sandbox.exec(["python", "-c", probe], timeout_s=30)
    assert "refused" in result.output and "CONNECTED" not in result.output
    interfaces = sandbox.exec("tail -n +3 /proc/net/dev | cut -d: -f1", timeout_s=10)
    assert interfaces.output.split() == ["lo"]
    assert sandbox.container.attrs["HostConfig"]["NetworkMode"] == "none"


def test_runs_as_uid_1000_with_no_capabilities(sandbox: Sandbox) -> None:
    assert sandbox.exec(["id", "-u"], timeout_s=10).output.strip() == "1000"
    caps = dict(line.split() for line in sandbox.exec(
        ["grep", "^Cap", "/proc/self/status"], timeout_s=10).output.splitlines())
    for name in ("CapInh:", "CapPrm:", "CapEff:", "CapAmb:"):
        assert caps[name] == "0000000000000000", name
    # Only CAP_KILL (bit 5, PID 1's) is left in the bounding set, out of reach with no_new_privs.
    assert caps["CapBnd:"] == f"{1 << 5:016x}"
    no_new_privs = sandbox.exec(["grep", "NoNewPrivs", "/proc/self/status"], timeout_s=10)
    assert no_new_privs.output.split()[1] == "1"


def test_pid_1_is_root_with_only_cap_kill_and_out_of_the_agents_reach(sandbox: Sandbox) -> None:
    init = sandbox.exec(["grep", "-E", "^(Uid|CapEff)", "/proc/1/status"], timeout_s=10).output
    assert init.split()[1:5] == ["0"] * 4 and init.split()[-1] == f"{1 << 5:016x}"
    signal = sandbox.exec("kill -TERM 1; kill -USR1 1", timeout_s=10)
    assert signal.output.count("Operation not permitted") == 2
    ptrace = sandbox.exec(["python", "-c", "import ctypes, os; libc = ctypes.CDLL(None, "
                           "use_errno=True); print(libc.ptrace(16, 1, 0, 0), "
                           "os.strerror(ctypes.get_errno()))"], timeout_s=30)
    assert ptrace.output.strip() == "-1 Operation not permitted"
    assert sandbox.exec(["echo", "alive"], timeout_s=10).output.strip() == "alive"


def test_only_workspace_and_tmp_are_writable(sandbox: Sandbox) -> None:
    for path in ("/etc/harness-x", "/opt/venv/x", "/usr/local/bin/x", "/home/agent/x", "/x"):
        result = sandbox.exec(["touch", path], timeout_s=10)
        assert result.exit_code != 0, path
        assert "Read-only file system" in result.output or "Permission denied" in result.output
    for path in ("/workspace/ok", "/tmp/ok"):
        assert sandbox.exec(["touch", path], timeout_s=10).exit_code == 0, path
    owners = sandbox.exec(["stat", "-c", "%u %a", "/workspace", "/tmp"], timeout_s=10).output
    assert owners.splitlines()[:2] == ["1000 755", "0 1777"]


def test_container_spec_has_every_limit(sandbox: Sandbox) -> None:
    host = sandbox.container.attrs["HostConfig"]
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["PidsLimit"] == 128
    assert host["Memory"] == 2 * 1024**3
    assert host["NanoCpus"] == int(2e9)
    # The only mount is the session's named volume: no host path is bind-mounted.
    assert all(not bind.startswith("/") for bind in host["Binds"] or [])
    mounts = sandbox.container.attrs["Mounts"]
    assert [(m["Type"], m["Destination"]) for m in mounts] == [("volume", "/workspace")]


def test_fork_bomb_is_stopped_by_the_pids_limit(sandbox: Sandbox) -> None:
    bomb = "bomb() { bomb | bomb; }; bomb"
    result = sandbox.exec(["bash", "-c", bomb], timeout_s=5)
    assert result.timed_out
    # The harness is unharmed: the next command runs, and nothing of the bomb survives.
    assert sandbox.exec(["echo", "alive"], timeout_s=30).output.startswith("alive")
    assert processes(sandbox) == []
    assert sandbox.container.attrs["HostConfig"]["PidsLimit"] == 128


def test_timeout_kills_backgrounded_and_detached_children(sandbox: Sandbox) -> None:
    command = ("(sleep 1000 &); setsid sleep 1001 & nohup sleep 1002 >/dev/null 2>&1 & "
               "python -c 'import os,time\nif os.fork()==0:\n  os.setsid(); time.sleep(1003)' & "
               "sleep 1004")
    result = sandbox.exec(["bash", "-c", command], timeout_s=3)
    assert result.timed_out and result.exit_code is None
    assert result.kill == "marker"
    assert processes(sandbox) == []


def test_large_output_is_capped_and_kept_whole(sandbox: Sandbox, tmp_path: Path) -> None:
    artifact = tmp_path / "out.log"
    size = 50_000_000
    result = sandbox.exec(f"head -c {size} /dev/zero | tr '\\0' a; echo; echo END",
                          timeout_s=120, artifact=artifact)
    assert result.exit_code == 0
    assert result.output_bytes == size + 5
    assert result.output_truncated
    assert "bytes cut here" in result.output and str(artifact) in result.output
    assert len(result.output) < sandbox.limits.shown_output_bytes + 500
    assert result.output.rstrip().endswith("END")
    assert artifact.stat().st_size == size + 5


def test_artifact_cap_is_explicit(client: docker.DockerClient, control_image: str,
                                  tmp_path: Path) -> None:
    limits = SandboxLimits(artifact_output_bytes=1000, shown_output_bytes=100)
    with Sandbox(client, control_image, labels={TEST_LABEL: "1"}, limits=limits) as box:
        result = box.exec("head -c 5000 /dev/zero", timeout_s=30, artifact=tmp_path / "a.log")
    assert result.artifact_truncated and (tmp_path / "a.log").stat().st_size == 1000
    assert result.artifact_bytes == 1000
    assert "only the first 1000 bytes are in" in result.output
    assert "the last 4000 bytes were not kept" in result.output


def test_workspace_is_a_bounded_tmpfs_volume(client: docker.DockerClient, control_image: str
                                             ) -> None:
    limits = SandboxLimits(workspace_bytes=32 * 1024**2, workspace_inodes=1000)
    with Sandbox(client, control_image, labels={TEST_LABEL: "1"}, limits=limits) as box:
        mount = box.exec("grep ' /workspace ' /proc/mounts", timeout_s=10).output.split()
        assert mount[2] == "tmpfs" and "size=32768k" in mount[3] and "nr_inodes=1000" in mount[3]
        usage = box.workspace_usage()
        assert usage is not None and usage.bytes_total == 32 * 1024**2 and not usage.full
        fill = box.exec("head -c 64M /dev/zero > /workspace/fill", timeout_s=30)
        assert "No space left on device" in fill.output
        usage = box.workspace_usage()
        assert usage is not None and usage.full and usage.bytes_free == 0
        # A harness that does not share the daemon's mounts reads it from inside: same answer.
        box.volume.attrs["Mountpoint"] = "/nonexistent"
        assert box.workspace_usage() == usage
        # Still copied out while it runs: the daemon mounts the volume, not the container.
        tar = b"".join(box.get_archive("/workspace/fill"))
        assert len(tar) > 32 * 1024**2 - 4096


@pytest.mark.parametrize("interrupt", [RuntimeError, KeyboardInterrupt])
def test_container_and_volume_removed_on_every_path_out(
    client: docker.DockerClient, control_image: str, interrupt: type[BaseException]
) -> None:
    box = Sandbox(client, control_image, labels={TEST_LABEL: "1"})
    with pytest.raises(interrupt), box:
        name = box.name
        assert client.containers.get(name).status == "running"
        raise interrupt("boom")
    with pytest.raises(docker.errors.NotFound):
        client.containers.get(name)
    with pytest.raises(docker.errors.NotFound):
        client.volumes.get(name)


def test_cleanup_removes_only_orphans(client: docker.DockerClient, control_image: str) -> None:
    # Scoped to this test's own label: other tests on the host have orphans of their own.
    # A host-wide `harness cleanup` run by another test may still remove this orphan first,
    # so what is asserted is the end state, and that only this label was touched.
    mine = {TEST_LABEL: "1", "org.harness.test-case": uuid.uuid4().hex}
    live = Sandbox(client, control_image, labels=mine).start()
    orphan = Sandbox(client, control_image, labels=mine)
    orphan.labels["org.harness.owner-pid"] = "999999999"  # no such process
    orphan.start()
    try:
        report = cleanup_orphans(client, labels=mine)
        assert set(report.containers) <= {orphan.name}
        assert set(report.volumes) <= {orphan.name}
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(orphan.name)
        with pytest.raises(docker.errors.NotFound):
            client.volumes.get(orphan.name)
        assert client.containers.get(live.name).status == "running"
    finally:
        live.close()
        orphan.close()


def test_two_cleanups_at_once_both_succeed(client: docker.DockerClient, control_image: str) -> None:
    # The daemon answers the second removal of one container with 409 "already in
    # progress": a concurrent cleanup waits for it instead of failing.
    mine = {TEST_LABEL: "1", "org.harness.test-case": uuid.uuid4().hex}
    orphans = []
    for _ in range(3):
        box = Sandbox(client, control_image, labels=mine)
        box.labels["org.harness.owner-pid"] = "999999999"
        orphans.append(box.start())
    reports: list[OrphanReport | Exception] = []

    def clean() -> None:
        try:
            reports.append(cleanup_orphans(client, labels=mine))
        except Exception as exc:  # the assertion below names it
            reports.append(exc)

    threads = [threading.Thread(target=clean, daemon=True) for _ in range(2)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        assert not any(t.is_alive() for t in threads), "a cleanup never returned"
        assert len(reports) == 2 and all(isinstance(r, OrphanReport) for r in reports), reports
        # Between them (each says what it found gone), every orphan is reported.
        assert {b.name for b in orphans} <= {n for r in reports if isinstance(r, OrphanReport)
                                             for n in r.containers}
        for box in orphans:
            with pytest.raises(docker.errors.NotFound):
                client.containers.get(box.name)
    finally:
        for box in orphans:
            box.close()


def test_gpu_requests_name_explicit_devices_from_exclusive_slots(
    client: docker.DockerClient, control_image: str, tmp_path: Path
) -> None:
    # This machine has no GPU: the container spec and the scheduler are tested, the GPU
    # start itself is not exercised here.
    slots = GpuSlots(tmp_path / "locks", gpu_ids=["0", "1", "2"])
    first = slots.acquire(2)
    second = slots.acquire(1)
    assert set(first.gpu_ids).isdisjoint(second.gpu_ids)
    with pytest.raises(Exception, match="no 1 free GPU"):
        slots.acquire(1, timeout_s=0.3)
    spec = Sandbox(client, control_image, labels={}, gpu_ids=first.gpu_ids).container_spec("v")
    (request,) = spec["device_requests"]
    assert request["DeviceIDs"] == first.gpu_ids and request["Count"] in (None, 0)
    assert request["Capabilities"] == [["gpu"]]
    first.release()
    third = slots.acquire(2)
    assert set(third.gpu_ids).isdisjoint(second.gpu_ids)
    assert Sandbox(client, control_image, labels={}).container_spec("v")["device_requests"] == []


def test_gpu_lock_is_released_when_its_holder_dies(tmp_path: Path) -> None:
    slots = GpuSlots(tmp_path / "locks", gpu_ids=["0"])
    pid = os.fork()
    if pid == 0:  # child: take the GPU and die without releasing it
        slots.acquire(1)
        os._exit(0)
    os.waitpid(pid, 0)
    assert slots.acquire(1, timeout_s=2).gpu_ids == ["0"]


def test_child_that_drops_the_marker_is_still_killed(sandbox: Sandbox) -> None:
    # `env -i` drops the call's marker; harness-kill also kills what started after the call.
    started_before = sandbox.exec("sleep 2000 >/dev/null 2>&1 &", timeout_s=10)
    assert started_before.exit_code == 0
    result = sandbox.exec(["bash", "-c", "env -i /bin/sleep 1000 & sleep 1001"], timeout_s=2)
    assert result.timed_out and result.kill == "marker"
    # Only the earlier call's background process is left: it did not belong to this call.
    assert [p.split(None, 1)[1] for p in processes(sandbox)] == ["sleep 2000"]


def test_when_no_killer_can_start_pid_1_kills_everything(
    sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("harness.infra.sandbox.KILL_COMMAND", "/nonexistent/harness-kill")
    result = sandbox.exec(["bash", "-c", "sleep 1000 & sleep 1001"], timeout_s=1)
    assert result.timed_out and result.kill == "init"
    assert processes(sandbox) == []


def test_a_sparse_file_cannot_make_a_copy_out_endless(sandbox: Sandbox, tmp_path: Path) -> None:
    """A few bytes of tmpfs can hold a file of terabytes, and the daemon streams its whole
    apparent size, .git (which the extraction skips) included: the copy stops at its stream
    cap, raises DiffTooLarge and lets go of the daemon's stream (the container still answers)."""
    made = sandbox.exec("mkdir -p .git && truncate -s 1T .git/sparse && echo made", timeout_s=30)
    assert "made" in made.output
    with pytest.raises(DiffTooLarge, match="sparse files"):
        extract_tree(sandbox.get_archive(WORKSPACE), tmp_path / "out", max_bytes=1 << 20,
                     max_stream_bytes=64 << 20)
    assert sandbox.exec("echo alive", timeout_s=30).output.startswith("alive")


def test_snapshots_stop_at_their_allowance_and_a_copy_at_its_entry_cap(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A snapshot's time is off the agent's clock, so a session's snapshots share one bounded
    allowance; past it they are recorded as not taken. A copy stops at the entry cap (bytes
    are not the only cost: a million empty files weigh nothing), and the container answers a
    pause right after (the copy hung up on the daemon's unfinished stream)."""
    baseline = REPO_ROOT / "tests/fixtures/task_packets/tiny-regression/repo"
    sandbox.put_archive(WORKSPACE, workspace_archive(baseline))
    ledger = Ledger(Budget(wall_seconds=600))
    ledger.start()
    with TranscriptWriter(tmp_path / "transcript.jsonl", validate=events.validate) as transcript:
        snaps = Snapshots(sandbox, baseline, tmp_path, transcript, ledger,
                          max_tree_bytes=1 << 24, max_diff_bytes=1 << 24, allowance_s=1e-6)
        snaps.capture("run_public_tests", "c1")
        snaps.capture("submit", "c2")
    first, second = (e.data for e in read_events(tmp_path / "transcript.jsonl"))
    assert first["paused"] is True and first["diff"] and ledger.usage.harness_seconds > 0
    assert second["diff"] is None and "allowance" in second["error"]
    assert second.get("paused") is None

    # 128 MiB in 2,000 files, stopped after 1,000: the rest is still to stream when it stops.
    sandbox.exec(["python", "-c", "import os\nos.mkdir('many')\nfor i in range(2000):\n"
                  "    open(f'many/{i}', 'wb').write(bytes(65536))"], timeout_s=120)
    with pytest.raises(DiffTooLarge, match="more than 1000 entries"):
        extract_tree(sandbox.get_archive(WORKSPACE), tmp_path / "out", max_bytes=1 << 30,
                     max_entries=1000)
    assert sandbox.freeze()
    sandbox.thaw()


def test_a_sessions_artifacts_stop_at_its_allowance(sandbox: Sandbox, tmp_path: Path) -> None:
    """Each output is capped, and so is their sum over a session: past it the model still sees
    the head and tail, and the result says the artifact was cut."""
    ledger = Ledger(Budget(wall_seconds=600))
    ledger.start()
    runner = ToolRunner(sandbox, None, ledger, tmp_path / "artifacts")  # type: ignore[arg-type]
    runner.artifact_bytes = ARTIFACT_ALLOWANCE_BYTES - 1000
    first = runner.run("bash", {"command": "head -c 5000 /dev/zero | tr '\\\\0' x"})
    second = runner.run("bash", {"command": "echo still-shown"})
    assert first.artifact_truncated and first.artifact_bytes == 1000
    assert runner.artifact_bytes == ARTIFACT_ALLOWANCE_BYTES
    assert second.artifact_truncated and second.artifact_bytes == 0
    assert "still-shown" in second.output
