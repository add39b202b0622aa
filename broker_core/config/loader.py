"""Loading broker settings: built-in defaults < a flat TOML file < keyword overrides.

Every failure is an ``InvalidConfiguration`` whose message names the setting by its Pulsar name, the
bad value, the expected type or range, and where the value came from (the file or the overrides).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from broker_core.config.messages import field_index, validation_error_message
from broker_core.config.settings import BrokerConfig
from broker_core.errors import InvalidConfiguration


def _read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    location = os.fspath(path)
    try:
        with open(location, "rb") as handle:
            values = tomllib.load(handle)
    except FileNotFoundError:
        raise InvalidConfiguration(
            f"Configuration file not found: {location!r}; pass an existing TOML file or path=None "
            "for the built-in defaults",
            path=location,
        ) from None
    except OSError as exc:
        raise InvalidConfiguration(
            f"Cannot read configuration file {location!r}: {exc}", path=location
        ) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidConfiguration(
            f"Configuration file {location!r} is not valid TOML: {exc}", path=location
        ) from exc
    tables = sorted(key for key, value in values.items() if isinstance(value, dict))
    if tables:
        raise InvalidConfiguration(
            f"Invalid configuration in {location}: TOML tables are not supported ({', '.join(tables)}); "
            "write each setting as a flat top-level key, e.g. maxMessageSize = 5242880",
            path=location,
        )
    return values


def _normalise_overrides(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Key overrides by alias so they merge with file values (which use aliases)."""
    index = field_index(BrokerConfig)
    normalised: dict[str, Any] = {}
    for key, value in overrides.items():
        public = index[key][0] if key in index else key
        if public in normalised:
            raise InvalidConfiguration(
                f"Invalid configuration in keyword overrides: {public!r} is given twice (by its "
                "Python name and its Pulsar name); pass it once",
                key=public,
            )
        normalised[public] = value
    return normalised


def load_broker_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> BrokerConfig:
    """Load broker settings: built-in defaults < the TOML file at ``path`` < ``overrides``.

    Args:
        path: a flat TOML file of Pulsar-named settings (like ``conf/broker.toml``); ``None`` means
            the built-in defaults only.
        **overrides: settings by Python name (``max_message_size``) or Pulsar name (``maxMessageSize``).

    Returns:
        The validated, frozen settings.

    Raises:
        InvalidConfiguration: the file is missing or malformed, or a setting is unknown or invalid.
    """
    file_values: dict[str, Any] = {}
    location: str | None = None
    config = BrokerConfig()
    if path is not None:
        location = os.fspath(path)
        file_values = _read_toml(location)
        config = _validate(file_values, source=location, path=location)
    if not overrides:
        return config
    # The file was valid on its own, so any error from here on is caused by the overrides.
    merged = {**file_values, **_normalise_overrides(overrides)}
    where = "keyword overrides" + (f" (on top of {location})" if location is not None else "")
    return _validate(merged, source=where, path=location)


def _validate(values: Mapping[str, Any], *, source: str, path: str | None) -> BrokerConfig:
    try:
        return BrokerConfig.model_validate(values)
    except ValidationError as exc:
        keys = [str(error["loc"][0]) for error in exc.errors() if error["loc"]]
        message = validation_error_message(exc, source=source, model=BrokerConfig)
        raise InvalidConfiguration(message, path=path, keys=keys) from exc
