"""Tests of automator/settings.py: the settings parser, its numbers, and the docs that state them."""
