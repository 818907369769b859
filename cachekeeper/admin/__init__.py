"""Store upkeep: one scan of what a store holds (inventory), garbage collection and verification."""
