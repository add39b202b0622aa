"""Record classes several test modules write and read: two versions of one evolving record.

``V2`` adds a field with a default to ``V1`` (a backward- and forward-compatible change), so a topic
holds messages of both and each reader resolves the writer's version to its own.  Modules that need
a third version declare their own ``V3`` (the Avro name is the class name, so it must be ``V3`` to
evolve the same record).
"""

from __future__ import annotations

from broker_core import schema as m


class V1(m.Record):
    id = m.Long(required=True)
    name = m.String()


class V2(m.Record):
    id = m.Long(required=True)
    name = m.String()
    score = m.Double(default=0.5, required=True, required_default=True)


__all__ = ["V1", "V2"]
