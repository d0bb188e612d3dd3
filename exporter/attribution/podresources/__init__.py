"""The kubelet PodResources gRPC API: the generated v1 stubs and the client (`client.py`) that copies its
answer into `exporter.attribution.allocations`' dataclasses."""
