"""Contracts both binaries share: metric and series names, the settings spec, quantities, conventions."""
