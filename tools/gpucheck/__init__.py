"""The real-GPU check of the NVML source (`make gpu-check`, `python -m tools.gpucheck`, docs/exporter.md).

cuda: the CUDA driver API through ctypes and the PTX spin kernel; workload: the child processes' known
loads; children: starting and always stopping them; survey: every NVML read, raw; checks: pure verdicts
on measured values; report: the JSON report; run: the whole check.
"""
