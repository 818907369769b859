"""Optional ed25519 signatures over manifests, like Nix's signed narinfo.

A signature signs the manifest's exact bytes and is stored beside the bucket's manifests at
`signatures/<manifest sha256>` (layout.py) (keyed by digest, so racing builders never overwrite each other's).
Publishers sign with a private key (`CACHEKEEPER_SIGNING_KEY`, a PEM file); hydrate, given trusted
public keys, refuses any manifest without a valid signature from one of them. `cryptography` is
imported only when keys are used.

Keys have a role, because an artifact is code every host of a toolchain runs. **Builder** keys
(`--trusted-key` / `CACHEKEEPER_TRUSTED_KEYS`) sign prebuilt manifests (entries, shared sets); **capture**
keys (`--capture-key` / `CACHEKEEPER_CAPTURE_KEYS`) sign only captured sets, which serving hosts write.
A captured set signed by a builder key, or a prebuilt manifest signed by a capture key, is refused, and
one key listed in both roles is a usage error: a serving host's key can never sign what every host runs.

A signature binds a manifest's identity because it covers the exact bytes, and the bytes name the entry
key, the fingerprint id and the kind. Hydrate compares those with what it asked for
(`hydrate.resolve.check_identity`), so a validly signed manifest of entry B stored at A's key is refused.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import (
    IntegrityError,
    ObjectNotFound,
    PrivateKeyGiven,
    PublicKeyError,
    SigningKeyError,
    UntrustedCapture,
    UntrustedManifest,
    UsageError,
    WrongKeyRole,
)
from ..fs.paths import NotRegular, open_regular
from .layout import signature_key

__all__ = ["BUILDER", "CAPTURE", "Objects", "PublicKey", "SigningKey", "keyring", "publish_signature",
           "require_signature"]

PREFIX = "ed25519:"
MAX_KEY_FILE = 64 * 1024   # an ed25519 PEM is 119 bytes; a key file this large is something else
BUILDER = "builder"
CAPTURE = "capture"


class Objects(Protocol):
    """The two calls signatures need from a store (`stores.base.Store` has them): the format layer
    imports nothing above it."""

    def put_bytes(self, key: str, data: bytes) -> bool: ...
    def get_bytes(self, key: str) -> bytes: ...


def _crypto() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise UsageError("signing needs the `cryptography` package", "pip install cachekeeper[sign]") from None
    return ed25519


@dataclass(frozen=True)
class PublicKey:
    raw: bytes
    role: str = BUILDER     # BUILDER: signs prebuilt manifests; CAPTURE: signs captured sets only

    @property
    def id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]

    def __str__(self) -> str:
        return PREFIX + base64.b64encode(self.raw).decode()

    @classmethod
    def parse(cls, text: str, role: str = BUILDER) -> PublicKey:
        try:
            raw = base64.b64decode(text.strip().removeprefix(PREFIX), validate=True)
        except ValueError:
            raw = b""
        if not text.strip().startswith(PREFIX) or len(raw) != 32:
            raise _not_a_public_key(text, role)
        return cls(raw, role)


def _not_a_public_key(text: str, role: str) -> PublicKeyError:
    """Never echoes the text: what was pasted may be a private key (a PEM file, a token). It is named by
    its length and a short digest, enough to tell two values apart in a log."""
    what = "a capture key" if role == CAPTURE else "a builder (trusted) key"
    tag = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:8]
    if "PRIVATE KEY" in text:
        return PrivateKeyGiven(f"{what} given is a private key, not an ed25519 public key ({len(text)} characters, "
                               f"sha256 {tag}; not shown)")
    return PublicKeyError(f"{what} given is not an ed25519 public key ({len(text)} characters, sha256 {tag}; "
                          "not shown, it may be a secret)")


def keyring(builder: Iterable[str], capture: Iterable[str] = ()) -> tuple[PublicKey, ...]:
    """Builder keys, then capture keys; a key in both roles, or capture keys without builder keys
    (nothing prebuilt could be trusted), is refused."""
    builders = tuple(PublicKey.parse(k, BUILDER) for k in builder)
    captures = tuple(PublicKey.parse(k, CAPTURE) for k in capture)
    both = {k.id for k in builders} & {k.id for k in captures}
    if both:
        raise UsageError(f"key {sorted(both)[0]} is listed as a capture key and as a builder (trusted) key; "
                         "a serving host's key must never sign prebuilt manifests",
                         "list each key once: builders' keys as trusted keys, serving hosts' keys as capture keys")
    if captures and not builders:
        raise UsageError("capture keys were given without any builder (trusted) key",
                         "add the builders' public keys as trusted keys")
    return builders + captures


class SigningKey:
    def __init__(self, private: Any) -> None:
        self._private = private
        from cryptography.hazmat.primitives import serialization

        self.public = PublicKey(private.public_key().public_bytes(serialization.Encoding.Raw,
                                                                  serialization.PublicFormat.Raw))

    @classmethod
    def generate(cls) -> SigningKey:
        return cls(_crypto().Ed25519PrivateKey.generate())

    @classmethod
    def load(cls, path: Path) -> SigningKey:
        _crypto()
        from cryptography.hazmat.primitives import serialization

        if "PRIVATE KEY" in str(path) or "\n" in str(path):   # the key itself, pasted where its path belongs
            tag = hashlib.sha256(str(path).encode("utf-8", "replace")).hexdigest()[:8]
            raise SigningKeyError(f"the signing key option holds key text ({len(str(path))} characters, sha256 "
                                  f"{tag}; not shown), not the path of a key file",
                                  "give the path of the key's PEM file, not its contents")
        try:
            # A FIFO or device named here would block the command for good, /dev/zero would never end: only a
            # regular file (a symlink to one, as Kubernetes mounts secrets, is fine), and only a key's size.
            with open_regular(path, follow=True) as f:
                pem = f.read(MAX_KEY_FILE + 1)
        except NotRegular as exc:
            raise SigningKeyError(f"cannot load signing key {path}: {exc} (it must be a PEM file)",
                                  path=str(path)) from None
        except OSError as exc:
            raise SigningKeyError(f"cannot load signing key {path}: {exc.strerror}", path=str(path)) from None
        if len(pem) > MAX_KEY_FILE:
            raise SigningKeyError(f"cannot load signing key {path}: over {MAX_KEY_FILE // 1024} KiB, which no "
                                  "PEM private key is", path=str(path))
        try:
            key = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError):   # the library's message may quote the file's bytes: never shown
            raise SigningKeyError(f"cannot load signing key {path}: not an unencrypted PEM private key",
                                  path=str(path)) from None
        if not isinstance(key, _crypto().Ed25519PrivateKey):
            raise SigningKeyError(f"{path} is not an ed25519 private key", path=str(path))
        return cls(key)

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return bytes(self._private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                 serialization.NoEncryption()))

    def sign(self, manifest_bytes: bytes) -> bytes:
        sig = self._private.sign(manifest_bytes)
        return json.dumps({"key_id": self.public.id, "signature": base64.b64encode(sig).decode()},
                          sort_keys=True).encode()


def publish_signature(store: Objects, key: SigningKey, manifest_bytes: bytes) -> None:
    """Written before the manifest itself, so a signing publisher never exposes an unsigned manifest."""
    store.put_bytes(signature_key(hashlib.sha256(manifest_bytes).hexdigest()), key.sign(manifest_bytes))


def require_signature(store: Objects, manifest_bytes: bytes, trusted: Iterable[PublicKey], source: str,
                      role: str = BUILDER) -> None:
    """Raise IntegrityError unless a trusted key of `role` signed exactly these bytes."""
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    untrusted = UntrustedCapture if role == CAPTURE else UntrustedManifest
    try:
        doc = json.loads(store.get_bytes(signature_key(digest)))
        key_id, sig = str(doc["key_id"]), base64.b64decode(doc["signature"])
    except ObjectNotFound:
        raise untrusted(f"{source} is not signed, and trusted keys are required") from None
    except (ValueError, KeyError, TypeError):
        raise IntegrityError(f"{source} has an unreadable signature") from None
    key = next((k for k in trusted if k.id == key_id), None)
    if key is None:
        raise untrusted(f"{source} is signed by key {key_id}, which is not trusted", key=key_id)
    if key.role != role:
        what = "prebuilt manifests" if key.role == BUILDER else "captured sets"
        raise WrongKeyRole(f"{source} is signed by {key.role} key {key_id}, which may sign only {what}",
                           key=key_id)
    try:
        _crypto().Ed25519PublicKey.from_public_bytes(key.raw).verify(sig, manifest_bytes)
    except Exception:  # cryptography raises InvalidSignature
        raise IntegrityError(f"{source} has an invalid signature from key {key_id}") from None
