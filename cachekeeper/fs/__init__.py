"""The local disk: trusted paths and temp names (`paths`), atomic writes (`atomic`), locks and temp sweeps
(`locks`). Imports nothing above `errors`: the format layer and the boot path both use it."""
