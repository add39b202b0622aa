"""A live segment as the log knows it: where it sits in the offset and entry-id spaces.

Message ids follow Pulsar: what one producer flush commits is one *entry*; messages of a batched
entry carry batch indexes 0..n-1, a message sent with batching off is an entry of its own with
batch index -1.  A segment holds one or more whole entries, described by its *entry layout*: a list
of ints where ``n > 0`` is one batched entry of n messages and ``-k`` is k consecutive single
(unbatched) entries.  Offsets and entry ids are both dense, so ``(entry, batch_index)`` orders
exactly like the offset and either maps to the other from the layout alone.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

TAG_BASE_OFFSET = "pubsub.baseOffset"
TAG_NUM_RECORDS = "pubsub.numRecords"
TAG_BASE_ENTRY_ID = "pubsub.baseEntryId"
TAG_ENTRY_LAYOUT = "pubsub.entryLayout"
TAG_MIN_PUBLISH_MS = "pubsub.minPublishTimeMs"
TAG_MAX_PUBLISH_MS = "pubsub.maxPublishTimeMs"


_INT64_MAX = (1 << 63) - 1


def _tag_int(tags: dict[str, str], name: str, *, low: int = 0) -> int:
    """A tag's integer, refused (``ValueError`` naming the tag) outside ``[low, 2**63 - 1]``: offsets,
    entry ids and times are int64 in segments, checkpoints and message ids."""
    value = int(tags[name])
    if not low <= value <= _INT64_MAX:
        raise ValueError(f"tag {name} = {value} is outside [{low}, 2**63 - 1]")
    return value


def layout_to_str(layout: list[int]) -> str:
    return ",".join(str(n) for n in layout)


def layout_from_str(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def normalise_layout(layout: list[int]) -> list[int]:
    """Merge adjacent single-entry runs and drop empty parts (``[-2, -3, 0] -> [-5]``)."""
    out: list[int] = []
    for part in layout:
        if part == 0:
            continue
        if part < 0 and out and out[-1] < 0:
            out[-1] += part
        else:
            out.append(part)
    return out


def layout_messages(layout: list[int]) -> int:
    return sum(abs(p) for p in layout)


def layout_entries(layout: list[int]) -> int:
    return sum(1 if p > 0 else -p for p in layout)


@dataclass(slots=True)
class SegmentRef:
    """One live ``add`` of an internal topic, with our tags decoded."""

    path: str
    base_offset: int
    num_records: int
    base_entry_id: int
    layout: list[int]
    size_bytes: int
    min_publish_ms: int
    max_publish_ms: int
    modification_time_ms: int
    # cumulative tables built lazily for id <-> offset mapping within the segment
    _part_offsets: list[int] = field(default_factory=list, repr=False)
    _part_entries: list[int] = field(default_factory=list, repr=False)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.num_records

    @property
    def num_entries(self) -> int:
        return layout_entries(self.layout)

    @property
    def end_entry_id(self) -> int:
        return self.base_entry_id + self.num_entries

    def _tables(self) -> tuple[list[int], list[int]]:
        if not self._part_offsets:
            offsets, entries = [], []
            off, ent = 0, 0
            for part in self.layout:
                offsets.append(off)
                entries.append(ent)
                off += abs(part)
                ent += 1 if part > 0 else -part
            self._part_offsets, self._part_entries = offsets, entries
        return self._part_offsets, self._part_entries

    def id_of(self, offset: int) -> tuple[int, int]:
        """(entry_id, batch_index) of an offset inside this segment."""
        rel = offset - self.base_offset
        offsets, entries = self._tables()
        i = bisect.bisect_right(offsets, rel) - 1
        part = self.layout[i]
        within = rel - offsets[i]
        if part > 0:
            return self.base_entry_id + entries[i], within
        return self.base_entry_id + entries[i] + within, -1

    def offsets_of_entry(self, entry_id: int) -> tuple[int, int]:
        """Half-open offset range [start, end) of an entry inside this segment."""
        rel_entry = entry_id - self.base_entry_id
        offsets, entries = self._tables()
        i = bisect.bisect_right(entries, rel_entry) - 1
        part = self.layout[i]
        if part > 0:
            start = self.base_offset + offsets[i]
            return start, start + part
        start = self.base_offset + offsets[i] + (rel_entry - entries[i])
        return start, start + 1

    def ids_of_rows(self) -> tuple[list[int], list[int]]:
        """Entry ids and batch indexes of every row, in row order (for bulk reads)."""
        entry_ids: list[int] = []
        batch_indexes: list[int] = []
        entry = self.base_entry_id
        for part in self.layout:
            if part > 0:
                entry_ids.extend([entry] * part)
                batch_indexes.extend(range(part))
                entry += 1
            else:
                entry_ids.extend(range(entry, entry - part))
                batch_indexes.extend([-1] * (-part))
                entry += -part
        return entry_ids, batch_indexes

    def tags(self) -> dict[str, str]:
        return {
            TAG_BASE_OFFSET: str(self.base_offset),
            TAG_NUM_RECORDS: str(self.num_records),
            TAG_BASE_ENTRY_ID: str(self.base_entry_id),
            TAG_ENTRY_LAYOUT: layout_to_str(self.layout),
            TAG_MIN_PUBLISH_MS: str(self.min_publish_ms),
            TAG_MAX_PUBLISH_MS: str(self.max_publish_ms),
        }

    @classmethod
    def from_add(cls, path: str, size: int, modification_time: int, tags: dict[str, str]) -> SegmentRef:
        """Raises ``ValueError`` (or ``KeyError``) naming a tag that is missing or out of range."""
        ref = cls(
            path=path,
            base_offset=_tag_int(tags, TAG_BASE_OFFSET),
            num_records=_tag_int(tags, TAG_NUM_RECORDS),
            base_entry_id=_tag_int(tags, TAG_BASE_ENTRY_ID),
            layout=layout_from_str(tags[TAG_ENTRY_LAYOUT]),
            size_bytes=size,
            min_publish_ms=_tag_int(tags, TAG_MIN_PUBLISH_MS, low=-_INT64_MAX - 1),
            max_publish_ms=_tag_int(tags, TAG_MAX_PUBLISH_MS, low=-_INT64_MAX - 1),
            modification_time_ms=modification_time,
        )
        if ref.end_offset > _INT64_MAX or ref.end_entry_id > _INT64_MAX:
            raise ValueError(f"tags {TAG_BASE_OFFSET}/{TAG_BASE_ENTRY_ID} plus the segment's rows pass 2**63 - 1")
        if any(abs(part) > _INT64_MAX for part in ref.layout):
            raise ValueError(f"tag {TAG_ENTRY_LAYOUT} has a part outside int64")
        return ref


__all__ = [
    "TAG_BASE_ENTRY_ID",
    "TAG_BASE_OFFSET",
    "TAG_ENTRY_LAYOUT",
    "TAG_MAX_PUBLISH_MS",
    "TAG_MIN_PUBLISH_MS",
    "TAG_NUM_RECORDS",
    "SegmentRef",
    "layout_entries",
    "layout_from_str",
    "layout_messages",
    "layout_to_str",
    "normalise_layout",
]
