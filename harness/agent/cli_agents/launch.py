"""How each coding-agent CLI is started in the sandbox: headless, as the ``agent`` user in
/workspace, its permission prompts answered by configuration, its telemetry, update checks and
web tools off, and its model API pointed at the gateway's forwarder on the container's loopback
with a placeholder key (the provider's key never enters the container).

Claude Code: ``claude -p`` (print mode) with ``--output-format stream-json --verbose`` (one
JSON event a line), ``--permission-mode bypassPermissions`` (it runs as non-root, so it
accepts), WebFetch and WebSearch disallowed, output and thinking tokens set from the study
(``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, ``MAX_THINKING_TOKENS``: 0, thinking off, unless the study
sets ``reasoning.thinking_budget_tokens``, as for the loop's Anthropic provider).

Codex: ``codex exec --json`` with a ``config.toml`` that defines the gateway as its model
provider (0.169 ignores OPENAI_BASE_URL), never asks for approval, runs commands without its
own sandbox (the container is the sandbox), and has web search, analytics, feedback, history
and update checks off; its own retries are off, so the gateway's policy is the only one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.infra.images.cli_binaries import CliKind, pinned
from harness.infra.sandbox import WORKSPACE
from harness.records.study import AgentSettings

# Where the CLI's state, configuration, prompt and stderr go (the /tmp tmpfs; never the
# workspace, so none of it lands in the diff).
CLI_DIR = "/tmp/harness-cli"
HOME = f"{CLI_DIR}/home"
PROMPT_FILE = f"{CLI_DIR}/prompt.md"
STDERR_FILE = f"{CLI_DIR}/stderr.log"
GATEWAY_PORT = 8765
# What the CLI sends as its API key: not a secret. The gateway drops it and adds the real one.
PLACEHOLDER_KEY = "harness-gateway-placeholder"


@dataclass(frozen=True)
class CliLaunch:
    cli: CliKind
    version: str
    argv: list[str]
    environment: dict[str, str]
    # Absolute container path -> content, written before the CLI starts.
    config_files: dict[str, str] = field(default_factory=dict)


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def claude_code_launch(model: str, settings: AgentSettings, time_limit_s: float) -> CliLaunch:
    thinking = settings.reasoning.get("thinking_budget_tokens")
    limit_ms = str(int(max(time_limit_s, 60) * 1000))
    environment = {
        "HOME": HOME,
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{GATEWAY_PORT}",
        "ANTHROPIC_API_KEY": PLACEHOLDER_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(settings.max_output_tokens),
        "MAX_THINKING_TOKENS": str(int(thinking)) if thinking else "0",
        # A command (a candidate run, TrainCheck) may take as long as the session has; the
        # harness's own deadline still holds.
        "BASH_DEFAULT_TIMEOUT_MS": limit_ms,
        "BASH_MAX_TIMEOUT_MS": limit_ms,
        "API_TIMEOUT_MS": limit_ms,
    }
    argv = ["harness-agent-cli", "-p", "--output-format", "stream-json", "--verbose",
            "--model", model, "--permission-mode", "bypassPermissions",
            "--disallowedTools", "WebFetch", "WebSearch"]
    return CliLaunch(cli="claude-code", version=pinned("claude-code").version, argv=argv,
                     environment=environment)


def codex_launch(model: str, settings: AgentSettings, time_limit_s: float) -> CliLaunch:
    codex_home = f"{HOME}/.codex"
    effort = settings.reasoning.get("effort")
    lines = [
        f"model = {_toml_string(model)}",
        'model_provider = "gateway"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        'web_search = "disabled"',
        "check_for_update_on_startup = false",
        *([f"model_reasoning_effort = {_toml_string(str(effort))}"] if effort else []),
        "",
        "[analytics]",
        "enabled = false",
        "",
        "[feedback]",
        "enabled = false",
        "",
        "[history]",
        'persistence = "none"',
        "",
        "[model_providers.gateway]",
        'name = "harness gateway"',
        f'base_url = "http://127.0.0.1:{GATEWAY_PORT}/v1"',
        'env_key = "OPENAI_API_KEY"',
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        f"stream_idle_timeout_ms = {int(max(time_limit_s, 60) * 1000)}",
        "",
    ]
    environment = {"HOME": HOME, "CODEX_HOME": codex_home, "OPENAI_API_KEY": PLACEHOLDER_KEY}
    argv = ["harness-agent-cli", "exec", "--json", "--strict-config", "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox", "-C", WORKSPACE, "-"]
    return CliLaunch(cli="codex", version=pinned("codex").version, argv=argv,
                     environment=environment,
                     config_files={f"{codex_home}/config.toml": "\n".join(lines)})


def cli_launch(cli: CliKind, model: str, settings: AgentSettings,
               time_limit_s: float) -> CliLaunch:
    """The launch of ``cli`` for a model NAME (without its provider prefix)."""
    if cli == "claude-code":
        return claude_code_launch(model, settings, time_limit_s)
    return codex_launch(model, settings, time_limit_s)
