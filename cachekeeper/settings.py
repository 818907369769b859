"""Every `CACHEKEEPER_*` environment variable, named once: its kind, its bound, its default and its one-line
doc, as huggingface_hub names its `HF_*` variables in one `constants.py`. Code reads a variable through its
`Setting` (`settings.STALL_TIMEOUT.get()`), and a click option that takes one names it
(`envvar=settings.STORE.name`), so a variable cannot be read in one place and checked in another, nor be
missing from docs/config.md's table (tests/test_settings.py holds the registry to the docs and the code).

A bad value is one error naming `env VAR` and its bound, raised where the value is read; the variables read
outside click are also checked when any command starts (`check_environment`), so a typo is refused before
any work, even on a run that ends up a no-op.

Internal variables are set by cachekeeper for its own subprocesses (or by its tests), not by users; the
deploy variables are named by the deploy units, which pass them as flags: cachekeeper never reads them.
Light: the stdlib, `bounds` and `errors` only (the boot path reads its settings here).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from . import bounds
from .bounds import Bound
from .errors import UsageError

T = TypeVar("T")
Kind = Literal["number", "bytes", "choice", "bool", "path", "url", "text", "list", "json"]
# What click's BoolParamType takes (a flag's envvar is read by click; `get` agrees with it).
_TRUE = ("1", "true", "t", "yes", "y", "on")
_FALSE = ("0", "false", "f", "no", "n", "off")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One variable. `flags`: the CLI flags that take it as their default (click reads it for them);
    `internal`: set by cachekeeper for its own subprocesses or tests, never documented for users;
    `deploy_only`: named by the deploy units (deploy/), which pass it as a flag; `sep`: a list's separator
    (None: whitespace, as click splits a `multiple` option's envvar); `default`: as the docs say it."""

    name: str
    kind: Kind
    doc: str
    default: str = "unset"
    bound: Bound | None = None
    choices: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    internal: bool = False
    deploy_only: bool = False
    sep: str | None = None
    parse: Callable[[Setting[Any], str], T] = field(default=lambda s, raw: raw, repr=False, compare=False)

    def get(self, environ: Mapping[str, str] | None = None) -> T | None:
        """The value from `environ` (default: the process's), checked; None when unset or empty. A bad value
        is one UsageError naming `env NAME` and what it must be."""
        raw = (os.environ if environ is None else environ).get(self.name, "")
        return None if not raw.strip() else self.parse(self, raw)

    def describe(self) -> str:
        """The bound as the docs' table states it."""
        if self.bound is not None and self.kind == "number":
            return self.bound.describe()
        if self.choices:
            return _one_of(self.choices)
        if self.kind == "list":
            return {None: "a space-separated list", ",": "a comma-separated list"}.get(self.sep, "one item a line")
        return _KIND_TEXT[self.kind]


_KIND_TEXT: dict[Kind, str] = {
    "bytes": "a byte count from 1 to 2**60 (e.g. 20G)", "bool": "a boolean (1, true, yes, on / 0, false, no, off)",
    "path": "a path", "url": "a URL", "text": "text", "list": "a list", "json": "a JSON object",
    "number": "a number", "choice": "one of a list",
}


def _one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]


def _number(s: Setting[Any], raw: str) -> int | float:
    assert s.bound is not None
    return bounds.checked(raw, s.bound, f"env {s.name}")


def _bytes(s: Setting[Any], raw: str) -> int:
    return bounds.checked_bytes(raw, f"env {s.name}")


def _choice(s: Setting[Any], raw: str) -> str:
    value = raw.strip().lower()
    if value not in s.choices:
        raise UsageError(f"env {s.name}: {raw!r} is not one of {', '.join(s.choices)}",
                         f"set {s.name} to {_one_of(s.choices)}, or unset it")
    return value


def _bool(s: Setting[Any], raw: str) -> bool:
    value = raw.strip().lower()
    if value not in _TRUE + _FALSE:
        raise UsageError(f"env {s.name}: {raw!r} is not a boolean", f"set {s.name} to 1 or 0, or unset it")
    return value in _TRUE


def _path(s: Setting[Any], raw: str) -> Path:
    return Path(raw)


def _json(s: Setting[Any], raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise UsageError(f"env {s.name}: not JSON ({exc})") from None


def _items(s: Setting[Any], raw: str) -> tuple[str, ...]:
    """A list: split on the setting's `sep`, empty items dropped."""
    return tuple(item for item in raw.split(s.sep) if item)


# --- where things live -------------------------------------------------------------------------------------

HOME: Setting[Path] = Setting(
    "CACHEKEEPER_HOME", "path", "the home of the embedded defaults: `store/`, `catalog.db`, `spool/`, `hydrated/`",
    default="`./.cachekeeper`", parse=_path)
STORE: Setting[str] = Setting(
    "CACHEKEEPER_STORE", "url", "the store: `file:///dir`, `s3://bucket/prefix`, `gs://bucket/prefix` or a plugin's",
    default="`file://$CACHEKEEPER_HOME/store`", flags=("--store",))
CATALOG: Setting[str] = Setting(
    "CACHEKEEPER_CATALOG", "url", "the catalog: `sqlite:///file` or `postgresql+psycopg://...`",
    default="`sqlite:///$CACHEKEEPER_HOME/catalog.db`", flags=("--catalog",))
SPOOL: Setting[Path] = Setting(
    "CACHEKEEPER_SPOOL", "path", "where `cachekeeper.runtime.watch(pipe)` records calls for miss reports",
    default="`$CACHEKEEPER_HOME/spool`", flags=("--spool",), parse=_path)
BACKENDS: Setting[tuple[str, ...]] = Setting(
    "CACHEKEEPER_BACKENDS", "list", "plugin backends, `name=module:Class[,...]`, beside the built-in ones",
    sep=",", parse=_items)

# --- reading the store ---------------------------------------------------------------------------------------

STALL_TIMEOUT: Setting[int | float] = Setting(
    "CACHEKEEPER_STALL_TIMEOUT", "number", "seconds without a byte before a store read is abandoned and retried",
    default="`15`", bound=bounds.STALL_TIMEOUT, parse=_number)
PART_MIB: Setting[int | float] = Setting(
    "CACHEKEEPER_PART_MIB", "number", "hydrate fetches a blob this big as parallel ranged GETs of this size; "
    "0 turns parts off", default="`32`", bound=bounds.PART_MIB, parse=_number)
S3_ADDRESSING_STYLE: Setting[str] = Setting(
    "CACHEKEEPER_S3_ADDRESSING_STYLE", "choice", "S3 bucket addressing (auto: path-style when `AWS_ENDPOINT_URL` "
    "or `AWS_ENDPOINT_URL_S3` is set, as emulators need)", default="`auto`", choices=("auto", "path", "virtual"),
    parse=_choice)

# --- hydrate -------------------------------------------------------------------------------------------------

DEADLINE: Setting[int | float] = Setting(
    "CACHEKEEPER_DEADLINE", "number", "seconds a whole hydrate may take, a stalled store included (exit 11)",
    bound=bounds.DEADLINE, flags=("--deadline",), parse=_number)
BEST_EFFORT: Setting[bool] = Setting(
    "CACHEKEEPER_BEST_EFFORT", "bool", "boot anyway: on no build, a spent deadline or a failed store, warn, "
    "print the env and exit 0", default="`false`", flags=("--best-effort",), parse=_bool)
TRUSTED_KEYS: Setting[tuple[str, ...]] = Setting(
    "CACHEKEEPER_TRUSTED_KEYS", "list", "builder keys (ed25519 public keys, space-separated): accept only "
    "prebuilt manifests they signed", flags=("--trusted-key",), parse=_items)
CAPTURE_KEYS: Setting[tuple[str, ...]] = Setting(
    "CACHEKEEPER_CAPTURE_KEYS", "list", "serving hosts' keys (space-separated): accept captured sets they signed",
    flags=("--capture-key",), parse=_items)
NODE_CACHE: Setting[Path] = Setting(
    "CACHEKEEPER_NODE_CACHE", "path", "keep verified blobs once per node here and fill the dest from them",
    flags=("--node-cache",), parse=_path)
NODE_CACHE_LINK: Setting[str] = Setting(
    "CACHEKEEPER_NODE_CACHE_LINK", "choice", "how dest files share the node cache's copy", default="`auto`",
    choices=("auto", "reflink", "hardlink", "copy"), flags=("--node-cache-link",), parse=_choice)
NODE_CACHE_MAX_BYTES: Setting[int] = Setting(
    "CACHEKEEPER_NODE_CACHE_MAX_BYTES", "bytes", "the node cache's budget; least recently used blobs no dest "
    "links go first", bound=bounds.BYTE_BUDGET, flags=("--node-cache-max-bytes",), parse=_bytes)
MAX_BYTES: Setting[int] = Setting(
    "CACHEKEEPER_MAX_BYTES", "bytes", "the dest's budget; entries not wanted now go by last use",
    bound=bounds.BYTE_BUDGET, flags=("--max-bytes",), parse=_bytes)
DURABILITY: Setting[str] = Setting(
    "CACHEKEEPER_DURABILITY", "choice", "fsync each file, or trust the state file only within this boot, or both",
    default="`boot`", choices=("fsync", "boot", "both"), flags=("--durability",), parse=_choice)
READY_AFTER: Setting[int | float] = Setting(
    "CACHEKEEPER_READY_AFTER", "number", "write the env and the ready marker once this many entries (hottest "
    "first) are in place, then hydrate the rest", bound=bounds.COUNT, flags=("--ready-after",), parse=_number)
METRICS_FILE: Setting[Path] = Setting(
    "CACHEKEEPER_METRICS_FILE", "path", "write the run's metrics here in node_exporter's textfile format",
    flags=("--metrics-file",), parse=_path)

# --- build and serve -----------------------------------------------------------------------------------------

WORKER: Setting[str] = Setting(
    "CACHEKEEPER_WORKER", "text", "this builder's id in the shared queue (the holder of a claimed entry)",
    default="`host:pid`", flags=("--worker",))
SIGNING_KEY: Setting[Path] = Setting(
    "CACHEKEEPER_SIGNING_KEY", "path", "ed25519 private key (PEM) that signs published manifests",
    flags=("--sign-key",), parse=_path)
METRICS_PUSH: Setting[str] = Setting(
    "CACHEKEEPER_METRICS_PUSH", "url", "a Pushgateway the prebuild job pushes its metrics to when it ends",
    flags=("--metrics-push",))
METRICS_PORT: Setting[int | float] = Setting(
    "CACHEKEEPER_METRICS_PORT", "number", "`report --watch` serves `/metrics` on this port",
    bound=bounds.PORT, flags=("--metrics-port",), parse=_number)
MODEL: Setting[str] = Setting(
    "CACHEKEEPER_MODEL", "text", "the model name `watch(pipe)` records calls under", default="the pipeline's class")
STRICT: Setting[str] = Setting(
    "CACHEKEEPER_STRICT", "choice", "strict serving: `report` counts and warns once per shape when a serving process "
    "compiles, `fail` raises instead (read when `cachekeeper.runtime` is imported)", default="`off`",
    choices=("off", "report", "fail"), parse=_choice)
LOG_FORMAT: Setting[str] = Setting(
    "CACHEKEEPER_LOG_FORMAT", "choice", "stderr as human lines, or one JSON object per event", default="`human`",
    choices=("human", "json"), flags=("--log-format",), parse=_choice)
TPU_CHIP_LOCK: Setting[Path] = Setting(
    "CACHEKEEPER_TPU_CHIP_LOCK", "path", "the lock file TPU builds on one host share the chips by",
    default="`$TMPDIR/cachekeeper-tpu-chips.lock`", parse=_path)

# --- named by the deploy units (deploy/boot), which pass them as flags -------------------------------------

CONFIG: Setting[Path] = Setting(
    "CACHEKEEPER_CONFIG", "path", "the units' `--config` (hydrate.env); cachekeeper itself does not read it",
    deploy_only=True, parse=_path)
DEST: Setting[Path] = Setting(
    "CACHEKEEPER_DEST", "path", "the units' `--dest` (hydrate.env); cachekeeper itself does not read it",
    deploy_only=True, parse=_path)

# --- internal: set by cachekeeper for its own subprocesses, or by its tests --------------------------------

BUILD_WARNINGS: Setting[tuple[str, ...]] = Setting(
    "CACHEKEEPER_BUILD_WARNINGS", "list", "warning lines the host side hands a build subprocess to print",
    internal=True, sep="\n", parse=_items)
SERVE_CALL: Setting[dict[str, Any]] = Setting(
    "CACHEKEEPER_SERVE_CALL", "json", "the device check's server call (`steps`, `prompt`, `seed`) for the build "
    "subprocess", internal=True, parse=_json)
TPU_TIER2_BASE: Setting[Path] = Setting(
    "CACHEKEEPER_TPU_TIER2_BASE", "path", "where the TPU runtime keeps its tier-2 cache (tests point it elsewhere)",
    default="`/dev/shm/torch_tpu_cache`", internal=True, parse=_path)

REGISTRY: tuple[Setting[Any], ...] = (
    HOME, STORE, CATALOG, SPOOL, BACKENDS, STALL_TIMEOUT, PART_MIB, S3_ADDRESSING_STYLE, DEADLINE, BEST_EFFORT,
    TRUSTED_KEYS, CAPTURE_KEYS, NODE_CACHE, NODE_CACHE_LINK, NODE_CACHE_MAX_BYTES, MAX_BYTES, DURABILITY,
    READY_AFTER, METRICS_FILE, WORKER, SIGNING_KEY, METRICS_PUSH, METRICS_PORT, MODEL, STRICT, LOG_FORMAT,
    TPU_CHIP_LOCK, CONFIG, DEST, BUILD_WARNINGS, SERVE_CALL, TPU_TIER2_BASE,
)
# Read outside click (no flag checks them) and checkable: refused when any command starts.
CHECKED_AT_ENTRY = tuple(s for s in REGISTRY if not s.flags and (s.bound is not None or s.choices))


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every variable cachekeeper reads outside its flags, checked at entry: a typo is one error naming the
    variable before any work, not a surprise on the first fetch (or never, on a no-op)."""
    for setting in CHECKED_AT_ENTRY:
        setting.get(environ)


def markdown_table() -> str:
    """docs/config.md's table of the user-facing variables (`python -m cachekeeper.settings` prints it)."""
    rows = ["| variable | default | bound | what |", "|---|---|---|---|"]
    for s in REGISTRY:
        if not s.internal:
            flags = f" (the default of {', '.join(f'`{f}`' for f in s.flags)})" if s.flags else ""
            rows.append(f"| `{s.name}` | {s.default} | {s.describe()} | {s.doc}{flags} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
