"""IR ops: indexing (being written)."""
