"""Tests of automator/prom.py: the Prometheus adapter against real and hostile servers."""
