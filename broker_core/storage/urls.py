"""Service URLs and ``storage_options``: which ``FileIO`` a root gets, configured how.

A root is a folder path, a ``file://`` URL, or an object-store URL (``s3://bucket/prefix``,
``s3a://``, ``gs://``, ``az://``, ``abfss://container@account.dfs.core.windows.net/prefix``,
``memory://name/prefix`` for in-process tests and examples).  ``storage_options`` use the keys
delta-rs and the Rust ``object_store`` crate use (``aws_endpoint``, ``aws_region``,
``aws_access_key_id``, ``aws_secret_access_key``, ``aws_session_token``, ``aws_allow_http``, ...),
so one dict serves ``Client``, ``deltalake.DeltaTable``, the CLI and Spark; the standard ``AWS_*``
environment variables fill in what the dict leaves out.  Keys starting with ``pubsub_`` are this
library's own (``pubsub_single_writer``) and are not passed to the store.

Secrets never appear in a message: ``redact`` masks them, ``scrub`` removes their values from any
text (an obstore error) before it is shown, and ``mask_userinfo`` hides the user-info part of any
URL in a text (``s3://KEY:SECRET@bucket`` becomes ``s3://***@bucket``), whatever the secret holds
(``/``, ``:``, ``@``, ``%2F``): such a URL is refused, and the refusal must not echo it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlparse, urlsplit

from broker_core.errors import InvalidConfiguration, InvalidUrl

OBJECT_STORE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "adl", "azure", "memory")
_PULSAR_SCHEMES = ("pulsar", "pulsar+ssl", "http", "https", "pulsar+http", "pulsar+https")
_SECRET_MARKERS = ("secret", "token", "password", "key", "sas", "credential", "signature")
# object_store's HTTP client settings (the rest of the options configure the store itself)
_CLIENT_KEYS = ("allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "proxy_url",
                "user_agent", "pool_idle_timeout", "http1_only", "http2_only")
# a URL's scheme and everything up to the last "@" of the same word: its user info, even when a
# secret's "/" or "@" moved the "@" past where ``urlparse`` ends the host
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^\s'\"`<>()\[\]{}]*@)")
# options and variables whose value obstore parses as a URL (it panics, a BaseException, on a malformed one)
_URL_ENV = ("AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT",
            "GOOGLE_BASE_URL")
_URI_CHARS = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
_OWN_KEYS = ("pubsub_single_writer", "pubsub_max_retries", "pubsub_retry_timeout_ms", "pubsub_simulated_latency")


@dataclass(frozen=True)
class RootSpec:
    """A parsed root: ``url`` without secrets, its scheme, and the options to open it with."""

    url: str
    scheme: str
    local_path: str | None = None
    storage_options: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_object_store(self) -> bool:
        return self.local_path is None

    def __repr__(self) -> str:  # the options may hold credentials
        return f"RootSpec({self.url!r}, storage_options={redact(self.storage_options)!r})"


def is_secret_key(key: str) -> bool:
    """Whether an option's value must never be shown (credentials, tokens, SAS keys)."""
    lowered = key.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with every secret value replaced by ``***``."""
    return {key: ("***" if is_secret_key(key) else value) for key, value in options.items()}


def mask_userinfo(text: str) -> str:
    """``text`` with the user info of every URL in it replaced by ``***``.  An Azure container
    (``abfss://container@account...``, no ``:`` or ``/`` before the ``@``) is a name, not a secret."""

    def masked(match: re.Match[str]) -> str:
        scheme, info = match.group("scheme"), match.group("info")
        if scheme.lower() in ("abfs://", "abfss://") and info.count("@") == 1 and not re.search(r"[:/%]", info):
            return match.group(0)
        return f"{scheme}***@"

    return _USERINFO.sub(masked, text) if "@" in text else text


def scrub(text: str, options: Mapping[str, Any]) -> str:
    """``text`` with every secret value of ``options`` (and of the ``AWS_*`` environment) and the
    user info of every URL (``mask_userinfo``) masked."""
    values = [str(v) for k, v in options.items() if is_secret_key(k) and v]
    values += [v for k, v in os.environ.items()
               if k.startswith(("AWS_", "AZURE_", "GOOGLE_")) and is_secret_key(k) and v]
    for value in sorted(set(values), key=len, reverse=True):
        if len(value) >= 4:
            text = text.replace(value, "***")
    return mask_userinfo(text)


_AWS_CREDENTIAL_KEYS = ("access_key_id", "secret_access_key", "session_token", "token", "skip_signature",
                        "web_identity_token_file", "container_credentials_relative_uri",
                        "container_credentials_full_uri")


def has_aws_credentials(options: Mapping[str, str]) -> bool:
    """Whether S3 credentials (or unsigned access) come from ``options`` or the ``AWS_*`` environment;
    without them obstore falls back to the instance-metadata service."""
    given = {key.removeprefix("aws_") for key, value in options.items() if value}
    if given & set(_AWS_CREDENTIAL_KEYS):
        return True
    return any(os.environ.get(f"AWS_{key.upper()}") for key in _AWS_CREDENTIAL_KEYS)


def normalise_options(storage_options: Mapping[str, Any] | None) -> dict[str, str]:
    """Lower-case keys and string values; refuse what is not a flat str -> str mapping."""
    if storage_options is None:
        return {}
    if not isinstance(storage_options, Mapping):
        raise InvalidConfiguration(
            f"storage_options must be a mapping of option names to values, got {type(storage_options).__name__}"
        )
    out: dict[str, str] = {}
    for key, value in storage_options.items():
        if not isinstance(key, str) or not key.strip():
            raise InvalidConfiguration(f"storage option names must be non-empty strings, got {key!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, str | int | float):
            shown = "***" if is_secret_key(key) else repr(value)
            raise InvalidConfiguration(f"storage option {key!r} must be a string, got {shown}", option=key)
        out[key.strip().lower()] = str(value)
    return out


def parse_root(service_url: str, storage_options: Mapping[str, Any] | None = None) -> RootSpec:
    """Parse a service URL into a ``RootSpec`` (no I/O).

    Raises:
        InvalidUrl: not a string, whitespace, a Pulsar broker URL, credentials inside the URL, or a
            scheme no backend serves.
        InvalidConfiguration: malformed ``storage_options``.
    """
    if not isinstance(service_url, str) or not service_url.strip():
        raise InvalidUrl(
            f"service_url must be a non-empty string naming a storage root, got "
            f"{mask_userinfo(repr(service_url)) if isinstance(service_url, str) else type(service_url).__name__}; "
            "pass a folder path, a file:// URL or an object-store URL such as s3://bucket/prefix"
        )
    shown = mask_userinfo(service_url)  # every message below shows this, never the URL itself
    if service_url != service_url.strip():
        raise InvalidUrl(f"service_url {shown!r} has leading or trailing whitespace; remove it")
    options = normalise_options(storage_options)
    parsed = urlparse(service_url)
    scheme = parsed.scheme.lower()
    if scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise InvalidUrl(f"file URL {shown!r} names host {parsed.netloc!r}; use file:///absolute/path")
        path = unquote(parsed.path)
        return RootSpec(url="file://" + os.path.abspath(path), scheme="file", local_path=path, storage_options=options)
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        return RootSpec(url="file://" + os.path.abspath(service_url), scheme="file", local_path=service_url,
                        storage_options=options)
    if scheme in _PULSAR_SCHEMES:
        raise InvalidUrl(
            f"service_url {shown!r} names a Pulsar broker, but spark-pubsub has no broker: "
            "pass the storage root instead (a folder path, file:///path or s3://bucket/prefix)"
        )
    if scheme not in OBJECT_STORE_SCHEMES:
        raise InvalidUrl(
            f"service_url {shown!r} uses the unsupported scheme {scheme!r}; pass a folder "
            f"path, a file:// URL or one of {', '.join(s + '://' for s in OBJECT_STORE_SCHEMES)}"
        )
    # a secret holding "/" ends the host early (``s3://KEY:SE/CRET@bucket``): a ":" left in the host
    # (or a port, which no object-store URL names) and an "@" in the prefix are refused alike (D122)
    if (parsed.password is not None or (parsed.username is not None and scheme not in ("abfs", "abfss"))
            or ":" in parsed.netloc or "@" in parsed.path):
        raise InvalidUrl(
            f"service_url {shown!r} carries credentials (or a port); pass them in storage_options "
            "(aws_access_key_id / aws_secret_access_key, ...) or the environment, never in the URL, "
            "and an endpoint as aws_endpoint"
        )
    if parsed.query or parsed.fragment:
        raise InvalidUrl(f"service_url {shown!r} has a query or fragment; remove it")
    if not parsed.netloc:
        raise InvalidUrl(f"service_url {shown!r} names no bucket or container; use {scheme}://bucket/prefix")
    prefix = parsed.path.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise InvalidUrl(f"service_url {shown!r} has an empty, '.' or '..' segment in its prefix; remove it")
    url = f"{scheme}://{parsed.netloc}" + (f"/{prefix}" if prefix else "")
    return RootSpec(url=url, scheme=scheme, storage_options=options)


def _is_url_option(key: str) -> bool:
    return "endpoint" in key or key.endswith("_url") or key.endswith("_url_s3")


def check_endpoint(name: str, value: str) -> None:
    """Refuse an endpoint (or other URL) option obstore could not parse, before obstore sees it.

    obstore parses such values only when it sends its first request, and a malformed one (a bad port,
    an unclosed IPv6 bracket, a space) makes it panic: a ``pyo3_runtime.PanicException``, which is a
    ``BaseException`` that escapes ``except Exception``, after a Rust backtrace on stderr.

    Raises:
        InvalidConfiguration: naming the option (or variable) and its value, userinfo masked.
    """
    reason = None
    try:
        parsed = urlsplit(value)
        port = parsed.port  # ValueError when out of range or not a number
        del port
    except ValueError as exc:
        reason = str(exc)
    else:
        if parsed.scheme.lower() not in ("http", "https"):
            reason = "it must start with http:// or https://"
        elif not parsed.hostname:
            reason = "it names no host"
        elif not _URI_CHARS.fullmatch(value):
            reason = "it holds a character a URL may not (a space, a control or non-ASCII character, a quote)"
    if reason is not None:
        raise InvalidConfiguration(
            f"storage option {name!r} = {mask_userinfo(value)!r} is not a valid endpoint URL ({reason}); "
            "use http(s)://host[:port], e.g. http://127.0.0.1:9000",
            option=name,
        )


def check_url_options(spec: RootSpec) -> None:
    """Check every URL-valued storage option, and the standard variables that stand in for them."""
    for key, value in spec.storage_options.items():
        if key not in _OWN_KEYS and _is_url_option(key):
            check_endpoint(key, value)
    family: str | None = {"s3": "AWS_", "s3a": "AWS_", "gs": "GOOGLE_", "memory": None}.get(spec.scheme, "AZURE_")
    for variable in _URL_ENV:
        found = os.environ.get(variable)
        overridden = variable.lower() in spec.storage_options
        if family is not None and variable.startswith(family) and found and not overridden:
            check_endpoint(f"{variable} (environment variable)", found)


def truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


_ENDPOINT_KEYS = ("endpoint", "endpoint_url")


def _check_plain_http(spec: RootSpec, config: Mapping[str, str], client: Mapping[str, Any]) -> None:
    """Refuse an ``http://`` endpoint unless HTTP is allowed: obstore's own answer is a bare
    "builder error" at the first request, which names neither the option nor the endpoint."""
    if client.get("allow_http"):
        return
    prefix = {"s3": "aws", "s3a": "aws", "gs": "google", "az": "azure", "abfs": "azure", "abfss": "azure"}.get(
        spec.scheme)
    if prefix is None:
        return
    found = [(key, value) for key, value in config.items()
             if key.removeprefix(f"{prefix}_") in _ENDPOINT_KEYS]
    if prefix == "aws" and not found:
        found = [(name, os.environ[name]) for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT") if os.environ.get(name)][:1]
    for key, value in found:
        if value.strip().lower().startswith("http://"):
            raise InvalidConfiguration(
                f"the endpoint {mask_userinfo(value.strip())!r} (from {key}) of {spec.url} is plain HTTP, which the "
                f"store refuses unless allowed: set the storage option {prefix}_allow_http=true (Spark: "
                f"storage.{prefix}_allow_http, CLI: --storage-option {prefix}_allow_http=true"
                + (", or the environment variable AWS_ALLOW_HTTP=true" if prefix == "aws" else "")
                + "), or use an https:// endpoint",
                option=f"{prefix}_allow_http",
                root=spec.url,
            )


def obstore_arguments(spec: RootSpec) -> dict[str, Any]:
    """The keyword arguments for ``obstore.store.from_url``: store config, client options, retries.

    Unknown keys are left for obstore to judge (it knows every store's keys); this library's own
    ``pubsub_*`` keys are taken out.  Retries default to a short total timeout so that an
    unreachable endpoint fails in seconds, not obstore's minutes.
    """
    check_url_options(spec)
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    for key, value in spec.storage_options.items():
        if key in _OWN_KEYS:
            continue
        if key.startswith("pubsub_"):
            raise InvalidConfiguration(
                f"unknown storage option {key!r}; this library's own options are {', '.join(_OWN_KEYS)}", option=key
            )
        # delta-rs spells HTTP-client settings with the store's prefix (aws_allow_http); obstore wants
        # them as client options (and panics on aws_allow_http in a store config)
        plain = key.split("_", 1)[1] if key.startswith(("aws_", "google_", "azure_")) else key
        if plain in _CLIENT_KEYS:
            client[plain] = truthy(value) if plain in ("allow_http", "allow_invalid_certificates") else value
        else:
            config[key] = value
    for plain in ("allow_http", "allow_invalid_certificates"):  # obstore leaves these env variables unread
        env = os.environ.get(f"AWS_{plain.upper()}") if spec.scheme in ("s3", "s3a") else None
        if plain not in client and env is not None:
            client[plain] = truthy(env)
    _check_plain_http(spec, config, client)
    try:
        max_retries = int(spec.storage_options.get("pubsub_max_retries", "3"))
        retry_timeout_ms = int(spec.storage_options.get("pubsub_retry_timeout_ms", "15000"))
    except ValueError as exc:
        raise InvalidConfiguration(f"pubsub_max_retries and pubsub_retry_timeout_ms must be integers: {exc}") from exc
    if max_retries < 0 or retry_timeout_ms <= 0:
        raise InvalidConfiguration("pubsub_max_retries must be >= 0 and pubsub_retry_timeout_ms > 0")
    client.setdefault("connect_timeout", "5s")
    return {
        "config": config,
        "client_options": client,
        "retry_config": {
            "max_retries": max_retries,
            "retry_timeout": timedelta(milliseconds=retry_timeout_ms),
            "backoff": {"init_backoff": timedelta(milliseconds=50), "max_backoff": timedelta(seconds=2), "base": 2},
        },
    }


__all__ = [
    "OBJECT_STORE_SCHEMES",
    "RootSpec",
    "check_endpoint",

    "has_aws_credentials",
    "is_secret_key",
    "mask_userinfo",
    "normalise_options",
    "obstore_arguments",
    "parse_root",
    "redact",
    "scrub",
    "truthy",
]
