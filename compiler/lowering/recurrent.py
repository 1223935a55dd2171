"""Lowering rules: recurrent (being written)."""
