"""IR ops: recurrent (being written)."""
