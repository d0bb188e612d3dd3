"""KEDA integration: GPU signals per workload for KEDA's metrics-api scaler and an external scaler
(docs/keda.md).

Pure: signals, request, workloads, values, cache, scaledobject. Adapters: http (flask), scaler (grpc),
kube (kubernetes); wiring joins them to the service.
"""
