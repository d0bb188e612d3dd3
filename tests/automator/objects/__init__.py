"""Tests of automator/objects/: the Kubernetes object records and their readers."""
