"""Who owns a GPU process or device: host PID -> container -> pod (see docs/attribution.md).

Pure: cgroup.py (parsing /proc/<pid>/cgroup), pods.py (the pods-list index), allocations.py (the
PodResources answer). Adapters: podresources/ (gRPC), kubeapi.py (the Kubernetes client) and kubelet.py,
the attributor that combines them. Nothing is imported here, so that importing one part does not load
gRPC or the Kubernetes client.
"""
