"""The CLI's one table of next steps: error class -> the `hint:` line printed under its `error:` line.

huggingface_hub's pattern: the library raises classes with their subject as fields, and the CLI, which
knows its own commands and flags, says what to do next. A class without a row inherits its nearest
base's (the MRO is walked). A raise site's own `hint=` (a next step only it knows) wins over the table.
Every flag or command named here exists (tests/test_hints.py walks the click tree to prove it).
"""

from __future__ import annotations

import string
from dataclasses import dataclass

from .. import errors as e


@dataclass(frozen=True)
class Hint:
    text: str            # names no field, so it always prints
    subject: str = ""    # the same step naming the error's fields ({url}, {path}, {key}, {fingerprint})

    def render(self, fields: dict[str, str]) -> str:
        """`subject` filled from `fields` when it names only fields that are set, else `text`."""
        names = {name for _, name, _, _ in string.Formatter().parse(self.subject) if name}
        if self.subject and names <= fields.keys():
            return self.subject.format_map(fields)
        return self.text


HINTS: dict[type[e.CachekeeperError], Hint] = {
    # input
    e.UsageError: Hint("run the command with --help"),
    # No {path} form: a ConfigError's path may be the file a model entry names, not the config.
    e.ConfigError: Hint("fix the config file; `cachekeeper validate CONFIG` checks it without building"),
    e.LockfileError: Hint("create the lockfile with `cachekeeper lock` (again, if it is from another release)",
                          "create {path} with `cachekeeper lock` (again, if it is from another release)"),
    e.SigningKeyError: Hint("create a signing key with `cachekeeper keygen`",
                            "create a signing key at {path} with `cachekeeper keygen`"),
    e.PublicKeyError: Hint("use the `ed25519:...` line `cachekeeper keygen` printed"),
    e.PrivateKeyGiven: Hint("pass the public half (the `ed25519:...` line `cachekeeper keygen` printed); the private "
                            "key stays on the host that signs (--sign-key)"),
    e.UnknownId: Hint("`cachekeeper stats` lists the fingerprints the catalog knows"),
    # storage
    e.StoreError: Hint("check the store URL (--store or CACHEKEEPER_STORE) and that it is reachable"),
    e.StoreNotFound: Hint("create the bucket/directory first, or point --store at an existing one",
                          "create {url} first, or point --store at an existing store"),
    e.StoreAuthError: Hint("check the credentials (AWS_ACCESS_KEY_ID/AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS)"),
    e.StoreWriteDenied: Hint("grant this host write access to the store (blobs/, signatures/, manifests/)"),
    e.StoreUnreachable: Hint("check the endpoint (AWS_ENDPOINT_URL, STORAGE_EMULATOR_HOST) and the network"),
    e.StoreRetryable: Hint("the store kept failing mid-transfer; check its health, or rerun (hydrate resumes)"),
    e.ObjectNotFound: Hint("the store lacks an object the index names; run `cachekeeper verify` or rebuild the entry"),
    e.UnsafePath: Hint("the manifest or archive is hostile or corrupt; do not use this store until it is inspected"),
    e.IntegrityError: Hint("a stored object does not match its digest; run `cachekeeper verify` and rebuild the entry"),
    e.UntrustedManifest: Hint("sign the manifests with a key hydrate trusts (`cachekeeper prebuild --sign-key KEY`, "
                              "public half in --trusted-key / CACHEKEEPER_TRUSTED_KEYS), or hydrate without "
                              "--trusted-key",
                              "trust key {key} (--trusted-key / CACHEKEEPER_TRUSTED_KEYS: its public key, from "
                              "the publisher), or re-sign with a trusted key (`cachekeeper prebuild --sign-key`)"),
    # Roles (docs/security.md): never advise listing a serving host's key as a builder (trusted) key.
    e.WrongKeyRole: Hint("a key signs in one role only: re-sign prebuilt manifests with a builder key "
                         "(`cachekeeper prebuild --sign-key`), and never list a serving host's key with --trusted-key",
                         "key {key} is listed in the other role; re-sign prebuilt manifests with a builder key "
                         "(`cachekeeper prebuild --sign-key`), and never list a serving host's key with "
                         "--trusted-key"),
    e.UntrustedCapture: Hint("captured sets need a serving host's capture key: list its public key with "
                             "--capture-key / CACHEKEEPER_CAPTURE_KEYS (never --trusted-key), or set "
                             "`capture: report` to take no captured sets",
                             "if {key} is a serving host's capture key, list it with --capture-key / "
                             "CACHEKEEPER_CAPTURE_KEYS (never --trusted-key); otherwise leave the set untaken"),
    e.ManifestError: Hint("the manifest is unreadable or of an unknown schema; rebuild the entry"),
    # catalog
    e.CatalogError: Hint("check the catalog URL (--catalog or CACHEKEEPER_CATALOG)"),
    e.CatalogUnreachable: Hint("check that the database is running and the URL's host, port and credentials are right"),
    e.CatalogMissing: Hint("check --catalog / CACHEKEEPER_CATALOG; `cachekeeper prebuild CONFIG` creates the catalog, "
                           "or `cachekeeper db upgrade` an empty one",
                           "check the path; `cachekeeper prebuild CONFIG` creates the catalog, or "
                           "`cachekeeper db upgrade --catalog {url}` an empty one"),
    e.CatalogNotMigrated: Hint("run `cachekeeper db upgrade` against this catalog",
                               "run `cachekeeper db upgrade` against {url}"),
    e.QueuePayloadError: Hint("run the same cachekeeper release on every prebuild worker of one catalog"),
    # backends, builds, hydrate
    e.BackendUnavailable: Hint("run `cachekeeper doctor` to see which backends this host can use and why"),
    e.ToolchainMismatch: Hint("hydrate into a fresh directory (one toolchain per directory) or rebuild for "
                              "this toolchain"),
    e.LockfileMismatch: Hint("regenerate the lockfile on a host like this one (`cachekeeper lock`)",
                             "regenerate {path} on a host like this one (`cachekeeper lock`)"),
    e.DeviceCheckFailed: Hint("compare `cachekeeper doctor` with the server's env (flags, chips, cache dir); "
                              "until the check passes, treat this toolchain's artifacts as unverified"),
    e.BuildFailed: Hint("read the log tail above; `cachekeeper prebuild CONFIG --only KEY` retries one entry",
                        "read the log tail above; `cachekeeper prebuild CONFIG --only {key}` retries it"),
    e.DeviceCheckBuildFailed: Hint("the device check's own build failed, not a prebuild entry: fix what the error "
                                   "names on this host (`cachekeeper doctor` shows the backend), then run "
                                   "`cachekeeper doctor --device-check` again"),
    e.DeviceCheckNeedsModule: Hint("install it where the check runs (the built-in tiny model needs torch and "
                                   "diffusers: the `build` extra), or give the check a diffusers transformer dir of "
                                   "your own: `cachekeeper doctor --device-check --model DIR`"),
    e.NothingToHydrate: Hint("run `cachekeeper coverage CONFIG` to see what is built for this host, then prebuild "
                             "what is missing"),
    e.BlobsMissing: Hint("run `cachekeeper verify`, then prebuild the affected entries again"),
    e.DestinationError: Hint("choose a writable destination with --dest"),
    e.DestStateError: Hint("remove the file named (the next hydrate re-verifies what it finds), or pass "
                           "--best-effort to boot anyway"),
    # hydrate waits for the lock up to its --deadline (10 min without one); capture up to --lock-timeout.
    e.LockBusy: Hint("another hydrate or capture holds the lock; rerun when it is done, or give hydrate a longer "
                     "--deadline (capture: --lock-timeout)",
                     "another hydrate or capture holds {path}; rerun when it is done, or give hydrate a longer "
                     "--deadline (capture: --lock-timeout)"),
    e.HydrateIncomplete: Hint("rerun to fetch the rest (placed files are kept), or pass --best-effort to boot and "
                              "compile the rest"),
    # capture, prebuild fleet
    e.CaptureError: Hint("run `cachekeeper hydrate --dest DIR` first, and capture the same DIR"),
    e.Interrupted: Hint("rerun the same command to finish: hydrate resumes what it placed, and prebuild's "
                        "unfinished entries went back to the queue for the next run"),
    e.AddressUnavailable: Hint("another process listens on that port: stop it, or choose another --port (0: any "
                               "free port; the dashboard prints the one it got)"),
    e.BuildsInProgress: Hint("other workers hold these entries under live leases; rerun with --wait to wait for them"),
    # strict serving
    e.CompileRefused: Hint("add the shape to the config's matrix and run `cachekeeper prebuild CONFIG`, then hydrate "
                           "again; `cachekeeper coverage CONFIG` lists what is not built for this toolchain"),
    e.NotYetHydrated: Hint("start serving once the dest's .cachekeeper/complete marker is there (hot first placed "
                           "only the hottest entries so far), or hydrate without --ready-after"),
    e.CanaryFailed: Hint("add each shape named to the config's matrix (or prebuild the entries named: `cachekeeper "
                         "prebuild CONFIG`), hydrate again, and rerun `cachekeeper canary` before the rollout"),
}


def row_for(cls: type[BaseException]) -> Hint | None:
    """The table row of `cls` or of its nearest base that has one."""
    for klass in cls.__mro__:
        row = HINTS.get(klass)
        if row is not None:
            return row
    return None


def path_hint(exc: e.CachekeeperError, given: list[tuple[str, str]]) -> str | None:
    """For a DestinationError (exit 9) without a raise-site hint: name the flag whose path it is about,
    out of `given` (flag, path) pairs of the command line, e.g. `-o/--output`, `--env-file`, `--store`;
    None when no given path holds or contains the error's path (then the class row speaks)."""
    if not isinstance(exc, e.DestinationError) or exc.hint or not exc.path:
        return None
    from pathlib import Path

    bad = Path(exc.path).absolute()
    best: tuple[int, str, str] | None = None
    for flag, value in given:
        path = Path(value.removeprefix("file://")).absolute()
        if bad == path or path in bad.parents or bad in path.parents:
            depth = len(path.parts)
            if best is None or depth > best[0]:
                best = (depth, flag, value)
    if best is None:
        return None
    _, flag, value = best
    return f"choose a writable path for {flag} (this host cannot write {value})"


def hint_for(exc: e.CachekeeperError) -> str:
    """The one-line next step for `exc`: its raise site's own, else its class's row, filled from its fields."""
    if exc.hint:
        return exc.hint
    row = row_for(type(exc))
    return row.render(exc.fields) if row else ""
