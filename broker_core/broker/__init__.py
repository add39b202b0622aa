"""A storage root as one process shares it, and its admin API (there is no broker process).

- ``root``: opening a root (its ``FileIO`` and resolved settings) and the process-wide key.
- ``root_check``: a missing root is an error unless the caller asked to create it.
- ``handles``: the process's shared ``TopicLog`` and ``CursorStore`` handles.
- ``tenancy``: ``Tenancy``, the records of tenants, namespaces and (partitioned) topics, and how a
  topic resolves to its internal topics: the half of the admin API that ``Broker`` needs.
- ``admin``: ``Admin(Tenancy)``, with deletion and subscriptions (shaped after pulsar-admin).
- ``broker``: ``Broker``, what every client, job and CLI command of a process shares for a root.
- ``stats``: topic and subscription statistics.

Import order inside: ``root`` and ``handles`` < ``tenancy`` < ``admin`` < ``broker`` < ``stats``;
``Admin`` never imports ``Broker``.  May import: everything below (base modules, ``storage``,
``log``, ``topic``, ``producer``, ``subscription``, ``message``).  Never ``client``, ``jobs``,
``non_persistent`` or the CLI.
"""

from __future__ import annotations

__all__: list[str] = []
