"""Topic compaction: what survives, horizons, incremental runs, readCompacted readers and consumers,
and compaction killed at random moments (``compaction_worker.py``) never breaking the view or the log."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from delta_probe import values_digest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from log_helpers import TOPIC_DIR, kill_after_events, open_topic, read_all, segment_table
from moto_s3 import Root
from processes import run_probe

from broker_core import (
    BrokerConfig,
    Client,
    ConsumerType,
    InitialPosition,
    MessageId,
    StringSchema,
    SubscriptionMode,
)
from broker_core.broker.broker import Broker
from broker_core.errors import InvalidConfiguration, LogCorrupted, TopicNotFound
from broker_core.jobs.compaction import (
    compact_internal_topic,
    compact_topic,
    finish_compaction,
    latest_per_key,
    plan_compaction,
    read_log_slices,
    with_positions,
)
from broker_core.naming import TopicName
from broker_core.storage import file_io_for
from broker_core.topic.compacted_view import (
    COMPACTED_DIR,
    STATE_DIR,
    CompactedTopic,
    decode_view,
    unreferenced_view_files,
    view_store,
)
from broker_core.topic.topic_log import TopicLog

HERE = Path(__file__).parent
WORKER = HERE / "compaction_worker.py"
PROBE = HERE / "delta_probe.py"

Sent = tuple[str | None, bytes | None]  # (key, value) of one message


def model(
    sent: list[Sent], horizon: int, *, retain_null_key: bool = False
) -> list[tuple[int, str | None, bytes | None]]:
    """The expected view: (offset, key, value) of each key's newest message below the horizon, minus
    tombstones (plus every keyless message when they are retained), in offset order."""
    latest: dict[str, int] = {}
    for offset, (key, _) in enumerate(sent[:horizon]):
        if key is not None:
            latest[key] = offset
    keep = {o for k, o in latest.items() if sent[o][1] is not None}
    if retain_null_key:
        keep |= {o for o, (k, _) in enumerate(sent[:horizon]) if k is None}
    return [(o, sent[o][0], sent[o][1]) for o in sorted(keep)]


def view_of(log: TopicLog) -> tuple[int, list[tuple[int, str | None, bytes | None]]]:
    """(horizon, rows) of the topic's current compacted view, read from its file."""
    pointer = view_store(log.io, log.path).latest()
    assert pointer is not None
    table = decode_view(log.io.open_input(f"{log.path}/{pointer.file}"))
    assert table.num_rows == pointer.rows
    rows = list(
        zip(
            table.column("offset").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )
    return pointer.horizon, rows


def append(log: TopicLog, sent: list[Sent], batch: list[Sent], *, batched: bool = True) -> None:
    log.append(
        segment_table([{"key": k, "value": v} for k, v in batch]),
        layout=[len(batch)] if batched else [-len(batch)],
    )
    sent.extend(batch)


@pytest.fixture
def client(tmp_path: Path) -> Any:
    c = Client(str(tmp_path))
    yield c
    c.close()


def topic_log(tmp_path: Path, topic: str = "t") -> TopicLog:
    return Broker.for_url(str(tmp_path)).topic_log(TopicName.parse(topic))


def send_all(client: Client, topic: str, sent: list[Sent]) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1000)
    for key, value in sent:
        producer.send_async(value, None, partition_key=key)
    producer.flush()
    producer.close()


def read_compacted(client: Client, topic: str, **kwargs: Any) -> list[tuple[str | None, bytes | None]]:
    reader = client.create_reader(topic, MessageId.earliest, is_read_compacted=True, **kwargs)
    out = []
    while reader.has_message_available():
        msg = reader.read_next(timeout_millis=2000)
        out.append((msg._key, msg._data))
    reader.close()
    return out


# -- what survives (golden examples) ---------------------------------------------------------------


GOLDEN: list[Sent] = [
    ("a", b"a1"),
    ("b", b"b1"),
    (None, b"keyless-1"),
    ("a", b"a2"),
    ("c", b"c1"),
    ("b", None),  # tombstone: b leaves the view
    ("d", b""),  # an empty payload is a value, not a tombstone
    ("c", b"c2"),
    ("e", None),  # a tombstone for a key never seen: nothing
    ("b", b"b2"),  # b comes back after its tombstone
    (None, None),  # a keyless tombstone: ignored
]


def test_the_view_keeps_the_newest_message_per_key_and_drops_tombstones_and_keyless(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    sent: list[Sent] = []
    append(log, sent, GOLDEN[:5])
    append(log, sent, GOLDEN[5:], batched=False)
    result = compact_internal_topic(log, "t")
    assert (result.status, result.horizon, result.rows, result.messages_read) == ("compacted", 11, 4, 11)
    horizon, rows = view_of(log)
    assert horizon == 11
    assert rows == [(3, "a", b"a2"), (6, "d", b""), (7, "c", b"c2"), (9, "b", b"b2")]
    assert rows == model(sent, 11)


def test_keyless_messages_can_be_retained(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    sent: list[Sent] = []
    append(log, sent, GOLDEN)
    compact_internal_topic(log, "t", retain_null_key=True)
    assert view_of(log)[1] == model(sent, len(sent), retain_null_key=True)
    assert (2, None, b"keyless-1") in view_of(log)[1]


def test_view_rows_keep_their_message_ids(tmp_path: Path, client: Client) -> None:
    producer = client.create_producer("t", batching_enabled=True, batching_max_publish_delay_ms=1000)
    ids: dict[bytes, MessageId] = {}
    for i in range(6):  # one batched entry: batch indexes 0..5
        value = f"b{i}".encode()
        producer.send_async(value, lambda _, mid, v=value: ids.__setitem__(v, mid), partition_key=f"k{i}")
    producer.flush()
    ids[b"s"] = client.create_producer("t").send(b"s", partition_key="k-single")  # batch index -1
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    reader = client.create_reader("t", MessageId.earliest, is_read_compacted=True)
    assert {m.data(): m.message_id() for m in reader} == ids
    assert ids[b"s"].batch_index() == -1 and ids[b"b2"].batch_index() == 2


def test_a_chunked_message_survives_whole(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=1000))
    try:
        producer = client.create_producer("t", chunking_enabled=True)
        big_old, big_new = bytes(range(256)) * 10, bytes(reversed(range(256))) * 12
        producer.send(big_old, partition_key="big")
        producer.send(b"small", partition_key="other")
        msg_id = producer.send(big_new, partition_key="big")
        producer.send(bytes(3000), partition_key="gone")
        producer.send(None, partition_key="gone")
        summary = compact_topic(Broker.for_url(str(tmp_path)), "t")
        assert summary.rows == 1 + 4  # "other", and the 4 chunks of the newest "big"
        reader = client.create_reader("t", MessageId.earliest, is_read_compacted=True)
        msgs = list(reader)
        assert [(m.partition_key(), m.data()) for m in msgs] == [("other", b"small"), ("big", big_new)]
        assert msgs[1].message_id() == msg_id
    finally:
        client.close()


def test_an_explicit_horizon_never_cuts_a_chunked_message(tmp_path: Path) -> None:
    client = Client(str(tmp_path), broker_config=BrokerConfig(max_message_size=1000))
    try:
        producer = client.create_producer("t", chunking_enabled=True)
        producer.send(b"x", partition_key="k")  # offset 0
        producer.send(bytes(2500), partition_key="k")  # offsets 1, 2, 3: three chunks
        result = compact_topic(Broker.for_url(str(tmp_path)), "t", up_to_offset=3).results[0]
        assert result.horizon == 1  # lowered to the chunked message's first chunk
        assert read_compacted(client, "t") == [("k", b"x"), ("k", bytes(2500))]
    finally:
        client.close()


def test_latest_per_key_folds_associatively() -> None:
    rng = random.Random(7)
    sent: list[Sent] = [
        (rng.choice(["a", "b", "c", None]), rng.choice([None, b"v", b"w"])) for _ in range(200)
    ]
    table = segment_table([{"key": k, "value": v} for k, v in sent])
    rows = with_positions(table, np.arange(len(sent), dtype=np.int64))
    whole = latest_per_key(rows)
    folded = latest_per_key(rows.slice(0, 0))
    for start in range(0, 200, 37):
        folded = latest_per_key(pa.concat_tables([folded, rows.slice(start, 37)]))
    assert sorted(whole.column("offset").to_pylist()) == sorted(folded.column("offset").to_pylist())
    assert sorted(whole.column("offset").to_pylist()) == [o for o, _, _ in model(sent, 200)]


# -- horizons and incremental runs -----------------------------------------------------------------


def test_the_horizon_is_the_end_at_the_start_and_later_runs_are_incremental(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    sent: list[Sent] = []
    append(log, sent, [("a", b"1"), ("b", b"2")])
    first = compact_internal_topic(log, "t")
    append(log, sent, [("a", b"3"), ("c", b"4"), ("b", None)])
    assert view_of(log) == (2, model(sent, 2))  # messages after the horizon are not in the view yet
    second = compact_internal_topic(log, "t")
    assert (second.previous_horizon, second.horizon, second.messages_read) == (2, 5, 3)
    assert view_of(log) == (5, model(sent, 5))
    assert second.version == first.version + 1  # type: ignore[operator]
    again = compact_internal_topic(log, "t")
    assert (again.status, again.messages_read, again.file) == ("up-to-date", 0, second.file)


def test_up_to_offset_compacts_a_prefix_and_the_horizon_never_moves_back(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    sent: list[Sent] = []
    append(log, sent, [(f"k{i % 3}", f"{i}".encode()) for i in range(10)])
    assert compact_internal_topic(log, "t", up_to_offset=4).horizon == 4
    assert view_of(log) == (4, model(sent, 4))
    assert compact_internal_topic(log, "t", up_to_offset=2).status == "up-to-date"
    assert compact_internal_topic(log, "t", up_to_offset=1000).horizon == 10  # clipped to the end
    assert view_of(log) == (10, model(sent, 10))
    with pytest.raises(InvalidConfiguration, match="up_to_offset"):
        compact_internal_topic(log, "t", up_to_offset=-1)


def test_incremental_runs_equal_one_full_run(tmp_path: Path) -> None:
    log = open_topic(tmp_path / "a")
    sent: list[Sent] = []
    rng = random.Random(3)
    for _ in range(8):
        batch = [
            (rng.choice(["x", "y", "z", "w", None]), rng.choice([None, b"1", b"2", b""])) for _ in range(9)
        ]
        append(log, sent, batch)
        compact_internal_topic(log, "t", slice_rows=4)  # small slices exercise the fold
    shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns(COMPACTED_DIR))
    full = open_topic(tmp_path / "b", create=False)
    compact_internal_topic(full, "t")
    assert view_of(log) == view_of(full) == (len(sent), model(sent, len(sent)))


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    append(log, [], GOLDEN)
    result = compact_internal_topic(log, "t", dry_run=True)
    assert (result.status, result.rows, result.file) == ("dry-run", 4, None)
    assert not (tmp_path / TOPIC_DIR / COMPACTED_DIR).exists()


def test_a_run_that_lost_to_a_newer_view_is_discarded(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    sent: list[Sent] = []
    append(log, sent, [("a", b"1")])
    slow = plan_compaction(log, "t")
    append(log, sent, [("a", b"2")])
    assert compact_internal_topic(log, "t").horizon == 2
    assert slow is not None
    rows = next(read_log_slices(log, slow))
    result = finish_compaction(log, slow, latest_per_key(rows))
    assert result.status == "superseded"
    assert view_of(log) == (2, model(sent, 2))
    files = [n for n in os.listdir(tmp_path / TOPIC_DIR / COMPACTED_DIR) if n.endswith(".parquet")]
    assert files == [Path(view_of_file(log)).name]  # the loser's file was removed at once


def view_of_file(log: TopicLog) -> str:
    pointer = view_store(log.io, log.path).latest()
    assert pointer is not None
    return pointer.file


def test_partitioned_topics_compact_every_partition(tmp_path: Path, client: Client) -> None:
    broker = Broker.for_url(str(tmp_path))
    broker.admin.create_partitioned_topic("p", 3)
    producer = client.create_producer("p")
    for i in range(30):
        producer.send(f"{i}".encode(), partition_key=f"k{i % 5}")
    summary = compact_topic(broker, "p")
    assert len(summary.results) == 3
    assert sorted(r.topic for r in summary.results) == [
        f"persistent://public/default/p-partition-{i}" for i in range(3)
    ]
    assert summary.rows == 5 and summary.messages_read == 30
    assert sorted(v for _, v in read_compacted(client, "p")) == [f"{i}".encode() for i in range(25, 30)]
    assert summary.to_json()["rows"] == 5


def test_compaction_never_creates_a_topic(tmp_path: Path) -> None:
    with pytest.raises(TopicNotFound):
        compact_topic(Broker.for_url(str(tmp_path), BrokerConfig(allow_auto_topic_creation=False)), "missing")
    assert not (tmp_path / "public" / "default" / "persistent" / "missing").exists()


def test_the_topic_table_is_untouched_for_delta_readers(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    sent: list[Sent] = []
    append(log, sent, GOLDEN)
    before = sorted(os.listdir(tmp_path / TOPIC_DIR / "_delta_log"))
    compact_internal_topic(log, "t")
    assert sorted(os.listdir(tmp_path / TOPIC_DIR / "_delta_log")) == before
    probe = delta_probe(tmp_path / TOPIC_DIR)
    table, _ = read_all(log)
    assert probe["num_rows"] == table.num_rows == len(GOLDEN)
    assert probe["digest"] == values_digest(table)


def delta_probe(path: Path | str, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    return run_probe(PROBE, payload={"path": str(path), "storage_options": storage_options or None})


# -- property: the view equals a dict model ---------------------------------------------------------

_KEYS = st.sampled_from(["a", "b", "c", "d", None])
_VALUES = st.sampled_from([None, b"", b"x", b"y", b"z"])
_OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("append"), st.lists(st.tuples(_KEYS, _VALUES), min_size=1, max_size=6), st.booleans()
        ),
        st.tuples(st.just("compact"), st.one_of(st.none(), st.integers(0, 40)), st.integers(1, 5)),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_OPS)
def test_compaction_matches_a_dict_model(ops: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        log = open_topic(root, fsync=False)
        sent: list[Sent] = []
        horizon = 0
        for op in ops:
            if op[0] == "append":
                append(log, sent, op[1], batched=op[2])
                continue
            result = compact_internal_topic(log, "t", up_to_offset=op[1], slice_rows=op[2])
            expected = len(sent) if op[1] is None else min(op[1], len(sent))
            horizon = max(horizon, expected)
            if result.status == "compacted":
                assert result.horizon == expected
            if horizon:
                assert view_of(log) == (horizon, model(sent, horizon))
        # a readCompacted reader: the view below the horizon, every message from it on
        client = Client(root, broker_config=BrokerConfig(fsync_enabled=False))
        try:
            tail = [(k, v) for k, v in sent[horizon:]]
            below = [(k, v) for _, k, v in model(sent, horizon)] if horizon else []
            assert read_compacted(client, "t") == below + tail
        finally:
            client.close()


# -- readers -----------------------------------------------------------------------------------------


def test_a_reader_reads_the_view_below_the_horizon_and_everything_after(
    tmp_path: Path, client: Client
) -> None:
    sent = list(GOLDEN)
    send_all(client, "t", sent)
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    after: list[Sent] = [("a", b"a3"), (None, b"keyless-2"), ("a", None)]
    send_all(client, "t", after)
    expected = [(k, v) for _, k, v in model(sent, len(sent))] + after
    assert read_compacted(client, "t") == expected
    plain = client.create_reader("t", MessageId.earliest)
    assert len(list(plain)) == len(sent) + len(after)  # a plain reader still reads every message
    batch = client.create_reader("t", MessageId.earliest, is_read_compacted=True).read_batch(100)
    assert batch.column("offset").to_pylist() == [3, 6, 7, 9]  # the view; the next call goes on


def test_a_reader_behind_a_new_horizon_moves_onto_the_view(tmp_path: Path, client: Client) -> None:
    send_all(client, "t", [("k", b"1"), ("k", b"2"), ("j", b"3"), ("k", b"4")])
    reader = client.create_reader("t", MessageId.earliest, is_read_compacted=True, receiver_queue_size=1)
    assert reader.read_next(timeout_millis=1000).data() == b"1"  # from the log: nothing compacted yet
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    assert [m.data() for m in reader] == [b"3", b"4"]  # offset 1 on: from the new view
    reader.close()


def test_a_reader_starting_at_a_message_id_or_latest(tmp_path: Path, client: Client) -> None:
    producer = client.create_producer("t")
    ids = [producer.send(v, partition_key=k) for k, v in [("a", b"1"), ("b", b"2"), ("a", b"3"), ("c", b"4")]]
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    producer.send(b"5", partition_key="b")
    from_b = client.create_reader("t", ids[1], is_read_compacted=True, start_message_id_inclusive=True)
    assert [m.data() for m in from_b] == [b"2", b"3", b"4", b"5"]
    skipped = client.create_reader("t", ids[0], is_read_compacted=True)  # exclusive of offset 0
    assert [m.data() for m in skipped] == [b"2", b"3", b"4", b"5"]
    latest = client.create_reader("t", MessageId.latest, is_read_compacted=True)
    assert not latest.has_message_available()
    producer.send(b"6", partition_key="a")
    assert latest.read_next(timeout_millis=2000).data() == b"6"


def test_readers_of_a_partitioned_topic(tmp_path: Path, client: Client) -> None:
    Broker.for_url(str(tmp_path)).admin.create_partitioned_topic("p", 2)
    producer = client.create_producer("p", schema=StringSchema())
    for i in range(12):
        producer.send(f"v{i}", partition_key=f"k{i % 3}")
    compact_topic(Broker.for_url(str(tmp_path)), "p")
    producer.send("tail", partition_key="k0")
    reader = client.create_reader("p", MessageId.earliest, is_read_compacted=True, schema=StringSchema())
    assert sorted(m.value() for m in reader) == ["tail", "v10", "v11", "v9"]


def test_read_compacted_on_a_non_persistent_topic_is_refused(client: Client) -> None:
    with pytest.raises(ValueError, match="persistent"):
        client.create_reader("non-persistent://public/default/np", MessageId.earliest, is_read_compacted=True)
    with pytest.raises(ValueError, match="persistent"):
        client.subscribe("non-persistent://public/default/np", "s", is_read_compacted=True)
    with pytest.raises(ValueError, match="is_read_compacted"):
        client.create_reader("t", MessageId.earliest, is_read_compacted="yes")  # type: ignore[arg-type]


def test_a_view_of_an_earlier_topic_of_the_same_name_is_ignored(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    append(log, [], [("a", b"1")])
    compact_internal_topic(log, "t")
    store = view_store(log.io, log.path)
    pointer = store.latest()
    assert pointer is not None
    assert CompactedTopic(log).view() is not None
    store.commit(
        horizon=pointer.horizon + 1,
        file=pointer.file,
        rows=pointer.rows,
        ledger_id=pointer.ledger_id + 1,
        previous_horizon=pointer.horizon,
    )
    assert CompactedTopic(log).view() is None  # the ledger id differs: not this topic's view
    assert plan_compaction(log, "t") is not None  # and a new run starts from scratch


# -- consumers ---------------------------------------------------------------------------------------


def receive_all(consumer: Any, *, ack: bool = True) -> list[tuple[str, bytes]]:
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=500)
        except Exception:  # Timeout: drained
            return out
        out.append((msg.partition_key(), msg.data()))
        if ack:
            consumer.acknowledge(msg)


@pytest.mark.parametrize("consumer_type", [ConsumerType.Exclusive, ConsumerType.Failover])
def test_a_consumer_reads_the_view_and_its_cursor_passes_what_compaction_dropped(
    tmp_path: Path, client: Client, consumer_type: ConsumerType
) -> None:
    sent = [(f"k{i % 4}", f"{i}".encode()) for i in range(40)]
    send_all(client, "t", sent)
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    send_all(client, "t", [("k0", b"tail")])
    consumer = client.subscribe(
        "t",
        "sub",
        consumer_type=consumer_type,
        is_read_compacted=True,
        initial_position=InitialPosition.Earliest,
    )
    assert receive_all(consumer) == [
        ("k0", b"36"),
        ("k1", b"37"),
        ("k2", b"38"),
        ("k3", b"39"),
        ("k0", b"tail"),
    ]
    consumer.close()
    cursor = Broker.for_url(str(tmp_path)).cursor_store(TopicName.parse("t"), "sub").load()[1]
    assert cursor is not None and cursor.mark_delete == 41  # the 36 dropped messages count as consumed


def test_a_non_durable_consumer_reads_compacted_too(tmp_path: Path, client: Client) -> None:
    send_all(client, "t", [("a", b"1"), ("a", b"2")])
    compact_topic(Broker.for_url(str(tmp_path)), "t")
    consumer = client.subscribe(
        "t",
        "nd",
        is_read_compacted=True,
        subscription_mode=SubscriptionMode.NonDurable,
        initial_position=InitialPosition.Earliest,
    )
    assert receive_all(consumer) == [("a", b"2")]
    consumer.close()


@pytest.mark.parametrize("consumer_type", [ConsumerType.Shared, ConsumerType.KeyShared])
def test_read_compacted_is_refused_for_shared_subscriptions(
    client: Client, consumer_type: ConsumerType
) -> None:
    with pytest.raises(ValueError, match="Exclusive or Failover"):
        client.subscribe("t", "s", consumer_type=consumer_type, is_read_compacted=True)


# -- killed at random moments ------------------------------------------------------------------------


def _check_after_kill(
    root: str, previous_rows: list[tuple[str | None, bytes | None]], acked: int
) -> list[Any]:
    """The log still holds every message it held before (and every acknowledged one); the view is the
    model of the log below its horizon; every pointer version names an intact file."""
    log = TopicLog(file_io_for(root), TOPIC_DIR)
    table, _ = read_all(log)
    rows = list(zip(table.column("key").to_pylist(), table.column("value").to_pylist(), strict=True))
    assert rows[: len(previous_rows)] == previous_rows, "a committed message changed or vanished"
    assert len(rows) >= acked, "an acknowledged append is missing"
    state = f"{TOPIC_DIR}/{STATE_DIR}"
    names = log.io.list_dir(state)
    if names:
        for name in names:
            if name.endswith(".json"):
                doc = json.loads(log.io.read_bytes(f"{state}/{name}") or b"{}")
                assert decode_view(log.io.open_input(f"{TOPIC_DIR}/{doc['file']}")).num_rows == doc["rows"]
        horizon, view = view_of(log)
        assert view == model(rows, horizon)
    return rows


@pytest.mark.slow
def test_compaction_killed_at_random_moments_leaves_a_whole_view_and_the_whole_log(any_root: Root) -> None:
    rng = random.Random(20240611)
    root = any_root.url
    open_topic(root)
    io = file_io_for(root)
    rows: list[tuple[str | None, bytes | None]] = []
    compactions = unnamed = 0
    waited = checking = 0.0

    def spawn(seed: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(WORKER), root, str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    trials, depth = (8 if any_root.is_s3 else 30), 2
    booting = deque(spawn(seed) for seed in range(depth))  # workers boot (read-only) while others run
    for trial in range(trials):
        proc = booting.popleft()
        assert proc.stdin is not None and proc.stdout is not None
        t0 = time.monotonic()
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        waited += time.monotonic() - t0
        proc.stdin.write("go\n")
        proc.stdin.flush()
        # The kill point is counted in the worker's own events, not in wall-clock time (which depends
        # on the machine's load): every other trial after its first compaction, the rest after a
        # random number of appends; then a random few ms more, to land inside the next operation.
        wanted = "compacted " if trial % 2 == 0 else "ack "
        lines = kill_after_events(proc, wanted, 1 if trial % 2 == 0 else rng.randint(1, 4), rng)
        if trial + depth < trials:
            booting.append(spawn(trial + depth))
        acked = max([int(line.split()[1]) for line in lines if line.startswith("ack ")], default=0)
        compactions += sum(1 for line in lines if line.startswith("compacted "))
        t0 = time.monotonic()
        rows = _check_after_kill(root, rows, acked)
        checking += time.monotonic() - t0
        state = f"{TOPIC_DIR}/{STATE_DIR}"
        named = {json.loads(io.read_bytes(f"{state}/{n}") or b"{}")["file"].split("/")[-1]
                 for n in io.list_dir(state) if n.endswith(".json")}
        files = {n for n in io.list_dir(f"{TOPIC_DIR}/{COMPACTED_DIR}") if n.endswith(".parquet")}
        unnamed = max(unnamed, len(files - named))  # superseded views, and files of killed runs
    assert compactions >= trials // 2  # the kills landed among many runs, not before the first one
    # a readCompacted reader and a Delta reader after the last kill
    client = Client(root)
    try:
        horizon, _ = view_of(TopicLog(io, TOPIC_DIR))
        expected = [(k, v) for _, k, v in model(rows, horizon)] + rows[horizon:]
        assert read_compacted(client, "t") == expected
    finally:
        client.close()
    probe = delta_probe(f"{root}/{TOPIC_DIR}", any_root.storage_options)
    assert probe["num_rows"] == len(rows)
    print(
        f"{trials} kills, {compactions} completed compactions, {unnamed} view files no pointer names; "
        f"{waited:.1f} s waiting for workers to boot, {checking:.1f} s checking"
    )


def test_a_pointer_naming_anything_but_a_view_file_is_refused(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    append(log, [], [("a", b"1")])
    ledger_id = log.snapshot().ledger_id
    with pytest.raises(LogCorrupted, match="not a view"):  # never written by the library
        view_store(log.io, log.path).commit(horizon=1, file="../../escape.parquet", rows=0, ledger_id=ledger_id,
                                            previous_horizon=0)
    from broker_core.log.state_store import VersionedState
    from broker_core.topic.compacted_view import STATE_DIR

    VersionedState(log.io, f"{log.path}/{STATE_DIR}").update(  # but written by hand, it is refused on reading
        lambda _: {"horizon": 1, "file": "../../escape.parquet", "rows": 0, "ledgerId": ledger_id})
    with pytest.raises(LogCorrupted, match="not a view"):
        CompactedTopic(log).view()


def test_unreferenced_view_files_are_what_vacuum_may_delete(tmp_path: Path) -> None:
    log = open_topic(tmp_path)
    for i in range(41):  # pointer versions 0..40: the cleanup at version 40 removes versions 0..19
        append(log, [], [("a", f"{i}".encode())])
        compact_internal_topic(log, "t")
    # state cleanup runs on a background thread; run the version-40 cleanup here to be deterministic
    from broker_core.log.state_store import VersionedState
    from broker_core.topic.compacted_view import STATE_DIR

    VersionedState(log.io, f"{log.path}/{STATE_DIR}")._cleanup(40)
    orphan = f"{COMPACTED_DIR}/{'0' * 32}.parquet"
    log.io.write_new(f"{log.path}/{orphan}", b"a run killed before its commit")
    unreferenced = unreferenced_view_files(log.io, log.path)
    assert orphan in unreferenced
    assert view_of_file(log) not in unreferenced
    assert len(unreferenced) == 20 + 1  # the views of the removed versions, and the orphan
