"""Host-side package of the harness: CLI, study config, sandbox, agent loop, budgets, transcripts."""
