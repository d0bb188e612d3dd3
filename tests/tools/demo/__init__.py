"""Tests of tools/demo/."""
