"""The serving host's side: hydrate (store → cache dir), capture (runtime misses → store) and the
fleet counters. Never imports torch, the build side, the catalog's ORM or the dashboard
(tests/test_layers.py); the public functions are `cachekeeper.hydrate` and `cachekeeper.capture`."""
