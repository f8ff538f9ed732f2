"""A CLI's event stream into the transcript, its prompt, its launch and the scripted provider's
translation of a loop script into the CLI's own tools (no Docker)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.agent.cli_agents.launch import PLACEHOLDER_KEY, cli_launch
from harness.agent.cli_agents.prompt import build_cli_prompt
from harness.agent.cli_agents.stream import MAX_LINE_BYTES, EventStream
from harness.agent.gateway.scripted import (
    ScriptedUpstream,
    claude_turns,
    codex_turns,
    shell_command,
)
from harness.agent.loop import build_system_prompt
from harness.agent.providers.scripted import Script, ScriptStep
from harness.agent.toolsets import EXTRA_TOOLS, tools_for_arm
from harness.paths import REPO_ROOT
from harness.records import events
from harness.records.study import AgentSettings
from harness.records.transcript import TranscriptWriter, read_events

CLAUDE_LINES = [
    {"type": "system", "subtype": "init", "cwd": "/workspace", "tools": ["Bash", "Write"],
     "model": "claude-x", "permissionMode": "bypassPermissions"},
    {"type": "assistant", "message": {"content": [
        {"type": "text", "text": "writing"},
        {"type": "tool_use", "id": "toolu_1", "name": "Write",
         "input": {"file_path": "/workspace/a.txt", "content": "hi\n"}}]},
     "parent_tool_use_id": None},
    {"type": "user", "message": {"role": "user", "content": [
        {"tool_use_id": "toolu_1", "type": "tool_result", "content": "File created"}]}},
    {"type": "assistant", "message": {"content": [
        {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "false"}}]}},
    {"type": "user", "message": {"content": [
        {"tool_use_id": "toolu_2", "type": "tool_result", "is_error": True,
         "content": [{"type": "text", "text": "Exit code 1"}]}]}},
    {"type": "result", "subtype": "success", "is_error": False, "result": "All done.",
     "num_turns": 3, "usage": {"input_tokens": 3}, "session_id": "s", "uuid": "u"},
]
CODEX_LINES = [
    {"type": "thread.started", "thread_id": "t"},
    {"type": "turn.started"},
    {"type": "item.started", "item": {"id": "item_1", "type": "command_execution",
                                      "command": "/bin/sh -lc ls", "status": "in_progress"}},
    {"type": "item.completed", "item": {"id": "item_1", "type": "command_execution",
                                        "command": "/bin/sh -lc ls",
                                        "aggregated_output": "a.txt\n", "exit_code": 0,
                                        "status": "completed"}},
    {"type": "item.completed", "item": {"id": "item_2", "type": "file_change", "status":
                                        "completed", "changes": [{"path": "a.txt"}]}},
    {"type": "item.completed", "item": {"id": "item_3", "type": "agent_message",
                                        "text": "All done."}},
    {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}},
]


def stream_of(tmp_path: Path, cli: str, chunks: list[bytes]) -> tuple[EventStream, list]:
    path = tmp_path / "t.jsonl"
    with TranscriptWriter(path, events.validate) as transcript:
        stream = EventStream(cli, transcript)  # type: ignore[arg-type]
        for chunk in chunks:
            stream.feed(chunk)
        stream.close()
    written = read_events(path)
    for event in written:
        events.parse(event)  # every event fits its documented model
    return stream, written


def split_anywhere(lines: list[dict]) -> list[bytes]:
    """The stream in 7-byte pieces: lines arrive split across reads."""
    data = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
    return [data[i:i + 7] for i in range(0, len(data), 7)]


def test_claude_code_events_become_tool_calls_and_results(tmp_path: Path) -> None:
    stream, written = stream_of(tmp_path, "claude-code", split_anywhere(CLAUDE_LINES))
    calls = [e.data for e in written if e.kind == "tool_call"]
    results = [e.data for e in written if e.kind == "tool_result"]
    assert [(c["id"], c["name"]) for c in calls] == [("toolu_1", "Write"), ("toolu_2", "Bash")]
    assert calls[0]["args"]["file_path"] == "/workspace/a.txt"
    assert [(r["id"], r["ok"], r["output"]) for r in results] == [
        ("toolu_1", True, "File created"), ("toolu_2", False, "Exit code 1")]
    assert results[0]["details"]["source"] == "claude-code"
    assert stream.result is not None and stream.result["result"] == "All done."
    assert "session_id" not in stream.result
    assert stream.events == len(CLAUDE_LINES) and stream.unparsed == 0


def test_codex_events_become_tool_calls_and_results(tmp_path: Path) -> None:
    stream, written = stream_of(tmp_path, "codex", split_anywhere(CODEX_LINES))
    calls = [e.data for e in written if e.kind == "tool_call"]
    results = [e.data for e in written if e.kind == "tool_result"]
    assert [(c["id"], c["name"]) for c in calls] == [("item_1", "command_execution"),
                                                      ("item_2", "file_change")]
    assert results[0]["output"] == "a.txt\n" and results[0]["exit_code"] == 0
    assert stream.turns_completed == 1 and stream.last_message == "All done."


def test_hostile_lines_are_counted_never_raised(tmp_path: Path) -> None:
    deep = "[" * 5000 + "]" * 5000
    chunks = [b"not json\n", b"[1,2]\n", b"\xff\xfe\n", deep.encode() + b"\n",
              b'{"type": "assistant", "message": {"content": "not a list"}}\n',
              b'{"type": "user", "message": null}\n',
              b"x" * (MAX_LINE_BYTES + 10), b"still the same line\n",
              json.dumps(CLAUDE_LINES[1]).encode() + b"\n"]
    stream, written = stream_of(tmp_path, "claude-code", chunks)
    assert stream.oversize == 1
    assert stream.unparsed >= 4
    assert [e.data["name"] for e in written if e.kind == "tool_call"] == ["Write"]


def test_the_arms_prompts_differ_by_the_loops_one_line() -> None:
    task = "# Task\nDo the thing."
    control = build_cli_prompt(None, [], task).splitlines()
    treatment = build_cli_prompt(None, ["traincheck"], task).splitlines()
    added = [line for line in treatment if line not in control]
    assert len(treatment) == len(control) + 1 and len(added) == 1
    description = EXTRA_TOOLS["traincheck"].description
    assert added[0] == f"- traincheck CONFIGURATION: {description}"
    loop = build_system_prompt(None, tools_for_arm(["traincheck"])).splitlines()
    assert any(line.endswith(description) for line in loop)  # the loop's line, same words


def test_the_traincheck_commands_help_says_what_the_tool_says() -> None:
    script = REPO_ROOT / "images/cli/bin/harness-command"
    shown = subprocess.run([sys.executable, str(script), "traincheck", "--help"],
                           capture_output=True, text=True, check=True).stdout
    flat = " ".join(shown.split())
    assert flat.startswith("usage: traincheck CONFIGURATION")
    for sentence in EXTRA_TOOLS["traincheck"].description.split(". "):
        assert sentence.rstrip(".") in flat


@pytest.mark.parametrize("cli", ["claude-code", "codex"])
def test_the_launch_holds_no_secret_and_points_at_the_gateway(cli: str) -> None:
    settings = AgentSettings(model="scripted:x.yaml", kind=cli)  # type: ignore[arg-type]
    launch = cli_launch(cli, "m", settings, 600)  # type: ignore[arg-type]
    text = json.dumps([launch.argv, launch.environment, launch.config_files])
    assert "127.0.0.1:8765" in text and PLACEHOLDER_KEY in text
    if cli == "codex":
        config = launch.config_files["/tmp/harness-cli/home/.codex/config.toml"]
        for line in ('web_search = "disabled"', "request_max_retries = 0",
                     "check_for_update_on_startup = false", 'approval_policy = "never"'):
            assert line in config
    else:
        assert {"WebFetch", "WebSearch"} <= set(launch.argv)
        assert launch.environment["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
        assert launch.environment["MAX_THINKING_TOKENS"] == "0"


def test_a_loop_script_in_claude_codes_tools() -> None:
    write = claude_turns(ScriptStep(tool="write_file", args={"path": "a/b.py", "content": "x"}))
    assert [(t.tool, t.args.get("file_path")) for t in write] == [
        ("Read", "/workspace/a/b.py"), ("Write", "/workspace/a/b.py")]
    run = claude_turns(ScriptStep(tool="run_candidate", args={"configuration": "cpu-1"}))
    assert run[0].tool == "Bash" and run[0].args["command"] == "harness-run-candidate cpu-1"
    done = claude_turns(ScriptStep(tool="submit", args={"summary": "ok"}))
    assert done[0].tool is None and done[0].text == "ok"


@pytest.mark.parametrize("content", ["line\n", "no newline", "x\nHARNESS_SCRIPTED_EOF\n",
                                     "quotes ' \" $HOME `cmd`\n"])
def test_a_codex_write_command_writes_the_exact_content(tmp_path: Path, content: str) -> None:
    command = shell_command(ScriptStep(tool="write_file",
                                       args={"path": "f.txt", "content": content}))
    command = command.replace("/workspace", str(tmp_path))
    subprocess.run(["bash", "-c", command], check=True)
    assert (tmp_path / "f.txt").read_text() == content
    assert codex_turns(ScriptStep(tool="submit", args={"summary": "s"}))[0].tool is None


def test_every_scripted_solve_translates(tmp_path: Path) -> None:
    for path in sorted((REPO_ROOT / "tests/fixtures/agents").glob("*.yaml")):
        steps = yaml.safe_load(path.read_text())["steps"]
        for step in steps:
            parsed = ScriptStep.model_validate(step)
            assert claude_turns(parsed) and codex_turns(parsed)


def test_a_codex_command_still_running_is_waited_on_not_taken_as_done() -> None:
    """Codex hands back a command that outlives its wait as a running session; the scripted
    provider polls that session (write_stdin) and moves on only once it has ended."""
    provider = ScriptedUpstream(Script(steps=[
        ScriptStep(tool="run_candidate", args={"configuration": "cpu-1"}),
        ScriptStep(tool="submit", args={"summary": "done"})]), "codex")

    def answer(outputs: list[str]) -> dict[str, object]:
        items: list[dict[str, object]] = [{"type": "message", "role": "user", "content": "go"}]
        for n, text in enumerate(outputs, start=1):
            items += [{"type": "function_call", "call_id": f"call_{n}", "name": "x",
                       "arguments": "{}"},
                      {"type": "function_call_output", "call_id": f"call_{n}", "output": text}]
        status, _type, body = provider.answer("/v1/responses", json.dumps(
            {"model": "m", "input": items, "stream": False}).encode())
        assert status == 200
        item = json.loads(body)["output"][0]
        return {"type": item["type"], "name": item.get("name"), "call_id": item.get("call_id"),
                "args": json.loads(item["arguments"]) if "arguments" in item else None}

    first = answer([])
    assert first["name"] == "exec_command" and first["args"]["cmd"] == (  # type: ignore[index]
        "harness-run-candidate cpu-1")
    running = "Chunk ID: 1\nWall time: 30.0 seconds\nProcess running with session ID 4242\n"
    poll = answer([running])
    assert poll["name"] == "write_stdin" and poll["call_id"] == "call_2"
    assert poll["args"] == {"session_id": 4242, "chars": "", "yield_time_ms": 300_000}
    again = answer([running, running])
    assert again["name"] == "write_stdin" and again["call_id"] == "call_3"
    done = answer([running, running, "Process exited with code 0\nOutput:\npass\n"])
    assert done["type"] == "message"
