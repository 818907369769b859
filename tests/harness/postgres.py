"""(filled in by the harness work)."""
