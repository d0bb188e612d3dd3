"""GPU Steward exporter."""

__version__ = "0.1.0"
