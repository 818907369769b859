"""Every error cachekeeper raises on purpose: its class, its exit code and its subject as data.

The CLI catches `CachekeeperError`, prints `error: <message>` and `hint: <next step>` and exits with
`exit_code`; anything else is a bug and keeps its traceback. The generic next step of each class lives
in one table in the CLI (`cachekeeper/cli/hints.py`), because it names commands and flags, which a
library caller (the Python API, a plugin) does not have. A raise site may still pass a specific next
step as `hint=` when it knows one, in words that name no CLI flag.

Messages are one line naming the thing; the thing itself travels as a field (`key`, `url`, `path`,
`fingerprint`), so callers read fields and never cut message text. Exit codes are a public promise
(docs/cli.md, "Exit codes"): never renumber one.
"""

from __future__ import annotations


class CachekeeperError(Exception):
    """Base class: an expected failure with a one-line message, its subject as fields, an exit code."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, *, key: str | None = None,
                 url: str | None = None, path: str | None = None, fingerprint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        # A next step only this raise site knows (the CLI prints it instead of its class's); "" when none.
        self.hint = hint or ""
        # The subject, as data: callers read these, never the message text.
        self.key = key                  # an entry key or an object key in a store
        self.url = url                  # a store or catalog URL (a catalog's with its password masked)
        self.path = path                # a local path
        self.fingerprint = fingerprint  # a toolchain fingerprint id

    @property
    def fields(self) -> dict[str, str]:
        """The subject fields that are set, by name (what a hint template may format)."""
        values = {"key": self.key, "url": self.url, "path": self.path, "fingerprint": self.fingerprint}
        return {name: value for name, value in values.items() if value is not None}

    def __str__(self) -> str:
        return self.message


# --- what a plugin lets out ----------------------------------------------------------------------------

def outside_contract(exc: BaseException) -> bool:
    """Whether a plugin (a store, a backend) raised `exc` outside its contract, so cachekeeper translates it
    at the plugin's boundary (stores/plugin.py, backends/__init__.py). The contract's own classes pass, and
    so do what is no plugin's failure: KeyboardInterrupt, SystemExit (not `Exception`s) and MemoryError."""
    return isinstance(exc, Exception) and not isinstance(exc, (CachekeeperError, MemoryError))


def describe(exc: BaseException) -> str:
    """`exc` as one short line: `ConnectionResetError: [Errno 104] Connection reset by peer`."""
    text = " ".join(str(exc).split())
    text = text if len(text) <= 300 else text[:299] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# --- input (2) -------------------------------------------------------------------------------------

class UsageError(CachekeeperError):
    exit_code = 2


class ConfigError(CachekeeperError):
    exit_code = 2


class LockfileError(UsageError):
    """A lockfile (`path`) that does not exist or is not one this release reads."""


class SigningKeyError(UsageError):
    """A signing key file (`path`) that cannot be loaded or holds no ed25519 private key."""


class PublicKeyError(UsageError):
    """Text given as a trusted public key that is not an ed25519 public key."""


class PrivateKeyGiven(PublicKeyError):
    """A private key (PEM) given where a public key belongs; its text is never echoed."""


class UnknownId(UsageError):
    """An id prefix that names no fingerprint the catalog knows."""


# --- storage (3) and what a store holds (4) ------------------------------------------------------

class StoreError(CachekeeperError):
    exit_code = 3


class StoreNotFound(StoreError):
    """The bucket or store directory does not exist."""


class StoreAuthError(StoreError):
    """No usable credentials, or access denied."""


class StoreWriteDenied(StoreAuthError):
    """The store answers reads but refuses writes; the message names the permission a writer needs."""


class StoreUnreachable(StoreError):
    """The endpoint does not answer (refused, timed out, reset)."""


class StoreRetryable(StoreError):
    """One read attempt failed in a way another attempt may not (reset, stall, short body, 5xx): the
    resumable reader retries it within the deadline; it reaches the user only once retries are spent."""


class ObjectNotFound(StoreError):
    """A key the caller expected is not in the store."""


class UnsafePath(CachekeeperError):
    """A key or archive member that would escape its root: hostile or corrupt input."""

    exit_code = 4


class IntegrityError(CachekeeperError):
    """A stored object does not match its digest."""

    exit_code = 4


class UntrustedManifest(IntegrityError):
    """Trusted keys are required and a manifest is unsigned, or signed by a key that is not trusted
    (`key`: that key's id). A trust problem, not corrupt bytes."""


class WrongKeyRole(UntrustedManifest):
    """A manifest signed by a known key of the other role: a capture key on a prebuilt manifest, or a
    builder key on a captured set (docs/security.md, "Builder keys and capture keys")."""


class UntrustedCapture(UntrustedManifest):
    """A captured set (a serving host's compile) unsigned, or signed by a key not listed as a capture key."""


class ManifestError(CachekeeperError):
    """A manifest that is unreadable or of an unknown schema."""

    exit_code = 4


# --- catalog (5) -----------------------------------------------------------------------------------

class CatalogError(CachekeeperError):
    exit_code = 5


class CatalogUnreachable(CatalogError):
    """The database does not answer, or its location cannot be created."""


class CatalogMissing(CatalogError):
    """A read-only command named a catalog that does not exist (it never creates one)."""


class CatalogNotMigrated(CatalogError):
    """The database's schema is not this release's head revision."""


class QueuePayloadError(CatalogError):
    """A queued build written by another cachekeeper release."""


class CatalogURLError(UsageError, CatalogError):
    """A catalog URL that names no supported database (a misspelt scheme or driver, a missing `://`): bad
    input, exit 2, and still a CatalogError to a library caller catching those."""


# --- backends, builds, hydrate (6-11) --------------------------------------------------------------

class BackendUnavailable(CachekeeperError):
    """A backend this host cannot use. `of()` keeps the backend and the bare reason as fields (doctor shows
    the reason in its own row); plugins may still raise it with one message, as before."""

    exit_code = 6
    backend: str | None = None
    reason: str | None = None

    @classmethod
    def of(cls, backend: str, reason: str, hint: str | None = None) -> BackendUnavailable:
        exc = cls(f"{backend}: {reason}", hint)
        exc.backend, exc.reason = backend, reason
        return exc


class ToolchainMismatch(CachekeeperError):
    exit_code = 6


class LockfileMismatch(ToolchainMismatch):
    """A lockfile (`path`) pins a toolchain (`fingerprint`) other than this host's."""


class DeviceCheckFailed(ToolchainMismatch):
    """`doctor --device-check`: a fresh server on a hydrated dir compiled anyway (the runtime's key covers
    something the toolchain fingerprint does not, or the runtime does not read the dir)."""

    compiled: int = 0


class BuildFailed(CachekeeperError):
    exit_code = 7


class DeviceCheckBuildFailed(BuildFailed):
    """`doctor --device-check`: one of the check's own processes (the tiny model, the build, the server) failed,
    ran out of time, or wrote no result: the check could not judge the runtime (not a prebuild entry)."""


class DeviceCheckNeedsModule(DeviceCheckBuildFailed):
    """`doctor --device-check`: a module one of its processes imports (torch, diffusers) is not installed."""


class NothingToHydrate(CachekeeperError):
    exit_code = 8


class BlobsMissing(NothingToHydrate):
    """The store (`url`) lacks blobs its manifests name, and every entry was required."""


class DestinationError(CachekeeperError):
    exit_code = 9


class DestStateError(DestinationError):
    """cachekeeper's own records in a dest (`layout.json`, `state.json`, their dir) cannot be read or
    replaced, or are of a newer release: hydrate with best effort boots anyway (the server compiles)."""


class LockBusy(CachekeeperError):
    """Another process holds a hydrated dir's lock past the wait this process allowed."""

    exit_code = 10


class HydrateIncomplete(CachekeeperError):
    """The deadline ran out or the store failed: what was placed and verified is kept and recorded."""

    exit_code = 11


# --- runtime-miss capture (12), prebuild fleet (13) ------------------------------------------------

class CaptureError(CachekeeperError):
    """A dest capture cannot work on (never hydrated) or files the runtime is still writing."""

    exit_code = 12


class BuildsInProgress(CachekeeperError):
    """Entries other prebuild workers hold under live leases."""

    exit_code = 13


# --- serving (14) ------------------------------------------------------------------------------------

class AddressUnavailable(CachekeeperError):
    """The address a server of ours (the dashboard) was to listen on cannot be bound: the port is in use
    (another dashboard, another server), not permitted, or the host is not one of this machine's."""

    exit_code = 14


# --- strict serving (15) ----------------------------------------------------------------------------

class CompileRefused(CachekeeperError):
    """Strict mode `fail` (`cachekeeper.runtime.strict`, CACHEKEEPER_STRICT): a serving process would compile,
    or, where the runtime only tells afterwards, just did. `key`: the matrix entry that would have served the
    call, when the process knows the matrix; `path`: the served dir. `compiled`: whether the compile ran."""

    exit_code = 15
    compiled: bool = False


class NotYetHydrated(CompileRefused):
    """Hot first (`--ready-after`): the call's entry is wanted but not placed yet; the server asked before the
    hydrate was complete."""


class CanaryFailed(CompileRefused):
    """The canary: replaying matrix entries' warm-ups on a hydrated dir under strict `fail` compiled (or would
    have); the message names each shape."""


# --- signals (128 + the signal's number, as a shell reports a process the signal ended) ---------------

class Interrupted(CachekeeperError):
    """SIGINT (Ctrl-C) stopped the command; what it finished is kept and its claims were released."""

    exit_code = 130


class Terminated(Interrupted):
    """SIGTERM stopped the command (a unit stopping, a pod evicted)."""

    exit_code = 143
