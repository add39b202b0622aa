"""Pydantic validation errors rendered as one ``InvalidConfiguration`` message users can act on.

Shared by every settings model (broker settings here, Spark options in ``spark_pubsub``): it names a
bad setting by its user-facing name (the alias), shows the value, the expected type or range, where
the value came from, and the nearest known name for a typo.
"""

from __future__ import annotations

import difflib
import typing
from typing import Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo


def _expected(field: FieldInfo) -> str:
    """Describe what a field accepts, e.g. ``an int > 0`` or ``one of 'a', 'b'``."""
    annotation = field.annotation
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(choice) for choice in typing.get_args(annotation))
    type_name = getattr(annotation, "__name__", str(annotation))
    text = {"bool": "a boolean (true or false)", "int": "an int", "str": "a string"}.get(
        type_name, f"a {type_name}"
    )
    bounds = [
        f"{op} {bound}"
        for constraint in field.metadata
        for attr, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))
        if (bound := getattr(constraint, attr, None)) is not None
    ]
    return " ".join([text, " and ".join(bounds)]) if bounds else text


def field_index(model: type[BaseModel] | None) -> dict[str, tuple[str, FieldInfo]]:
    """Map both python names and aliases to (user-facing name, field)."""
    index: dict[str, tuple[str, FieldInfo]] = {}
    for name, field in (model.model_fields if model is not None else {}).items():
        validation_alias = field.validation_alias if isinstance(field.validation_alias, str) else None
        public = field.alias or validation_alias or name
        index[name] = (public, field)
        index[public] = (public, field)
    return index


def validation_error_message(
    exc: ValidationError, *, source: str, model: type[BaseModel] | None = None
) -> str:
    """Render a pydantic ``ValidationError`` as one message for ``InvalidConfiguration``.

    Pydantic's own text names Python locations and model internals; users think in setting names and
    files.  This names each bad setting by its user-facing name (the alias), shows the bad value and
    what was expected, and says where the value came from.

    Args:
        exc: the error from validating a settings model.
        source: where the values came from (a file path, "keyword overrides", ...).
        model: the model that was validated; when given, messages use its aliases, state each
            field's type and range, and suggest the nearest name for an unknown setting.

    Returns:
        ``"Invalid configuration in <source>: <problem>[; <problem>...]"``.
    """
    fields = field_index(model)
    known_names = sorted(fields)  # python names and aliases, so a typo of either finds its match
    problems: list[str] = []
    for error in exc.errors():
        loc = ".".join(str(part) for part in error["loc"])
        public, field = fields.get(str(error["loc"][0]), (loc, None)) if error["loc"] else (loc, None)
        key = public if len(error["loc"]) <= 1 else loc
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            problem = f"unknown setting {key!r} (value {error['input']!r})"
            close = difflib.get_close_matches(key, known_names, n=1)
            if close:
                problem += f"; did you mean {close[0]!r}?"
        elif error["type"] == "missing":
            problem = f"setting {key!r} is required"
        elif not error["loc"]:
            problem = message
        else:
            problem = f"{key} = {error['input']!r} is invalid: {message[:1].lower()}{message[1:]}"
            if field is not None and len(error["loc"]) == 1:
                problem += f" (expected {_expected(field)})"
        problems.append(problem)
    return f"Invalid configuration in {source}: " + "; ".join(problems)
