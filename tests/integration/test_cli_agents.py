"""Claude Code and Codex, the real pinned binaries, through whole sessions in their containers.

Each CLI runs headless in the session's container (no network) and reaches its model only
through the harness's gateway; behind the gateway is a local provider that answers the CLI's
real requests with scripted tool use (harness/agent/gateway/scripted.py). No model API exists
here, and none is needed. Needs the CLI images: ``harness images build --agent claude-code
--agent codex``.

What one session per CLI shows (test_a_cli_session_through_the_gateway):
* the file the CLI wrote lands in the diff;
* the usage the gateway recorded is, call for call and category for category, what the
  provider sent, and the session's token counts are their sums;
* the provider's key reached the provider (the gateway added it) and is nowhere in the
  container: not in its configuration, not in any process's environment or command line
  (read as root, while the CLI runs), not in any file, nor in the session's records;
* from inside, nothing but the gateway answers: no interface but loopback, no route, no name
  resolution, not the provider's port on the host;
* a request the gateway cannot parse, sent from inside through the forwarder, is refused and
  recorded, and never reaches the provider.

Then, per CLI: a spent token budget, the tool-call cap and the wall budget each stop the CLI
with the budget outcome; a CLI killed mid-run is ``agent_exited``, an agent outcome.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import pytest

from harness.agent.gateway.scripted import ScriptedUpstream
from harness.agent.providers.scripted import load_script
from harness.records.attempt import TRANSCRIPT_NAME, read_record
from harness.records.transcript import read_events, verify
from harness.study.session import SessionOptions, run_session
from tests.conftest import session_containers, write_script, write_study

CLIS = ["claude-code", "codex"]
PROVIDER = {"claude-code": ("anthropic", "claude-sonnet-4-5"), "codex": ("openai", "gpt-5-codex")}
MODEL_PATH = {"claude-code": "/v1/messages", "codex": "/v1/responses"}
SESSION = "tiny-regression-pair1-control"
# What each CLI is given as its API key inside the container (harness/agent/cli_agents/launch.py):
# the positive control that the searches below do see the CLI's environment.
PLACEHOLDER = "harness-gateway-placeholder"

# Run by the CLI itself (its shell tool, as the agent user) while the session runs; the key is
# built from two halves so that no command line, file or transcript holds it whole.
PROBE = r"""python3 - <<'HARNESS_PROBE'
import glob, http.client, json, os, socket
key = "@HALF1@" + "@HALF2@"
placeholder = "harness-gateway-" + "placeholder"
out = {"key_in": [], "placeholder_in": [], "environ_read": 0, "files_read": 0}
for path in glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline"):
    try:
        data = open(path, "rb").read()
    except OSError:
        continue
    out["environ_read"] += path.endswith("environ")
    if key.encode() in data:
        out["key_in"].append(path)
    if placeholder.encode() in data:
        out["placeholder_in"].append(path)
for top in ("/tmp", "/workspace", "/run", "/dev/shm", "/home", "/etc", "/opt"):
    for folder, _dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(folder, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 64 * 1024**2:
                    continue
                data = open(path, "rb").read()
            except OSError:
                continue
            out["files_read"] += 1
            if key.encode() in data:
                out["key_in"].append(path)
out["interfaces"] = sorted(os.listdir("/sys/class/net"))
out["tcp"] = {}
for host, port in (("1.1.1.1", 443), ("8.8.8.8", 53), ("172.17.0.1", @PORT@),
                   ("127.0.0.1", @PORT@), ("10.0.2.2", 80)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        out["tcp"][f"{host}:{port}"] = "connected"
    except OSError as exc:
        out["tcp"][f"{host}:{port}"] = f"{type(exc).__name__}: {exc}"
try:
    socket.getaddrinfo("api.anthropic.com", 443)
    out["dns"] = "resolved"
except OSError as exc:
    out["dns"] = f"{type(exc).__name__}: {exc}"
out["docker_socket"] = os.path.exists("/var/run/docker.sock")
def ask(method, path, body):
    connection = http.client.HTTPConnection("127.0.0.1", 8765, timeout=30)
    connection.request(method, path, body=body, headers={"content-type": "application/json"})
    answer = connection.getresponse()
    return [answer.status, answer.read().decode(errors="replace")[:400]]
garbage = "{this is not json " + "@MARK1@" + "@MARK2@"
out["garbage"] = ask("POST", "@MODEL_PATH@", garbage.encode())
out["other_route"] = ask("GET", "http://127.0.0.1:@PORT@/v1/models", None)
json.dump(out, open("/workspace/probe.json", "w"), indent=1, sort_keys=True)
HARNESS_PROBE"""

# Run on the host through the engine while the CLI waits for its first answer: every
# process's environment and command line, and every file. Twice: as root (which holds only
# CAP_KILL there, so it cannot read what belongs to the agent) and as the agent user.
SEARCH = ('k=@HALF1@; k="${k}@HALF2@"; p=harness-gateway-; p="${p}placeholder"; '
               'echo KEY:; grep -rlsF -e "$k" --exclude-dir=proc --exclude-dir=sys / ; '
               'grep -lsF -e "$k" /proc/[0-9]*/environ /proc/[0-9]*/cmdline; '
               'echo PLACEHOLDER:; grep -lsF -e "$p" /proc/[0-9]*/environ; echo END')


class ProbingProvider(ScriptedUpstream):
    """The scripted provider, standing in for the real one: it keeps every body it received
    and, at the first call, looks at the session's running container from the host."""

    client: docker.DockerClient
    runs_root: Path
    halves: tuple[str, str]
    bodies: list[bytes]
    seen: dict[str, Any]

    def answer(self, path: str, raw: bytes) -> tuple[int, str, bytes]:
        self.bodies.append(raw)
        if not self.seen:
            self.seen.update(self.inspect())
        return super().answer(path, raw)

    def inspect(self) -> dict[str, Any]:
        found = session_containers(self.client, SESSION, self.runs_root)
        if len(found) != 1:
            return {"error": f"{len(found)} containers"}
        container = found[0]
        assert isinstance(container, docker.models.containers.Container)
        container.reload()
        command = SEARCH.replace("@HALF1@", self.halves[0]).replace("@HALF2@", self.halves[1])
        searches = {user: container.exec_run(["sh", "-c", command], user=user).output.decode()
                    for user in ("root", "agent")}
        return {"env": container.attrs["Config"]["Env"],
                "network_mode": container.attrs["HostConfig"]["NetworkMode"],
                "networks": list(container.attrs["NetworkSettings"]["Networks"]),
                "mounts": container.attrs["Mounts"], "searches": searches}


def events_of(attempt: Path, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in read_events(attempt / TRANSCRIPT_NAME) if e.kind == kind]


def cli_session(tmp_path: Path, cli: str, steps: list[dict[str, Any]], **study: Any) -> Path:
    """A session of ``cli`` driven by the scripted provider through ``steps``, not graded."""
    script = write_script(tmp_path, steps)
    path = write_study(tmp_path, agent={"kind": cli, "model": f"scripted:{script}"}, **study)
    return run_session(SessionOptions(study_path=path, pair=1, arm="control", grade=False),
                       log=lambda _m: None)


def between(text: str, start: str, end: str) -> list[str]:
    return [line for line in text.split(start, 1)[1].split(end, 1)[0].splitlines() if line]


@pytest.mark.parametrize("cli", CLIS)
def test_a_cli_session_through_the_gateway(cli: str, tmp_path: Path,
                                           client: docker.DockerClient,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    provider, model = PROVIDER[cli]
    key = f"sk-harness-test-{uuid.uuid4().hex}"
    halves = (key[:20], key[20:])
    mark = uuid.uuid4().hex
    runs_root = tmp_path / "runs" / "fixture"
    upstream = ProbingProvider(load_script(write_script(tmp_path, [])), cli)
    upstream.client, upstream.runs_root, upstream.halves = client, runs_root, halves
    upstream.bodies, upstream.seen = [], {}
    upstream.start()
    try:
        port = upstream.url.rsplit(":", 1)[1]
        probe = (PROBE.replace("@HALF1@", halves[0]).replace("@HALF2@", halves[1])
                 .replace("@PORT@", port).replace("@MODEL_PATH@", MODEL_PATH[cli])
                 .replace("@MARK1@", mark[:16]).replace("@MARK2@", mark[16:]))
        script = write_script(tmp_path, [
            {"tool": "write_file", "args": {"path": "NOTES.md", "content": f"written by {cli}\n"},
             "text": "Writing the notes."},
            {"tool": "bash", "args": {"command": probe, "timeout_s": 300}},
            {"tool": "submit", "args": {"summary": f"{cli} wrote NOTES.md"}},
        ])
        upstream.turns = ScriptedUpstream(load_script(script), cli).turns
        monkeypatch.setenv(f"{provider.upper()}_API_KEY", key)
        monkeypatch.setenv(f"{provider.upper()}_BASE_URL",
                           upstream.url + ("/v1" if provider == "openai" else ""))
        study = write_study(tmp_path, agent={"kind": cli, "model": f"{provider}:{model}"})
        attempt = run_session(SessionOptions(study_path=study, pair=1, arm="control",
                                             grade=False), log=lambda _m: None)
    finally:
        upstream.close()

    record = read_record(attempt)
    assert record.status == "finished" and record.outcome == "submitted", record.error
    # The file the CLI wrote is in the diff (and so is the probe's report).
    assert record.diff is not None
    assert {"NOTES.md", "probe.json"} <= set(record.diff.files_changed)
    diff = (attempt / "submission.diff").read_text()
    assert f"+written by {cli}" in diff
    report = json.loads((attempt / "final" / "probe.json").read_text())

    # Usage: what the provider sent, call for call and category for category.
    responses = events_of(attempt, "model_response")
    assert upstream.sent and len(responses) == len(upstream.sent)
    for sent, recorded in zip(upstream.sent, responses, strict=True):
        for category, count in sent["usage"].items():
            assert recorded["usage"][category] == count, (category, sent, recorded["usage"])
    assert record.usage is not None
    assert record.usage.tokens_input == sum(r["usage"]["input_tokens_counted"] for r in responses)
    assert record.usage.tokens_output == sum(r["usage"]["output_tokens_counted"]
                                             for r in responses)
    assert record.usage.tokens_input > 0 and record.usage.tokens_output > 0
    # Tool calls come from the CLI's own events, as the loop's do.
    tool_calls = events_of(attempt, "tool_call")
    assert len(tool_calls) == record.usage.tool_calls >= 2

    # The key: added by the gateway on the way out, never inside.
    expected = key if provider == "anthropic" else f"Bearer {key}"
    assert upstream.credentials and set(upstream.credentials) == {expected}
    seen = upstream.seen
    assert "error" not in seen, seen
    assert not any(key in entry for entry in seen["env"])
    assert seen["network_mode"] == "none" and seen["networks"] in ([], ["none"])
    sources = sorted((m["Type"], m["Destination"], m["RW"]) for m in seen["mounts"])
    assert sources == [("bind", "/run/harness-gateway", False), ("volume", "/workspace", True)]
    for user, found in seen["searches"].items():
        assert between(found, "KEY:", "PLACEHOLDER:") == [], (user, found)
    # The search reads the CLI's environment: it finds the placeholder key there.
    assert between(seen["searches"]["agent"], "PLACEHOLDER:", "END"), seen["searches"]
    assert report["key_in"] == [] and report["placeholder_in"], report
    assert report["environ_read"] > 0 and report["files_read"] > 100, report
    for path in attempt.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path

    # Nothing but the gateway answers from inside.
    assert report["interfaces"] == ["lo"], report
    assert all(result != "connected" for result in report["tcp"].values()), report["tcp"]
    assert report["dns"] != "resolved" and not report["docker_socket"], report

    # A request the gateway cannot parse: refused, recorded, never forwarded.
    assert report["garbage"][0] == 400 and "harness gateway" in report["garbage"][1], report
    assert report["other_route"][0] == 405, report
    refused = events_of(attempt, "gateway_refused")
    garbage = [r for r in refused if r["path"] == MODEL_PATH[cli] and mark in (r["body"] or "")]
    assert len(garbage) == 1 and garbage[0]["status"] == 400, refused
    assert any(r["method"] == "GET" and r["status"] == 405 for r in refused), refused
    assert not any(mark.encode() in body for body in upstream.bodies)
    assert upstream.requests == len(events_of(attempt, "model_request"))

    # The record holds: its chain verifies; nothing is left behind.
    verification = verify(attempt / TRANSCRIPT_NAME)
    assert verification.ok and not verification.partial_tail
    start = events_of(attempt, "cli_start")[0]
    assert start["cli"] == cli and start["version"]
    assert not events_of(attempt, "cli_end")[0]["stopped_by_harness"]
    assert session_containers(client, SESSION, runs_root) == []
    gateway_dir = next(m["Source"] for m in seen["mounts"] if m["Type"] == "bind")
    assert not Path(gateway_dir).exists()


@pytest.mark.parametrize("cli", CLIS)
def test_a_spent_token_budget_stops_the_cli(cli: str, tmp_path: Path,
                                            client: docker.DockerClient) -> None:
    attempt = cli_session(tmp_path, cli, [
        {"tool": "bash", "args": {"command": "echo one > first.txt"},
         "usage": {"input_tokens": 1000, "output_tokens": 3000}},
        {"tool": "bash", "args": {"command": "echo two > second.txt"}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ], budget={"tokens_output": 3000})
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:tokens_output", (record.outcome, record.error)
    assert record.usage is not None and record.usage.tokens_output == 3000
    assert record.diff is not None and record.diff.files_changed == ["first.txt"]
    assert len(events_of(attempt, "model_response")) == 1
    assert [e["kind"] for e in events_of(attempt, "budget_exhausted")][:1] == ["tokens_output"]
    refused = events_of(attempt, "gateway_refused")
    assert refused and refused[0]["path"] == MODEL_PATH[cli]
    end = events_of(attempt, "cli_end")[0]
    assert end["stopped_by_harness"] == "budget_exhausted:tokens_output"
    assert verify(attempt / TRANSCRIPT_NAME).ok
    assert session_containers(client, SESSION, tmp_path / "runs" / "fixture") == []


@pytest.mark.parametrize("cli", CLIS)
def test_the_tool_call_budget_withholds_the_call_past_the_cap(cli: str, tmp_path: Path,
                                                              client: docker.DockerClient) -> None:
    attempt = cli_session(tmp_path, cli, [
        {"tool": "bash", "args": {"command": "echo one > first.txt"}},
        {"tool": "bash", "args": {"command": "echo two > second.txt"}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ], budget={"tool_calls": 1})
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:tool_calls", (record.outcome, record.error)
    assert record.usage is not None and record.usage.tool_calls == 1
    # The second call was answered by the provider but never handed to the CLI.
    assert record.diff is not None and record.diff.files_changed == ["first.txt"]
    assert len(events_of(attempt, "model_response")) == 2
    assert len(events_of(attempt, "tool_call")) == 1
    assert session_containers(client, SESSION, tmp_path / "runs" / "fixture") == []


# Kills the CLI from inside its own shell tool (the name is split so this command's own
# command line does not match it).
KILL_THE_CLI = r"""echo before > before.txt && python3 - <<'HARNESS_KILL'
import os, signal
name = ("harness-agent" + "-cli").encode()
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            argv0 = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[0]
        except OSError:
            continue
        if argv0.endswith(name):
            os.kill(int(pid), signal.SIGKILL)
HARNESS_KILL"""


@pytest.mark.parametrize("cli", CLIS)
def test_a_cli_that_dies_is_an_agent_outcome(cli: str, tmp_path: Path,
                                             client: docker.DockerClient) -> None:
    attempt = cli_session(tmp_path, cli, [
        {"tool": "bash", "args": {"command": KILL_THE_CLI}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ])
    record = read_record(attempt)
    assert record.status == "finished" and record.outcome == "agent_exited", record.outcome
    # An agent outcome, not a harness error: why the CLI ended is in agent_end.
    assert record.error is None
    why = events_of(attempt, "agent_end")[0]["error"]
    assert "exited with code" in why or "before its result event" in why, why
    assert record.diff is not None and record.diff.files_changed == ["before.txt"]
    end = events_of(attempt, "cli_end")[0]
    assert end["exit_code"] != 0 and end["stopped_by_harness"] is None
    assert verify(attempt / TRANSCRIPT_NAME).ok
    assert session_containers(client, SESSION, tmp_path / "runs" / "fixture") == []


@pytest.mark.parametrize("cli", CLIS)
def test_the_wall_budget_stops_the_cli_and_what_it_started(cli: str, tmp_path: Path,
                                                           client: docker.DockerClient) -> None:
    attempt = cli_session(tmp_path, cli, [
        # (Claude Code refuses a plain `sleep N; ...` chain.)
        {"tool": "bash", "args": {"command": "python3 -c 'import time; time.sleep(600)'; "
                                             "echo late > late.txt", "timeout_s": 600}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ], budget={"wall_seconds": 25})
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:wall_seconds", (record.outcome, record.error)
    assert record.usage is not None and record.usage.wall_seconds < 90
    assert record.diff is not None and "late.txt" not in record.diff.files_changed
    assert events_of(attempt, "cli_end")[0]["stopped_by_harness"] == \
        "budget_exhausted:wall_seconds"
    assert session_containers(client, SESSION, tmp_path / "runs" / "fixture") == []


@pytest.mark.parametrize("cli", CLIS)
def test_the_candidate_run_cap_holds_for_the_clis_wrapper_command(
    cli: str, tmp_path: Path, client: docker.DockerClient
) -> None:
    """A candidate run is the wrapper command the prompt names (``harness-run-candidate``,
    run by the CLI's own shell tool): it counts against ``candidate_runs`` as the loop's tool
    does, and the run past the cap ends the session with the budget outcome."""
    attempt = cli_session(tmp_path, cli, [
        {"tool": "run_candidate", "args": {"configuration": "cpu-1"}},
        {"tool": "run_candidate", "args": {"configuration": "cpu-1"}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ], budget={"candidate_runs": 1})
    record = read_record(attempt)
    assert record.outcome == "budget_exhausted:candidate_runs", (record.outcome, record.error)
    assert record.usage is not None and record.usage.candidate_runs == 1
    assert record.usage.compute_seconds["candidate_runs"] > 0
    ran = [e for e in events_of(attempt, "tool_result") if e.get("name") == "run_candidate"]
    assert ran and ran[0]["exit_code"] == 0, ran
    assert [e["kind"] for e in events_of(attempt, "budget_exhausted")][:1] == ["candidate_runs"]
    assert events_of(attempt, "cli_end")[0]["stopped_by_harness"] == \
        "budget_exhausted:candidate_runs"
    assert verify(attempt / TRANSCRIPT_NAME).ok
    assert session_containers(client, SESSION, tmp_path / "runs" / "fixture") == []


# The loop's tamper attempts (tests/integration/test_integrity.py, test_session.py), made by the
# CLI's own shell tool, as one program (a CLI may refuse some shell chains as written).
TAMPER = r"""python3 - <<'HARNESS_TAMPER'
import ctypes, json, os, signal, subprocess
out = {}
for name in ("SIGTERM", "SIGKILL"):
    try:
        os.kill(1, getattr(signal, name))
        out[name] = "sent"
    except PermissionError:
        out[name] = "EPERM"
libc = ctypes.CDLL(None, use_errno=True)
out["ptrace"] = [libc.ptrace(16, 1, 0, 0), ctypes.get_errno()]
os.symlink("/etc/passwd", "leak")
with open("train.py", "a") as f:
    f.write("# changed by the agent\n")
git = lambda *a: subprocess.run(["git", *a], check=True, capture_output=True)
git("add", "-A"); git("commit", "-qm", "evil")
subprocess.run(["rm", "-rf", ".git"], check=True)
git("init", "-q"); git("add", "-A"); git("commit", "-qm", "a clean-looking history")
json.dump(out, open("tamper.json", "w"))
# Left running past the agent's end: a writer in a session of its own.
subprocess.Popen(["bash", "-c", "while :; do date +%s%N >> ticks.log; done"],
                 start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
HARNESS_TAMPER"""


@pytest.mark.parametrize("cli", CLIS)
def test_the_loops_tamper_attempts_fail_the_same_way_from_a_cli(
    cli: str, tmp_path: Path, client: docker.DockerClient
) -> None:
    """PID 1 cannot be signalled or traced, a link to a host file is a link in the diff and
    never its target, a rewritten history changes nothing graded, and a process left running
    is frozen and killed before the copy-out: as for the loop agent."""
    attempt = cli_session(tmp_path, cli, [
        {"tool": "bash", "args": {"command": TAMPER, "timeout_s": 120}},
        {"tool": "submit", "args": {"summary": "done"}},
    ])
    record = read_record(attempt)
    assert record.status == "finished" and record.outcome == "submitted", record.error
    tampered = json.loads((attempt / "final" / "tamper.json").read_text())
    assert tampered == {"SIGTERM": "EPERM", "SIGKILL": "EPERM", "ptrace": [-1, 1]}, tampered
    patch = (attempt / "submission.diff").read_text(errors="replace")
    assert "new file mode 120000" in patch and "+/etc/passwd" in patch
    assert "root:x:0:0" not in patch  # the link was not followed
    assert "+# changed by the agent" in patch
    assert (attempt / "final" / "leak").is_symlink()
    assert not (attempt / "final" / ".git").exists()
    stop = record.processes_stopped
    assert stop is not None and stop.frozen and stop.survivors == []
    assert any("ticks.log" in p.command for p in stop.processes), stop.processes
    assert verify(attempt / TRANSCRIPT_NAME).ok
    assert session_containers(client, SESSION, tmp_path / "runs" / "fixture") == []


@pytest.mark.parametrize("cli", CLIS)
def test_a_harness_killed_mid_cli_session_is_cleaned_up(
    cli: str, tmp_path: Path, client: docker.DockerClient
) -> None:
    """SIGKILL of the harness while the CLI works leaves its container and its gateway's
    socket folder; `harness cleanup` removes both and marks the session interrupted."""
    script = write_script(tmp_path, [
        {"tool": "bash", "args": {"command": "python3 -c 'import time; time.sleep(120)'",
                                  "timeout_s": 300}},
        {"tool": "submit", "args": {"summary": "never reached"}},
    ])
    study = write_study(tmp_path, agent={"kind": cli, "model": f"scripted:{script}"})
    proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "session", "--study",
                             str(study), "--pair", "1", "--arm", "control", "--no-grade"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs_root = tmp_path / "runs" / "fixture"
    transcript = runs_root / SESSION / "attempt-1" / TRANSCRIPT_NAME
    deadline = time.monotonic() + 180
    while not (transcript.exists() and b'"kind":"tool_call"' in transcript.read_bytes()):
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail("the CLI never reached its first tool call")
        time.sleep(0.2)
    (box,) = session_containers(client, SESSION, runs_root)
    box.reload()  # type: ignore[attr-defined]
    socket_dir = Path(next(m["Source"] for m in box.attrs["Mounts"]  # type: ignore[attr-defined]
                           if m["Type"] == "bind"))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert socket_dir.is_dir() and session_containers(client, SESSION, runs_root)  # left behind
    result = subprocess.run([sys.executable, "-m", "harness.cli", "cleanup", "--runs",
                             str(tmp_path / "runs")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert not socket_dir.exists()
    assert session_containers(client, SESSION, runs_root) == []
    record = read_record(transcript.parent)
    assert record.status == "interrupted" and record.outcome == "interrupted"
    assert verify(transcript).ok
