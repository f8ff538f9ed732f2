"""Coding-agent CLIs (Claude Code, Codex) as a session's agent: ``launch`` (how each starts,
headless, offline), ``prompt`` (what it is told), ``commands`` (the harness commands its
container may ask the host for), ``stream`` (its JSONL events into the transcript) and ``run``
(one CLI run, its budgets and its outcome).
"""
