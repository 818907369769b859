"""Every error cachekeeper raises on purpose, and the hint the CLI prints for it.

The CLI catches `CachekeeperError` and prints `error: <message>` plus `hint: <hint>` and exits with
`exit_code`; anything else is a bug and keeps its traceback. Keep messages to one line naming the thing
(path, URL, key) and hints to one line naming the next step.
"""

from __future__ import annotations


class CachekeeperError(Exception):
    """Base class: an expected failure with a one-line message and a next step."""

    exit_code = 1
    hint = ""

    def __init__(self, message: str, hint: str | None = None, *, key: str | None = None,
                 url: str | None = None, path: str | None = None, fingerprint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint
        # The subject, as data: callers read these, never the message text.
        self.key = key                  # an entry key or an object key in a store
        self.url = url                  # a store or catalog URL
        self.path = path                # a local path
        self.fingerprint = fingerprint  # a toolchain fingerprint id

    def __str__(self) -> str:
        return self.message


# --- input -----------------------------------------------------------------------------------------


class UsageError(CachekeeperError):
    exit_code = 2
    hint = "run the command with --help"


class ConfigError(CachekeeperError):
    exit_code = 2
    hint = "fix the config file; `cachekeeper validate CONFIG` checks it without building"


# --- storage ---------------------------------------------------------------------------------------


class StoreError(CachekeeperError):
    exit_code = 3
    hint = "check the store URL (--store or CACHEKEEPER_STORE) and that it is reachable"


class StoreNotFound(StoreError):
    hint = "create the bucket/directory first, or point --store at an existing one"


class StoreAuthError(StoreError):
    hint = "check the credentials (AWS_ACCESS_KEY_ID/AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS)"


class StoreUnreachable(StoreError):
    hint = "check the endpoint (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST) and the network"


class ObjectNotFound(StoreError):
    hint = "the store lacks an object the index names; run `cachekeeper verify` or rebuild the entry"


class UnsafePath(CachekeeperError):
    exit_code = 4
    hint = "the manifest or archive is hostile or corrupt; do not use this store until it is inspected"


class IntegrityError(CachekeeperError):
    exit_code = 4
    hint = "a stored object does not match its digest; run `cachekeeper verify` and rebuild the entry"


class ManifestError(CachekeeperError):
    exit_code = 4
    hint = "the manifest is unreadable or of an unknown schema; rebuild the entry"


# --- catalog ---------------------------------------------------------------------------------------


class CatalogError(CachekeeperError):
    exit_code = 5
    hint = "check the catalog URL (--catalog or CACHEKEEPER_CATALOG)"


class CatalogUnreachable(CatalogError):
    hint = "check that the database is running and the URL's host, port and credentials are right"


class CatalogNotMigrated(CatalogError):
    hint = "run `cachekeeper db upgrade` against this catalog"


# --- backends, builds, hydrate ---------------------------------------------------------------------


class BackendUnavailable(CachekeeperError):
    exit_code = 6
    hint = "run `cachekeeper doctor` to see which backends this host can use and why"


class ToolchainMismatch(CachekeeperError):
    exit_code = 6
    hint = "hydrate into a fresh directory (one toolchain per directory) or rebuild for this toolchain"


class BuildFailed(CachekeeperError):
    exit_code = 7
    hint = "read the log tail above; `cachekeeper prebuild --only KEY` retries one entry"


class NothingToHydrate(CachekeeperError):
    exit_code = 8
    hint = "run `cachekeeper coverage` to see what is built for this host, then prebuild what is missing"


class DestinationError(CachekeeperError):
    exit_code = 9
    hint = "choose a writable destination with --dest"


class LockBusy(CachekeeperError):
    exit_code = 10
    hint = "another cachekeeper process holds the lock; wait for it or pass a longer --lock-timeout"


class StoreRetryable(StoreError):
    """One read attempt failed in a way another attempt may not (reset, stall, short body, 5xx): the
    resumable reader retries it within the deadline; it reaches the user only once retries are spent."""

    hint = "the store kept failing mid-transfer; check its health, or rerun (hydrate resumes)"


class HydrateIncomplete(CachekeeperError):
    """The deadline ran out or the store failed: what was placed and verified is kept and recorded."""

    exit_code = 11
    hint = "rerun to fetch the rest (placed files are kept), or pass --best-effort to boot and compile the rest"


# --- prebuild fleet --------------------------------------------------------------------------------


class QueuePayloadError(CatalogError):
    hint = "run the same cachekeeper release on every prebuild worker of one catalog"


class BuildsInProgress(CachekeeperError):
    exit_code = 13
    hint = "other workers hold these entries under live leases; rerun with --wait to wait for them"


# --- runtime-miss capture --------------------------------------------------------------------------


class CaptureError(CachekeeperError):
    """A dest capture cannot work on (never hydrated) or files the runtime is still writing."""

    exit_code = 12
    hint = "run `cachekeeper hydrate --dest DIR` first, and capture the same DIR"


class StoreWriteDenied(StoreAuthError):
    """The store answers reads but refuses writes; the message names the permission a writer needs."""

    hint = "grant this host write access to the store (blobs/, signatures/, manifests/)"
