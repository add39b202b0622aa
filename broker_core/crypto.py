"""End-to-end encryption, as Pulsar does it: AES-GCM payloads, the data key wrapped per recipient key.

A producer created with ``encryption_key`` and a ``CryptoKeyReader`` draws a random 256-bit data
key, wraps it with the reader's RSA public key (OAEP, SHA-1, as Pulsar's clients do) and seals
every payload with AES-256-GCM under a fresh 96-bit IV.  The wrapped key, the IV and the algorithm
travel with the message in the reserved property ``pubsub.encryption`` (``docs/PROTOCOL.md``,
section "End-to-end encryption"), so a topic on shared storage holds only ciphertext.  A consumer or
reader unwraps the data key with the reader's private key (cached per wrapped key) and opens the
payload; when it cannot, its ``ConsumerCryptoFailureAction`` decides: ``FAIL`` keeps the message
from the application, ``DISCARD`` drops it (a consumer acknowledges it), ``CONSUME`` hands over the
ciphertext with ``encryption_context().is_decryption_failed()`` true.

The ``cryptography`` package is needed only when encryption is used (the ``crypto`` extra).
"""

from __future__ import annotations

import base64
import enum
import json
import os
from dataclasses import dataclass, field
from typing import Any

from broker_core.errors import CryptoError, InvalidConfiguration
from broker_core.log.segment import CompressionType

ENCRYPTION_PROPERTY = "pubsub.encryption"  # the reserved message property holding the metadata
ALGORITHM = "AES-256-GCM"
_FORMAT_VERSION = 1
_DATA_KEY_BYTES = 32
_IV_BYTES = 12
_MESSAGES_PER_DATA_KEY = 1 << 31  # random 96-bit IVs stay safe far beyond this under one key


class ConsumerCryptoFailureAction(enum.IntEnum):
    """What a consumer or reader does with a message it cannot decrypt (the official values)."""

    FAIL = 0
    DISCARD = 1
    CONSUME = 2


def _check_str(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidConfiguration(
            f"argument {name!r} must be str, got {type(value).__name__} {value!r}", argument=name
        )
    return value


class CryptoKeyReader:
    """The official default key reader: one PEM public key and one PEM private key, whatever the
    key name.  Subclass and override ``public_key``/``private_key`` to pick keys by name.

    Args:
        public_key_path: PEM file of the RSA public key producers wrap data keys with.
        private_key_path: PEM file of the matching private key consumers unwrap them with.
    """

    def __init__(self, public_key_path: str, private_key_path: str) -> None:
        self.public_key_path = _check_str(public_key_path, "public_key_path")
        self.private_key_path = _check_str(private_key_path, "private_key_path")

    def public_key(self, key_name: str) -> bytes:
        """The PEM public key for ``key_name``."""
        return _read_key(self.public_key_path, key_name, "public")

    def private_key(self, key_name: str) -> bytes:
        """The PEM private key for ``key_name``."""
        return _read_key(self.private_key_path, key_name, "private")


def _read_key(path: str, key_name: str, kind: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise CryptoError(
            f"cannot read the {kind} key for {key_name!r} from {path!r}: {exc.strerror or exc}", key=key_name
        ) from exc


def _primitives() -> Any:
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise CryptoError(
            "end-to-end encryption needs the 'cryptography' package: pip install 'spark-pubsub[crypto]'"
        ) from exc
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm=hashes.SHA1()), algorithm=hashes.SHA1(), label=None)
    return serialization, rsa, AESGCM, oaep


@dataclass(frozen=True)
class EncryptionKey:
    """One recipient of a message's data key: the key name, the wrapped data key, its metadata."""

    key: str
    value: bytes
    metadata: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"EncryptionKey(key={self.key!r}, value_len={len(self.value)}, metadata={self.metadata})"


@dataclass(frozen=True)
class EncryptionContext:
    """How a received message was encrypted (``Message.encryption_context()``)."""

    _keys: tuple[EncryptionKey, ...]
    _param: bytes
    _algorithm: str
    _decryption_failed: bool

    def keys(self) -> list[EncryptionKey]:
        return list(self._keys)

    def param(self) -> bytes:
        """The IV the payload was sealed with."""
        return self._param

    def algorithm(self) -> str:
        return self._algorithm

    def compression_type(self) -> CompressionType:
        """Compression is the segment file's (Parquet), never the payload's here: always NONE."""
        return CompressionType.NONE

    def uncompressed_message_size(self) -> int:
        return 0

    def batch_size(self) -> int:
        """-1: messages are sealed one by one, never as a batch."""
        return -1

    def is_decryption_failed(self) -> bool:
        return self._decryption_failed

    def header_property(self) -> str:
        """The ``pubsub.encryption`` property this context was read from (a copy of a message that
        could not be decrypted carries it on, so the ciphertext stays openable by a key holder)."""
        keys = [{"name": k.key, "value": base64.b64encode(k.value).decode(), "metadata": dict(k.metadata)}
                for k in self._keys]
        header = {"v": _FORMAT_VERSION, "algo": self._algorithm, "iv": base64.b64encode(self._param).decode(),
                  "keys": keys}
        return json.dumps(header, separators=(",", ":"))

    def __repr__(self) -> str:
        return (f"EncryptionContext(algorithm={self._algorithm!r}, is_decryption_failed={self._decryption_failed}, "
                f"keys={list(self._keys)})")


class MessageEncryptor:
    """A producer's sealing state: the data key and its wrapped form (loaded at producer creation,
    so a missing or wrong public key fails ``create_producer`` with ``CryptoError``)."""

    def __init__(self, key_name: str, reader: CryptoKeyReader) -> None:
        self._key_name = _check_str(key_name, "encryption_key")
        if not isinstance(reader, CryptoKeyReader):
            raise InvalidConfiguration(
                f"argument 'crypto_key_reader' must be a CryptoKeyReader, got {type(reader).__name__}",
                argument="crypto_key_reader",
            )
        serialization, rsa, aesgcm, oaep = _primitives()
        pem = reader.public_key(key_name)
        try:
            public = serialization.load_pem_public_key(pem)
        except ValueError as exc:
            raise CryptoError(f"the public key for {key_name!r} is not a PEM public key: {exc}", key=key_name) from exc
        if not isinstance(public, rsa.RSAPublicKey):
            raise CryptoError(f"the public key for {key_name!r} must be an RSA key, got {type(public).__name__}")
        self._public, self._aesgcm, self._oaep = public, aesgcm, oaep
        self._rotate()

    def _rotate(self) -> None:
        data_key = os.urandom(_DATA_KEY_BYTES)
        self._cipher = self._aesgcm(data_key)
        wrapped = self._public.encrypt(data_key, self._oaep)
        self._keys = [{"name": self._key_name, "value": base64.b64encode(wrapped).decode(), "metadata": {}}]
        self._sealed = 0

    def seal(self, data: bytes, properties: dict[str, str] | None) -> tuple[bytes, dict[str, str]]:
        """The ciphertext of ``data`` and the message properties carrying its metadata."""
        if properties and ENCRYPTION_PROPERTY in properties:
            raise InvalidConfiguration(
                f"property {ENCRYPTION_PROPERTY!r} is reserved for end-to-end encryption; rename it",
                argument="properties",
            )
        if self._sealed >= _MESSAGES_PER_DATA_KEY:
            self._rotate()
        self._sealed += 1
        iv = os.urandom(_IV_BYTES)
        header = {"v": _FORMAT_VERSION, "algo": ALGORITHM, "iv": base64.b64encode(iv).decode(), "keys": self._keys}
        props = dict(properties or {})
        props[ENCRYPTION_PROPERTY] = json.dumps(header, separators=(",", ":"))
        return self._cipher.encrypt(iv, data, None), props


class Outcome(enum.Enum):
    """What the receiving side does with an encrypted message after trying to open it."""

    DELIVER = 0
    DISCARD = 1
    HOLD = 2


class MessageDecryptor:
    """A consumer's or reader's opening state: the key reader, the failure action, and the data
    keys it has unwrapped (by wrapped bytes, so each is unwrapped once)."""

    def __init__(self, reader: CryptoKeyReader | None, action: ConsumerCryptoFailureAction | None) -> None:
        self._reader = reader
        self._action = ConsumerCryptoFailureAction.FAIL if action is None else action
        self._keys: dict[bytes, Any] = {}
        self.last_error: CryptoError | None = None

    @property
    def has_reader(self) -> bool:
        return self._reader is not None

    @property
    def reader(self) -> CryptoKeyReader | None:
        """The key reader (dead and retry letters re-encrypt with its public keys)."""
        return self._reader

    def open(self, msg: Any) -> Outcome:
        """Decrypt ``msg`` in place (payload, properties, context); say what to do with it."""
        props = dict(msg._properties)
        raw = props.pop(ENCRYPTION_PROPERTY)
        try:
            header = json.loads(raw)
            iv = base64.b64decode(header["iv"])
            keys = tuple(
                EncryptionKey(k["name"], base64.b64decode(k["value"]), dict(k.get("metadata", {})))
                for k in header["keys"]
            )
            algorithm = str(header["algo"])
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            return self._failed(msg, props, (), b"", "", f"its {ENCRYPTION_PROPERTY} property is malformed: {exc}")
        if self._reader is None:
            return self._failed(msg, props, keys, iv, algorithm, "the consumer has no crypto_key_reader")
        if algorithm != ALGORITHM:
            return self._failed(msg, props, keys, iv, algorithm, f"algorithm {algorithm!r} is not {ALGORITHM}")
        reasons: list[str] = []
        for key in keys:
            try:
                cipher = self._cipher(key)
                msg._data = cipher.decrypt(iv, msg._data or b"", None)
            except Exception as exc:  # a wrong key, a damaged payload: try the next recipient key
                reasons.append(f"{key.key}: {type(exc).__name__} {exc}".strip())
                continue
            msg._properties = props
            msg._encryption = EncryptionContext(keys, iv, algorithm, False)
            return Outcome.DELIVER
        return self._failed(msg, props, keys, iv, algorithm, "no key opened it (" + "; ".join(reasons) + ")")

    def _cipher(self, key: EncryptionKey) -> Any:
        cipher = self._keys.get(key.value)
        if cipher is None:
            assert self._reader is not None
            serialization, _, aesgcm, oaep = _primitives()
            private = serialization.load_pem_private_key(self._reader.private_key(key.key), password=None)
            cipher = aesgcm(private.decrypt(key.value, oaep))
            self._keys[key.value] = cipher
        return cipher

    def _failed(
        self, msg: Any, props: dict[str, str], keys: tuple[EncryptionKey, ...], iv: bytes, algorithm: str, why: str
    ) -> Outcome:
        self.last_error = CryptoError(
            f"cannot decrypt message {msg.message_id()} of {msg._topic}: {why}", topic=msg._topic
        )
        if self._action == ConsumerCryptoFailureAction.CONSUME:
            msg._properties = props
            msg._encryption = EncryptionContext(keys, iv, algorithm, True)
            return Outcome.DELIVER
        return Outcome.DISCARD if self._action == ConsumerCryptoFailureAction.DISCARD else Outcome.HOLD


def is_encrypted(msg: Any) -> bool:
    """Whether a received message carries encryption metadata (cheap: most have no properties)."""
    props = msg._properties
    return bool(props) and ENCRYPTION_PROPERTY in props


__all__ = [
    "ALGORITHM",
    "ENCRYPTION_PROPERTY",
    "ConsumerCryptoFailureAction",
    "CryptoKeyReader",
    "EncryptionContext",
    "EncryptionKey",
    "MessageDecryptor",
    "MessageEncryptor",
    "Outcome",
    "is_encrypted",
]
