"""GPU Steward dashboards."""
