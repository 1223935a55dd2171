"""Lowering rules: attention (being written)."""
