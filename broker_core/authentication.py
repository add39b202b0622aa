"""The official client's authentication classes, for code that builds them: none authenticates.

Without a broker there is nobody to present credentials to: access to topics is access to the
storage root, granted or refused by the storage itself (filesystem permissions, object-store
credentials), and a refused access raises ``AuthorizationError``.  So these classes only check
their arguments as the official ones do, and a ``Client`` given one warns once with
``AuthenticationIgnoredWarning`` that it is ignored: it never pretends a token or certificate was
checked.  ``docs/CLIENT.md`` (compatibility names) says the same.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from broker_core.errors import InvalidConfiguration


class AuthenticationIgnoredWarning(UserWarning):
    """A ``Client`` was given an authentication object, which has no effect here."""


class Authentication:
    """Base of the authentication classes (the official plugin form: a library path and params).

    Args:
        dynamicLibPath: the official client's C++ plugin library; recorded, never loaded.
        authParamsString: the plugin's parameters; recorded, never sent anywhere.
    """

    def __init__(self, dynamicLibPath: str, authParamsString: str) -> None:  # the official names
        check_type(str, dynamicLibPath, "dynamicLibPath")
        check_type(str, authParamsString, "authParamsString")
        self.method = "plugin"

    def __repr__(self) -> str:  # never shows secrets
        return f"{type(self).__name__}(method={self.method!r}, not used: access is the storage's)"


class AuthenticationTLS(Authentication):
    """TLS client certificate (official name).  Not used: there is no TLS connection."""

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        check_type(str, certificate_path, "certificate_path")
        check_type(str, private_key_path, "private_key_path")
        self.method = "tls"


class AuthenticationToken(Authentication):
    """A token, or a function returning one (official name).  Not used: nobody checks tokens."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not (isinstance(token, str) or callable(token)):
            raise InvalidConfiguration(
                f"argument 'token' must be a str or a function returning a str, got {type(token).__name__}",
                argument="token",
            )
        self.method = "token"


class AuthenticationAthenz(Authentication):
    """Athenz (official name).  Not used."""

    def __init__(self, auth_params_string: str) -> None:
        check_type(str, auth_params_string, "auth_params_string")
        self.method = "athenz"


class AuthenticationOauth2(Authentication):
    """OAuth 2.0 client credentials (official name).  Not used: no token is ever fetched."""

    def __init__(self, auth_params_string: str) -> None:
        check_type(str, auth_params_string, "auth_params_string")
        self.method = "oauth2"


class AuthenticationBasic(Authentication):
    """HTTP basic user and password (official name).  Not used."""

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string is not None:
            check_type(str, auth_params_string, "auth_params_string")
        else:
            check_type(str, username, "username")
            check_type(str, password, "password")
            check_type(str, method, "method")
        self.method = "basic"


def check_authentication(authentication: Any) -> None:
    """Type-check ``Client(authentication=...)`` and warn that it has no effect."""
    if authentication is not None:
        check_type(Authentication, authentication, "authentication")
    if authentication is not None:
        warnings.warn(
            f"{type(authentication).__name__} is ignored: there is no broker to authenticate to; access "
            "to the storage root is granted by the storage (filesystem permissions or object-store "
            "credentials)",
            AuthenticationIgnoredWarning,
            stacklevel=3,
        )


def check_type(expected: type, value: Any, name: str) -> Any:
    """``value`` if it is an ``expected``, else ``InvalidConfiguration`` naming the argument (kept
    here rather than imported from ``broker_core.client.args``: the client imports this module)."""
    if not isinstance(value, expected) or isinstance(value, bool):
        raise InvalidConfiguration(
            f"argument {name!r} must be {expected.__name__}, got {type(value).__name__} {value!r}", argument=name
        )
    return value


__all__ = [
    "Authentication",
    "AuthenticationAthenz",
    "AuthenticationBasic",
    "AuthenticationIgnoredWarning",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "check_authentication",
]
