"""Benchmarks for arenad. ``python -m bench`` runs the core (Engine) benchmark; see README.md."""
