"""The public bucket format: what other hosts read (keys, manifests, fingerprints, entry specs,
signatures). Other versions of cachekeeper read these bytes, so a change here is a format change:
it carries a version field. These modules import nothing above them (tests/test_layers.py)."""
