"""The agent: a provider proposes tool calls, the loop executes them in the sandbox."""
