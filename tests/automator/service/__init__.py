"""Tests of automator/service/: the run service, its pass, actions, fencing and endpoints."""
