"""Tests of automator/kube/: the Kubernetes adapter against the fake API server."""
