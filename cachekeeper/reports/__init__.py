"""Miss reports and fleet figures: what serving hosts write (untrusted: every field checked where it is read)
and the sums `stats --traffic`, `suggest` and hot-first ordering read from them."""
