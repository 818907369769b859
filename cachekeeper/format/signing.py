"""Optional ed25519 signatures over manifests, like Nix's signed narinfo.

A signature signs the manifest's exact bytes and is stored beside the bucket's manifests at
`signatures/<manifest sha256>` (layout.py) (keyed by digest, so racing builders never overwrite each other's).
Publishers sign with a private key (`CACHEKEEPER_SIGNING_KEY`, a PEM file); hydrate, given trusted
public keys (`--trusted-key` / `CACHEKEEPER_TRUSTED_KEYS`), refuses any manifest without a valid
signature from one of them. `cryptography` is imported only when keys are used.

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

from ..errors import IntegrityError, ObjectNotFound, UsageError
from .layout import signature_key

__all__ = ["Objects", "PublicKey", "SigningKey", "publish_signature", "require_signature"]

PREFIX = "ed25519:"


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

    @property
    def id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]

    def __str__(self) -> str:
        return PREFIX + base64.b64encode(self.raw).decode()

    @classmethod
    def parse(cls, text: str) -> PublicKey:
        try:
            raw = base64.b64decode(text.strip().removeprefix(PREFIX), validate=True)
        except ValueError:
            raw = b""
        if not text.strip().startswith(PREFIX) or len(raw) != 32:
            raise UsageError(f"not an ed25519 public key: {text.strip()[:40]!r}",
                             "use the `ed25519:...` line `cachekeeper keygen` printed")
        return cls(raw)


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

        try:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            raise UsageError(f"cannot load signing key {path}: {exc}", "create one with `cachekeeper keygen`",
                             path=str(path)) from None
        if not isinstance(key, _crypto().Ed25519PrivateKey):
            raise UsageError(f"{path} is not an ed25519 private key", "create one with `cachekeeper keygen`",
                             path=str(path))
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


def require_signature(store: Objects, manifest_bytes: bytes, trusted: Iterable[PublicKey], source: str) -> None:
    """Raise IntegrityError unless a trusted key signed exactly these bytes."""
    digest = hashlib.sha256(manifest_bytes).hexdigest()
    try:
        doc = json.loads(store.get_bytes(signature_key(digest)))
        key_id, sig = str(doc["key_id"]), base64.b64decode(doc["signature"])
    except ObjectNotFound:
        raise IntegrityError(f"{source} is not signed, and trusted keys are required") from None
    except (ValueError, KeyError, TypeError):
        raise IntegrityError(f"{source} has an unreadable signature") from None
    key = next((k for k in trusted if k.id == key_id), None)
    if key is None:
        raise IntegrityError(f"{source} is signed by key {key_id}, which is not trusted")
    try:
        _crypto().Ed25519PublicKey.from_public_bytes(key.raw).verify(sig, manifest_bytes)
    except Exception:  # cryptography raises InvalidSignature
        raise IntegrityError(f"{source} has an invalid signature from key {key_id}") from None
