"""Errors of the storage root: unreachable, refused, damaged, or racing commits."""

from __future__ import annotations

from broker_core.errors.base import PulsarException


class BrokerPersistenceError(PulsarException):
    """Storage failed or holds something this library cannot read."""


class CommitConflict(BrokerPersistenceError):
    """A commit lost the put-if-absent race too many times in a row."""


class DirectoryGone(BrokerPersistenceError):
    """A write's directory was removed (its topic was deleted); the write re-created nothing.

    Raised by writes that may create directories only *below* an anchor (``FileIO.put_if_absent``
    and friends with ``anchor=``): re-creating the anchor would resurrect half of a deleted topic.
    """


class CommitNotDurable(BrokerPersistenceError):
    """A commit became visible (its file is linked under its final name) but making it durable failed
    (the directory fsync of a local root).  Readers may already see it, so the segments it names must
    be kept: the outcome is unknown to the writer, as after a lost reply, and a resend is dropped by
    deduplication."""


class StorageUnavailable(BrokerPersistenceError):
    """The root's store cannot be reached, or its bucket/container does not exist (``root=`` names it)."""


class StorageAccessDenied(BrokerPersistenceError):
    """The store refused the credentials, or they lack a permission the operation needs."""


class UnsafeStore(BrokerPersistenceError):
    """The store ignores conditional puts, so concurrent writers could overwrite each other's commits."""


class LogCorrupted(BrokerPersistenceError):
    """The transaction log is unreadable (a gap, a malformed action, a missing file), or another file
    of a topic or of the root's metadata is damaged; the message names the file and what to do."""


class SegmentCorrupted(LogCorrupted):
    """A segment file a commit names is unreadable (truncated, overwritten); ``path`` names it.

    Readers deliver every message before it and then raise this; ``pubsub topics check --repair``
    sets the file aside with a data-loss record (``docs/PROTOCOL.md``).
    """


class SegmentTooLarge(SegmentCorrupted):
    """A segment file holds (or its footer declares) a message bigger than ``maxMessageSize`` allows:
    decoding it could take gigabytes from a file of kilobytes (a decompression bomb).  ``path`` names
    the file; readers refuse it before decompressing it whole, as they refuse a damaged segment (D125).
    """


class PathOutsideRoot(BrokerPersistenceError):
    """A path would resolve outside the storage root; the storage layer refuses to touch it.

    The second line of defence: paths read from storage are validated where they are decoded, so
    this firing means a path slipped past that check.
    """


class SymlinkRefused(PathOutsideRoot):
    """A local root holds a symbolic link where the library reads, writes, lists or deletes.

    Links below a local root's folder are never followed (``docs/PROTOCOL.md``, "Symbolic links"):
    a link may lead anywhere, so it counts as outside the root.  Whoever can write into the root
    could otherwise make the library read, overwrite or delete files elsewhere with the rights of
    the process.  ``path`` names the refused path (relative to the root).
    """


class DataLoss(BrokerPersistenceError):
    """Messages a caller asked for were removed (retention) before they were read."""


class ConnectError(BrokerPersistenceError):
    """The storage root cannot be reached or created (the folder's mount is gone, a file is in the
    way).  The official client raises it when it cannot connect to a broker; the root is what a
    client connects to here."""


class ReadError(BrokerPersistenceError):
    """Reading a file of the storage root failed with an OS error (the network client's name for a
    failed read from its connection)."""


class AuthorizationError(BrokerPersistenceError, PermissionError):
    """The storage refused access (filesystem permissions, object-store credentials).

    Access control is the storage's here, not a broker's: this is what a client lacking rights on
    the root gets.  Also a ``PermissionError``.
    """


class ChecksumError(LogCorrupted):
    """A file of the log (a segment or checkpoint) is unreadable as what it claims to be: its bytes
    were damaged.  A ``LogCorrupted`` as well."""


class BrokerMetadataError(BrokerPersistenceError):
    """Official name for broken broker metadata.  Not raised yet: an unreadable metadata file of the
    root (policies, partition metadata, broker configuration) raises ``InvalidConfiguration`` or
    ``LogCorrupted``, naming the file."""
