"""containers."""
