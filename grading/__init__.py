"""Grading package: runs INSIDE the grading container only. Never imports ``harness``."""
