"""Tests of automator/reclaim/: the planner, its rules, the reclaim annotations and the snapshot files."""
