"""IR ops: attention (being written)."""
