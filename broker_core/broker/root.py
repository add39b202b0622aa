"""Opening a storage root: its ``FileIO``, its resolved broker settings and the process-wide key.

``Broker.for_url`` and ``Admin.open`` both start here, so that one service URL resolves to the same
storage handle, the same settings and the same key whichever of the two a program opens first (the
process shares one ``Broker`` and one ``Admin`` per key, and ``Admin`` never imports ``Broker``).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

from broker_core.broker.root_check import open_root
from broker_core.config.loader import load_broker_config
from broker_core.config.settings import BrokerConfig
from broker_core.errors import InvalidConfiguration
from broker_core.storage import FileIO, file_io_for

BROKER_CONF_PATH = "_pubsub/broker.toml"


def resolve_config(io: FileIO, config: BrokerConfig | str | os.PathLike[str] | None) -> BrokerConfig:
    """Built-in defaults < ``<root>/_pubsub/broker.toml`` (if present) < an explicit config."""
    if isinstance(config, BrokerConfig):
        return config
    if config is not None:
        return load_broker_config(config)
    if io.is_local:
        if io.stat(BROKER_CONF_PATH) is not None:  # refuses a link (``SymlinkRefused``)
            return load_broker_config(io.abs_path(BROKER_CONF_PATH))
        return BrokerConfig()
    data = io.read_bytes(BROKER_CONF_PATH)  # on an object store: one GET, parsed in memory
    if data is None:
        return BrokerConfig()
    try:
        values = tomllib.loads(data.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidConfiguration(f"{io.abs_path(BROKER_CONF_PATH)} is not valid TOML: {exc}") from exc
    return load_broker_config(None, **values)


@dataclass(frozen=True, slots=True)
class OpenedRoot:
    """A storage root as this process shares it: its storage, its settings and the sharing key."""

    io: FileIO
    config: BrokerConfig
    key: tuple[Hashable, ...]


def resolve_root(
    service_url: str,
    config: BrokerConfig | str | os.PathLike[str] | None = None,
    *,
    create_root: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> OpenedRoot:
    """Resolve a service URL and settings to the root's storage, settings and sharing key (the
    parameters are ``Broker.for_url``'s)."""
    io = file_io_for(service_url, storage_options=storage_options)
    open_root(io, service_url, create_root=create_root)
    resolved = resolve_config(io, config)
    io = file_io_for(service_url, fsync=resolved.fsync_enabled, storage_options=storage_options)
    key = (io.root_uri, resolved, tuple(sorted((storage_options or {}).items())))
    return OpenedRoot(io=io, config=resolved, key=key)


__all__ = ["BROKER_CONF_PATH", "OpenedRoot", "resolve_config", "resolve_root"]
