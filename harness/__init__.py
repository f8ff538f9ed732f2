"""Host-side package of the harness: CLI, study, sandbox, agent loop, budgets, transcripts."""
