"""Tests of tools/gpucheck/."""
