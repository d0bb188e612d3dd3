"""GPU Steward automator."""
