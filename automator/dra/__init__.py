"""DRA capacity validation (docs/dra.md): ResourceSlices, ResourceClaims, DeviceClasses, Pods and Nodes
of `resource.k8s.io/v1`, and measured per-container GPU memory, checked for broken promises.

model: the records and findings; load: objects and files -> records (one reader per kind: load_slices,
load_claims; Pods and Nodes through their records in automator/objects/; field helpers: fields);
checks: records -> Report;
report: JSON, text, metric samples, Event bodies; metrics: the Prometheus collectors; cli: `dra-check`;
job: the periodic check of `gpu-automator run` over two ports (adapters in automator/kube/dra.py, prom.py).
"""
