"""Tests of automator/cli.py: the command line, its input files and what it prints."""
