"""Tests of automator/kueue/: the Kueue decisions, their CLI, docs and service step."""
