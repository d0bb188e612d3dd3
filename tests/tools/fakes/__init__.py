"""Tests of tools/fakes/."""
