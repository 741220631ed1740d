"""Kubernetes clusters as hosts: dev containers as pods (``objects``: the manifests, built by
pure functions)."""
