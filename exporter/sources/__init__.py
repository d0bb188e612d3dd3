"""GPU sources: `nvml` (a real node, nvml.py), `mock` (mock.py, playing a scenario file read by
scenario.py). Their port and error type are in exporter/ports.py."""
