"""One rule for every caller (client, admin, CLI, Spark, jobs): a missing storage root is an error.

A typo in a root path must not silently make a new, empty root that reads nothing and takes writes
nobody else sees.  A root is created only when the caller explicitly asks (``create_root=True`` in
the client, ``--create-root`` in the CLI, ``.option("createRoot", "true")`` on the Spark sink); a read
never creates anything.  The check takes the ``FileIO``, so an object-store ``FileIO`` answers it in
its own terms (``root_status``/``make_root``): on an object store, where a prefix has no existence of
its own, a root exists once anything is stored under it (the marker ``make_root`` writes, or the
``_pubsub/`` files and topics of a root created before the marker existed).
"""

from __future__ import annotations

from broker_core.errors import RootNotFound
from broker_core.storage import FileIO
from broker_core.storage.urls import mask_userinfo


def open_root(io: FileIO, service_url: str, *, create_root: bool) -> None:
    """Check that the root ``service_url`` (as the user wrote it) exists, or create it if asked.

    Raises:
        RootNotFound: the root is missing (and ``create_root`` is off) or is not a directory.
    """
    status = io.root_status()
    if status == "directory":
        return
    if status == "missing" and create_root:
        io.make_root()
        return
    where = io.root_uri
    url = mask_userinfo(service_url)  # never echo a URL's user info
    shown = url if service_url == where else f"{url!r} ({where})"
    if status == "missing" and not io.is_local:
        raise RootNotFound(
            f"storage root {shown} does not exist: nothing is stored under that prefix (no root marker "
            "_pubsub/root.json, no topics); check the bucket and prefix for a typo, or create the root "
            "explicitly (Client(..., create_root=True), pubsub --create-root, or the Spark sink's createRoot option)",
            root=url,
        )
    if status == "missing":
        raise RootNotFound(
            f"storage root {shown} does not exist; check the path for a typo, or create it explicitly "
            "(mkdir, Client(..., create_root=True), pubsub --create-root, or the Spark sink's "
            "createRoot option)",
            root=url,
        )
    raise RootNotFound(f"storage root {shown} is {status}; point at a folder", root=url)


__all__ = ["open_root"]
