"""Lowering rules: indexing (being written)."""
