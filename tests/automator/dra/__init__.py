"""Tests of automator/dra/: the DRA check, its loader, report, CLI and service step."""
