"""``python -m harness.cli``: the same command line as ``harness``."""

from harness.cli.main import main

main()
