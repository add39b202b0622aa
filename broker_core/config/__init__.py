"""Broker settings: a frozen pydantic model with Pulsar's setting names, and its TOML loader.

Settings that exist in Pulsar's ``broker.conf`` keep their Pulsar names (camelCase) as aliases, so a
value copied from a Pulsar deployment means the same thing here; Python code reads the snake_case
field names.  Settings that only make sense for a broker-less, log-on-storage design (checkpoints,
producer leases, commit retries, fsync) are ours and are named in the same style.

Precedence (lowest first): built-in defaults < the TOML file < keyword overrides.  ``conf/broker.toml``
at the repository root spells out the built-in defaults; a test keeps the two identical.  Namespace and
topic policies, which sit between the file and explicit arguments, are applied by their own modules.

Every failure is an ``InvalidConfiguration`` whose message names the setting by its Pulsar name, the
bad value, the expected type or range, and where the value came from.

The model is ``settings.BrokerConfig``, the loader ``loader.load_broker_config``, and the rendering
of validation errors (shared with other settings models) ``messages.validation_error_message``.
"""

from __future__ import annotations

from broker_core.config.loader import load_broker_config
from broker_core.config.messages import validation_error_message
from broker_core.config.settings import BrokerConfig

__all__ = [
    "BrokerConfig",
    "load_broker_config",
    "validation_error_message",
]
