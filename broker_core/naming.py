"""Pulsar topic, tenant and namespace names, validated before they ever become paths.

A topic name is ``{persistent|non-persistent}://tenant/namespace/local-name``; a bare ``x`` means
``persistent://public/default/x`` and ``tenant/namespace/x`` means ``persistent://tenant/namespace/x``,
as in Pulsar.  Partition ``i`` of a partitioned topic is the internal topic whose local name carries
the suffix ``-partition-<i>``.

Every part of a name becomes a directory under the storage root
(``<root>/<tenant>/<namespace>/<domain>/<local-name>``), so this module is where path safety is
decided.  It is deliberately stricter than Pulsar: a part is ASCII letters, digits, ``-``, ``_``,
``=`` and ``.`` only, must not be ``.``/``..`` or start with ``_`` or ``.`` (those are the library's
hidden directories, such as ``_delta_log``), and is at most 255 bytes.  Pulsar's ``:`` is refused
because it is unsafe in the relative URIs of a Delta log and is not a legal file-name character on
every filesystem.  A name that passes here can be joined to the root without escaping or aliasing it.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

from broker_core.errors import InvalidTopicName

DEFAULT_TENANT = "public"
"""The tenant a short topic name lives in."""

DEFAULT_NAMESPACE = "default"
"""The namespace (within ``DEFAULT_TENANT``) a short topic name lives in."""

PARTITION_SUFFIX = "-partition-"
"""What separates a partitioned topic's local name from the partition index."""

MAX_PART_BYTES = 255
"""The longest tenant, namespace or local name: one path component on common filesystems."""

_PART_RE = re.compile(r"[A-Za-z0-9_\-=.]+")
_DIGITS_RE = re.compile(r"[0-9]+")
_TOPIC_FORMS = (
    "expected 'topic', 'tenant/namespace/topic' or "
    "'persistent://tenant/namespace/topic' (or 'non-persistent://...')"
)
_PART_RULES = (
    "a name part uses ASCII letters, digits, '-', '_', '=' and '.', does not start with '_' or '.', "
    f"and is at most {MAX_PART_BYTES} bytes"
)


class TopicDomain(enum.StrEnum):
    """Whether a topic's messages are stored (``persistent``) or only relayed (``non-persistent``)."""

    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"


def _fail(what: str, value: object, problem: str, hint: str, **context: object) -> InvalidTopicName:
    return InvalidTopicName(f"Invalid {what} {value!r}: {problem}; {hint}", **context)


def _check_text(value: object, *, what: str, hint: str, key: str) -> str:
    """Apply the checks that concern the whole input rather than one part of it."""
    if not isinstance(value, str):
        raise _fail(what, value, f"expected a str, got {type(value).__name__}", hint, **{key: value})
    if not value:
        raise _fail(what, value, "it is empty", hint, **{key: value})
    if value != value.strip():
        raise _fail(what, value, "it has leading or trailing whitespace", hint, **{key: value})
    if any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in value):
        raise _fail(what, value, "it contains a NUL or other control character", hint, **{key: value})
    if "\\" in value:
        # A backslash is a path separator on Windows: it could smuggle a second path component.
        raise _fail(what, value, "it contains a backslash", hint, **{key: value})
    return value


def _check_part(part: str, *, role: str, what: str, value: object, key: str) -> None:
    """Check one tenant, namespace or local name against the path-safety rules."""

    def bad(problem: str) -> InvalidTopicName:
        return _fail(what, value, f"the {role} {part!r} {problem}", _PART_RULES, **{key: value})

    if not part:
        raise _fail(what, value, f"the {role} is empty", _PART_RULES, **{key: value})
    if part in (".", ".."):
        raise bad("is a relative path reference")
    if part[0] in "_.":
        raise bad("starts with '_' or '.', which are reserved for the library's hidden directories")
    if ":" in part:
        raise bad(
            "contains ':'; Pulsar allows it, but this library refuses it because it is unsafe in "
            "Delta log relative paths/URIs and on some filesystems"
        )
    if not part.isascii():
        raise bad("contains non-ASCII characters (letters outside ASCII are not allowed)")
    if not _PART_RE.fullmatch(part):
        invalid = sorted({ch for ch in part if not _PART_RE.fullmatch(ch)})
        raise bad(f"contains characters that are not allowed: {''.join(invalid)!r}")
    if len(part) > MAX_PART_BYTES:
        raise bad(f"is {len(part)} bytes long")


def _split_partition(local_name: str) -> tuple[str, str] | None:
    """Split ``base-partition-<digits>`` into (base, digits); None without such a suffix."""
    base, sep, index = local_name.rpartition(PARTITION_SUFFIX)
    if sep and _DIGITS_RE.fullmatch(index):
        return base, index
    return None


def _check_partition_suffix(local_name: str, *, what: str, value: object) -> None:
    split = _split_partition(local_name)
    if split is None:
        return
    base, index = split
    hint = "a partition suffix is '-partition-<i>' with i a decimal integer >= 0 without leading zeros"
    if len(index) > 1 and index.startswith("0"):
        problem = f"the partition suffix '{PARTITION_SUFFIX}{index}' has leading zeros"
        raise _fail(what, value, problem, hint, topic=value)
    if not base:
        raise _fail(what, value, "there is no topic name before the partition suffix", hint, topic=value)
    if _split_partition(base) is not None:
        raise _fail(what, value, "it is a partition of a partition", hint, topic=value)


@dataclass(frozen=True, slots=True)
class NamespaceName:
    """A ``tenant/namespace`` pair, validated on construction.

    Attributes:
        tenant: the tenant, a single safe path component.
        namespace: the namespace within the tenant, a single safe path component.
    """

    tenant: str
    namespace: str

    def __post_init__(self) -> None:
        for role, part in (("tenant", self.tenant), ("namespace", self.namespace)):
            if not isinstance(part, str):
                raise InvalidTopicName(
                    f"Invalid namespace name: the {role} must be a str, got {type(part).__name__}",
                    namespace=part,
                )
            _check_part(part, role=role, what="namespace name", value=str(self), key="namespace")

    def __str__(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    def relative_path(self) -> tuple[str, str]:
        """Return the path components of the namespace's directory under the storage root."""
        return (self.tenant, self.namespace)

    @classmethod
    def parse(cls, text: str) -> NamespaceName:
        """Parse ``tenant/namespace``.

        Raises:
            InvalidTopicName: the text is not exactly two valid parts separated by ``/``.
        """
        hint = "expected 'tenant/namespace'"
        _check_text(text, what="namespace name", hint=hint, key="namespace")
        if "://" in text:
            raise _fail("namespace name", text, "it looks like a topic name", hint, namespace=text)
        parts = text.split("/")
        if len(parts) != 2:
            problem = f"it has {_parts(len(parts))} separated by '/'"
            raise _fail("namespace name", text, problem, hint, namespace=text)
        return cls(parts[0], parts[1])


def validate_tenant(name: str) -> str:
    """Return ``name`` if it is a valid tenant name (a single safe path component).

    Raises:
        InvalidTopicName: the name is not a str, is empty, or breaks the part rules.
    """
    hint = "expected a tenant name such as 'public'"
    _check_text(name, what="tenant name", hint=hint, key="tenant")
    _check_part(name, role="tenant", what="tenant name", value=name, key="tenant")
    return name


def validate_namespace(name: str) -> NamespaceName:
    """Parse and validate ``tenant/namespace`` (see ``NamespaceName.parse``)."""
    return NamespaceName.parse(name)


@dataclass(frozen=True, slots=True)
class TopicName:
    """A fully qualified Pulsar topic name, validated on construction.

    Attributes:
        domain: persistent or non-persistent (a ``str`` value is converted).
        tenant: the tenant.
        namespace: the namespace within the tenant.
        local_name: the topic's own name; for a partition it ends with ``-partition-<i>``.
    """

    domain: TopicDomain
    tenant: str
    namespace: str
    local_name: str

    def __post_init__(self) -> None:
        raw_domain = getattr(self.domain, "value", self.domain)
        full = f"{raw_domain}://{self.tenant}/{self.namespace}/{self.local_name}"
        try:
            domain = TopicDomain(self.domain)
        except ValueError:
            raise _fail(
                "topic name", full, f"unknown domain {self.domain!r}", _TOPIC_FORMS, topic=full
            ) from None
        object.__setattr__(self, "domain", domain)
        parts = (("tenant", self.tenant), ("namespace", self.namespace), ("local name", self.local_name))
        for role, part in parts:
            if not isinstance(part, str):
                raise InvalidTopicName(
                    f"Invalid topic name: the {role} must be a str, got {type(part).__name__}", topic=full
                )
            _check_part(part, role=role, what="topic name", value=full, key="topic")
        _check_partition_suffix(self.local_name, what="topic name", value=full)

    def __str__(self) -> str:
        return f"{self.domain.value}://{self.tenant}/{self.namespace}/{self.local_name}"

    @property
    def short_name(self) -> str:
        """The local name (including any ``-partition-<i>`` suffix)."""
        return self.local_name

    @property
    def namespace_name(self) -> str:
        """``tenant/namespace``."""
        return f"{self.tenant}/{self.namespace}"

    @property
    def is_persistent(self) -> bool:
        """Whether the topic is in the persistent domain."""
        return self.domain is TopicDomain.PERSISTENT

    @property
    def partition_index(self) -> int:
        """The partition index ``i`` of a ``-partition-<i>`` topic, else -1."""
        split = _split_partition(self.local_name)
        return -1 if split is None else int(split[1])

    @property
    def is_partition(self) -> bool:
        """Whether this is one partition (an internal topic) of a partitioned topic."""
        return _split_partition(self.local_name) is not None

    @property
    def partitioned_topic_name(self) -> TopicName:
        """The partitioned topic this partition belongs to; ``self`` when not a partition."""
        split = _split_partition(self.local_name)
        if split is None:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, split[0])

    def partition(self, index: int) -> TopicName:
        """Return the internal topic of partition ``index``.

        Raises:
            InvalidTopicName: ``index`` is not a non-negative int, this name is already a partition,
                or the suffixed local name would exceed ``MAX_PART_BYTES``.
        """
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidTopicName(
                f"Invalid partition index {index!r} for topic {str(self)!r}: expected an int >= 0",
                topic=str(self),
                partition=index,
            )
        if self.is_partition:
            raise InvalidTopicName(
                f"Topic {str(self)!r} is already partition {self.partition_index}; "
                "call partition() on its partitioned_topic_name",
                topic=str(self),
                partition=index,
            )
        local_name = f"{self.local_name}{PARTITION_SUFFIX}{index}"
        return TopicName(self.domain, self.tenant, self.namespace, local_name)

    def relative_path(self) -> tuple[str, ...]:
        """Return the path components of the internal topic's directory under the storage root.

        The order is (tenant, namespace, domain, local name), so all topics of a namespace share
        one directory, e.g. ``("public", "default", "persistent", "my-topic")``.
        """
        return (self.tenant, self.namespace, self.domain.value, self.local_name)

    @classmethod
    def parse(cls, text: str) -> TopicName:
        """Parse a topic name in any of Pulsar's accepted forms.

        Args:
            text: ``x``, ``tenant/namespace/x`` or ``{persistent|non-persistent}://tenant/namespace/x``.

        Raises:
            InvalidTopicName: the text is not a valid name; the message says what is wrong.
        """
        _check_text(text, what="topic name", hint=_TOPIC_FORMS, key="topic")
        return _parse_cached(text)


def _check_structure(parts: list[str], fail: Callable[[str], InvalidTopicName]) -> None:
    # Reported before the part count: for '../x' "path traversal" is the useful diagnosis.
    if "" in parts:
        raise fail("it has an empty part (a leading, trailing or doubled '/')")
    for part in parts:
        if part in (".", ".."):
            raise fail(f"it has a {part!r} part, which is a relative path reference")


def _parts(count: int) -> str:
    return f"{count} part" if count == 1 else f"{count} parts"


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> TopicName:
    # Names are immutable and resolved on every producer/consumer open; parsing once is enough.
    def fail(problem: str) -> InvalidTopicName:
        return _fail("topic name", text, problem, _TOPIC_FORMS, topic=text)

    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme not in {d.value for d in TopicDomain}:
            raise fail(f"unknown domain {scheme!r} (domains are lower-case)")
        domain: TopicDomain = TopicDomain(scheme)
        parts = rest.split("/")
        _check_structure(parts, fail)
        if len(parts) == 4:
            raise fail(
                "the old 4-part form 'persistent://tenant/cluster/namespace/topic' is not supported "
                "(and a topic's local name may not contain '/')"
            )
        if len(parts) != 3:
            raise fail(f"it has {_parts(len(parts))} after '{scheme}://' where 3 are needed")
        tenant, namespace, local_name = parts
    else:
        if ":" in text:
            raise fail(
                "':' is not allowed (it is unsafe in Delta log relative paths/URIs and on some "
                "filesystems); a domain is written 'persistent://' or 'non-persistent://'"
            )
        domain = TopicDomain.PERSISTENT
        parts = text.split("/")
        _check_structure(parts, fail)
        if len(parts) == 1:
            tenant, namespace, local_name = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
        elif len(parts) == 3:
            tenant, namespace, local_name = parts
        elif len(parts) == 2:
            raise fail("a two-part name is ambiguous (a namespace needs its tenant)")
        else:
            raise fail(f"it has {_parts(len(parts))} (a topic's local name may not contain '/')")
    for role, part in (("tenant", tenant), ("namespace", namespace), ("local name", local_name)):
        _check_part(part, role=role, what="topic name", value=text, key="topic")
    _check_partition_suffix(local_name, what="topic name", value=text)
    return TopicName(domain, tenant, namespace, local_name)


__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_TENANT",
    "MAX_PART_BYTES",
    "PARTITION_SUFFIX",
    "NamespaceName",
    "TopicDomain",
    "TopicName",
    "validate_namespace",
    "validate_tenant",
]
