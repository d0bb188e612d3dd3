"""Test fakes: the Kubernetes API server and its simulated cluster (kubelet, scheduler, GPUs, the KEDA and
Kueue stand-ins), kube-state-metrics series of it, and the Prometheus, Alertmanager and mock-exporter
launchers."""
