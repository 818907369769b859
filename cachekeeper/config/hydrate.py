"""Every setting of one hydrate, as one frozen value: the config's `hydrate:` section parses into it, the
CLI's flags (and their `CACHEKEEPER_*` env vars) and the Python API's arguments override it field by
field, and the engine reads it. A setting is one field here, one click option, one config key where the
config has it, and an argument of `cachekeeper.hydrate` by construction (its keyword arguments are these
fields; tests/hydration/test_hydrate_options.py walks the click command against them).

Each field carries its kind and bound (`Spec`), so the value is checked once, wherever it came from:
the CLI and the config check at their edge, where the message can name the flag, the variable or the
line; `__post_init__` checks what the Python API hands in with the same bounds. Light: stdlib, bounds and
errors only (the config reads it, and hydrate's start-up must stay fast).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, cast

from .. import settings
from ..bounds import BYTE_BUDGET, COUNT, DEADLINE, THREADS, Bound, checked, checked_bytes
from ..errors import UsageError
from ..fs.durability import MODES as DURABILITY_MODES
from ..fs.durability import Durability

if TYPE_CHECKING:
    from ..format.signing import PublicKey

__all__ = ["ENV_FORMATS", "LINK_MODES", "HydrateOptions", "Spec"]

LinkMode = Literal["auto", "reflink", "hardlink", "copy"]
# how dest files share the node cache's copy: the choices CACHEKEEPER_NODE_CACHE_LINK names (settings.py)
LINK_MODES = cast("tuple[LinkMode, ...]", settings.NODE_CACHE_LINK.choices)
ENV_FORMATS = ("shell", "systemd")                                         # how --env-file is written
HOT_REPORTS = Bound("hot reports", 0, COUNT.high, integer=True)            # 0: the miss reports order nothing

Kind = Literal["flag", "number", "seconds", "bytes", "count", "keys", "path", "choice"]


@dataclass(frozen=True)
class Spec:
    """How one setting is read: its kind, its bound or choices, and whether the config's `hydrate:`
    section has it as a key of the same name."""

    kind: Kind
    bound: Bound | None = None
    choices: tuple[str, ...] = ()
    config: bool = False


def _spec(kind: Kind, *, bound: Bound | None = None, choices: tuple[str, ...] = (),
          config: bool = False) -> dict[str, Spec]:
    return {"spec": Spec(kind, bound, choices, config)}


@dataclass(frozen=True)
class HydrateOptions:
    """How one hydrate runs (what it hydrates, and where, is the request: hydration/request.py)."""

    verify: bool = field(default=False, metadata=_spec("flag"))         # re-hash local files, not trusting the state
    require_all: bool = field(default=False, metadata=_spec("flag"))    # fail on any wanted entry not built
    threads: int = field(default=16, metadata=_spec("number", bound=THREADS))   # parallel downloads
    trusted_keys: tuple[str, ...] = field(default=(), metadata=_spec("keys"))   # builders' ed25519 public keys
    capture_keys: tuple[str, ...] = field(default=(), metadata=_spec("keys"))   # serving hosts' (captured sets only)
    # the whole run, a stalled store included
    deadline: float | None = field(default=None, metadata=_spec("seconds", bound=DEADLINE, config=True))
    # nothing built, the deadline or the store failing: warn, print the env and exit 0
    best_effort: bool = field(default=False, metadata=_spec("flag", config=True))
    node_cache: str | None = field(default=None, metadata=_spec("path", config=True))   # nodecache.py
    node_cache_link: LinkMode = field(default="auto", metadata=_spec("choice", choices=LINK_MODES))
    node_cache_max_bytes: int | None = field(default=None, metadata=_spec("bytes", config=True))
    max_bytes: int | None = field(default=None, metadata=_spec("bytes", config=True))   # the dest's budget (usage.py)
    # None: "boot" (durability.py)
    durability: Durability | None = field(default=None, metadata=_spec("choice", choices=DURABILITY_MODES, config=True))
    # hot first (ready.py): the env and the ready marker once the first N entries are in place
    ready_after: int | None = field(default=None, metadata=_spec("count", bound=COUNT, config=True))
    # the newest miss reports that order the hot entries (hot.py)
    hot_reports: int = field(default=16, metadata=_spec("count", bound=HOT_REPORTS, config=True))
    env_file: str | None = field(default=None, metadata=_spec("path"))   # the env, written when ready
    env_format: str = field(default="shell", metadata=_spec("choice", choices=ENV_FORMATS))
    # node_exporter textfile (docs/observability.md)
    metrics_file: str | None = field(default=None, metadata=_spec("path", config=True))

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            norm = _checked(f.metadata["spec"], value, f"hydrate({f.name}=...)")
            if norm is not value:
                object.__setattr__(self, f.name, norm)
        if self.best_effort and self.require_all:
            raise UsageError("require-all (fail on any miss) and best effort (the flag, env CACHEKEEPER_BEST_EFFORT "
                             "or the config's hydrate.best_effort) contradict each other; drop one")

    def over(self, **given: Any) -> HydrateOptions:
        """These options with the `given` settings replacing theirs; a None is "not given" (an unset flag,
        API argument or env var leaves the config's setting), and so is False for a flag: a flag can only
        turn a setting on."""
        changes = {k: v for k, v in given.items() if v is not None and not (v is False and _kind(k) == "flag")}
        return dataclasses.replace(self, **changes) if changes else self

    def keyring(self) -> tuple[PublicKey, ...]:
        """Builder keys, then capture keys, each with its role (format/signing.keyring)."""
        if not self.trusted_keys and not self.capture_keys:
            return ()
        from ..format.signing import keyring

        return keyring(self.trusted_keys, self.capture_keys)


def spec_of(name: str) -> Spec:
    return _SPECS[name]


def config_keys() -> tuple[str, ...]:
    """The keys of the config's `hydrate:` section, in field order (docs/config.md)."""
    return tuple(name for name, spec in _SPECS.items() if spec.config)


def _kind(name: str) -> Kind | None:
    spec = _SPECS.get(name)
    return spec.kind if spec is not None else None


def _checked(spec: Spec, value: Any, source: str) -> Any:
    """`value` as the field holds it, or one UsageError naming `source` (the API argument)."""
    if value is None and spec.kind in ("seconds", "bytes", "count", "path", "choice"):
        return value
    if spec.kind == "flag":
        return value if isinstance(value, bool) else bool(value)
    if spec.kind in ("number", "seconds", "count"):
        assert spec.bound is not None
        if spec.kind == "seconds":
            return value if type(value) is float and spec.bound.low < value <= spec.bound.high \
                else float(checked(value, spec.bound, source))
        return value if type(value) is int and spec.bound.low <= value <= spec.bound.high \
            else int(checked(value, spec.bound, source))
    if spec.kind == "bytes":
        return value if type(value) is int and BYTE_BUDGET.low <= value <= BYTE_BUDGET.high \
            else checked_bytes(value, source)
    if spec.kind == "keys":
        return (value,) if isinstance(value, str) else value if isinstance(value, tuple) else tuple(value)
    if spec.kind == "path":
        text = os.fspath(value)
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"{source} must name a path, got {value!r}")
        return text if text is value else str(text)
    if value not in spec.choices:
        raise UsageError(f"{source} must be one of {', '.join(spec.choices)}, got {value!r}")
    return value


_SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in fields(HydrateOptions)}
