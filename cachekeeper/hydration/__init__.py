"""The hydrate engine: store → a host's cache dir. Never imports torch, the build side, the catalog's ORM,
the dashboard or the runtime (pyproject's contracts, tests/test_layers.py); the public function is
`cachekeeper.hydrate` (api.py).

Public to the other layers are the dest's records only: `state` (state.json, its records lock, the used/
last-use records and `record_use`) and `destdir` (layout.json and the per-toolchain dirs). Capture, the
runtime and `gc --dest` read a hydrated dest through them. Every other module here is the engine's inside:
only the CLI, api.py and admin/ import one. The settings a hydrate runs with are `config/hydrate.py`'s
`HydrateOptions`; the fsync modes a state records are `fs/durability.py`."""
