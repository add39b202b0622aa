"""``maxMessageSize`` counts a message's key, ordering key and properties besides its payload (D126).

Every send path refuses a message whose parts together exceed the limit with ``MessageTooBig`` naming
the size and the limit, and writes nothing; a chunking producer splits the payload into chunks that
each fit with the key and properties they carry, and refuses a message whose key and properties
alone reach the limit.  Reads check the same sizes (``segment_bounds``): a segment holding a row
above the limit that its footer does not give away is refused after decoding, before delivery.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from moto_s3 import Root

from broker_core import Client, MessageId
from broker_core.config import BrokerConfig
from broker_core.errors import MessageTooBig, SegmentTooLarge
from broker_core.log.segment import SEGMENT_SCHEMA, encode_segment, read_segment_checked
from broker_core.log.segment_bounds import decoded_excess, too_large_rows
from broker_core.log.segment_ref import SegmentRef
from broker_core.storage import LocalFileIO

LIMIT = 1000
T = "persistent://public/default/t"


def _client(url: str, storage_options: dict[str, str] | None = None) -> Client:
    return Client(url, storage_options=storage_options or {},
                  broker_config=BrokerConfig(fsync_enabled=False, max_message_size=LIMIT))


def _stored(client: Client) -> list[bytes]:
    reader = client.create_reader(T, MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(5000).data())
    reader.close()
    return out


@pytest.mark.parametrize("send", ["send", "send_async", "batched", "send_table"])
@pytest.mark.parametrize("part", ["property", "property name", "key", "ordering key"])
def test_a_message_whose_key_or_properties_exceed_the_limit_is_refused_and_not_written(
        any_root: Root, send: str, part: str) -> None:
    client = _client(any_root.url, any_root.storage_options)
    try:
        big = "x" * (LIMIT + 1 - 5)  # with the five-byte payload: one byte over
        fields: dict[str, object] = {
            "property": {"properties": {"p": big[:-1]}}, "property name": {"properties": {big: ""}},
            "key": {"partition_key": big}, "ordering key": {"ordering_key": big},
        }[part]
        producer = client.create_producer(T, batching_enabled=send == "batched")
        with pytest.raises(MessageTooBig) as info:
            if send == "send_table":
                column = {"property": "properties", "property name": "properties", "key": "key",
                          "ordering key": "ordering_key"}[part]
                value = next(iter(fields.values()))
                cells = pa.array([list(value.items())], pa.map_(pa.string(), pa.string())) if isinstance(
                    value, dict) else pa.array([value])
                producer.send_table(pa.table({"value": [b"hello"], column: cells}))
            elif send == "send":
                producer.send(b"hello", **fields)  # type: ignore[arg-type]
            else:
                producer.send_async(b"hello", None, **fields)  # type: ignore[arg-type]
        assert f"maxMessageSize={LIMIT}" in str(info.value) and f"{LIMIT + 1} bytes" in str(info.value)
        producer.send(b"ok", properties={"p": "v"}, partition_key="k")  # still usable; within the limit is fine
        producer.flush()
        assert _stored(client) == [b"ok"]
    finally:
        client.close()


def test_a_non_persistent_producer_counts_properties_too(tmp_path: Path) -> None:
    client = _client(str(tmp_path))
    try:
        producer = client.create_producer("non-persistent://public/default/np")
        with pytest.raises(MessageTooBig, match=f"maxMessageSize={LIMIT}"):
            producer.send(b"hello", properties={"p": "x" * LIMIT})
    finally:
        client.close()


def test_chunks_carry_the_key_and_properties_within_the_limit(tmp_path: Path) -> None:
    client = _client(str(tmp_path))
    try:
        producer = client.create_producer(T, chunking_enabled=True)
        big = bytes(range(256)) * 14  # 3584 bytes
        props = {"name": "v" * 296}  # 300 bytes: each chunk holds at most 1000 - 300 - 3 of the payload
        producer.send(big, properties=props, partition_key="key")
        reader = client.create_reader(T, MessageId.earliest)
        msg = reader.read_next(5000)
        assert msg.data() == big and msg.properties() == props and msg.partition_key() == "key"
        rows = client.create_reader(T, MessageId.earliest).read_batch()
        assert rows.num_rows == 6  # ceil(3584 / 697) chunks
        assert all(len(v) + 300 + 3 <= LIMIT for v in rows.column("value").to_pylist())
        assert not len(too_large_rows(rows, LIMIT))
        with pytest.raises(MessageTooBig, match="every chunk carries them"):
            producer.send(big, properties={"name": "v" * LIMIT})
    finally:
        client.close()


def _segment(tmp_path: Path, rows: list[dict[str, object]]) -> tuple[LocalFileIO, SegmentRef]:
    table = pa.Table.from_pylist([{"sticky_key_hash": 0, "publish_time": 0, **row} for row in rows],
                                 schema=SEGMENT_SCHEMA)
    data = encode_segment(table).to_pybytes()
    (tmp_path / "seg.parquet").write_bytes(data)
    return LocalFileIO(str(tmp_path)), SegmentRef(
        path="seg.parquet", base_offset=0, num_records=len(rows), base_entry_id=0, layout=[len(rows)],
        size_bytes=len(data), min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)


def test_a_row_over_the_limit_that_the_footer_does_not_show_is_refused_after_decoding(tmp_path: Path) -> None:
    # 40 rows may declare 40 x (2 x 1000 + 4096) bytes: the one big row hides among small ones
    io, seg = _segment(tmp_path, [{"value": b"x" * 3000}] + [{"value": b"y"}] * 39)
    with pytest.raises(SegmentTooLarge, match=r"message of 3000 bytes \(row 0\), more than maxMessageSize=1000"):
        read_segment_checked(io, ".", seg, max_message_bytes=LIMIT)
    assert read_segment_checked(io, ".", seg, max_message_bytes=3000).num_rows == 40


def test_a_chunk_written_before_properties_counted_stays_readable(tmp_path: Path) -> None:
    # a chunk of the full limit plus its properties (what a producer wrote before D126)
    chunk = {"value": b"x" * LIMIT, "properties": [("k", "v" * 500)], "chunk_uuid": "u", "chunk_id": 0,
             "num_chunks": 2, "chunk_total_size_bytes": 2 * LIMIT}
    io, seg = _segment(tmp_path, [chunk, {**chunk, "chunk_id": 1}])
    assert read_segment_checked(io, ".", seg, max_message_bytes=LIMIT).num_rows == 2
    unchunked = {"value": b"x" * LIMIT, "properties": [("k", "v" * 500)]}
    io, seg = _segment(tmp_path, [unchunked])
    with pytest.raises(SegmentTooLarge, match="1501 bytes"):
        read_segment_checked(io, ".", seg, max_message_bytes=LIMIT)


def test_a_decoded_segment_bigger_than_its_rows_may_be_is_refused_whatever_the_column() -> None:
    # what a forged footer could hide: a huge producer name (not a message part) in one row
    table = pa.Table.from_pylist([{"sticky_key_hash": 0, "publish_time": 0, "producer_name": "p" * (3 << 20)}],
                                 schema=SEGMENT_SCHEMA)
    assert decoded_excess(table, LIMIT) is not None and "decodes to" in str(decoded_excess(table, LIMIT))
    small = pa.Table.from_pylist([{"sticky_key_hash": 0, "publish_time": 0, "value": b"x" * LIMIT}],
                                 schema=SEGMENT_SCHEMA)
    assert decoded_excess(small, LIMIT) is None
