"""Broker settings (``settings``: the model, its Pulsar names, precedence and errors) and their TOML loader.

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
