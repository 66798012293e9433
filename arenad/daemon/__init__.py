"""The long-running service: sources in, the single-writer engine task, queries and metrics out."""
