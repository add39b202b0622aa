"""``spark_pubsub.read_topic``: the native scan returns exactly what ``spark.read.format("pubsub")`` does.

Both routes of ``read_topic`` run these tests (the ``route`` fixture): the project's JVM scan
(``jvm_scan``) and the DataFrame route it falls back to (``native_ids``).  One root holds every
topic shape (batched, unbatched and chunked messages, several codecs and
partitions, retention having removed a front segment, merged segments, a compacted view); each test
compares the two paths with chispa on the same options.  Planning is pure Python on the driver, so
the planning tests run without Spark.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from source_job import make_root

from broker_core import Client, CompressionType, InitialPosition
from broker_core.broker.broker import Broker
from broker_core.errors import DataLoss, InvalidConfiguration
from broker_core.jobs import merge_segments, run_retention
from broker_core.jobs.compaction import compact_topic
from broker_core.log.segment_ref import SegmentRef
from spark_pubsub import read_topic
from spark_pubsub.jvm_scan import ENABLED_CONF
from spark_pubsub.native_plan import SegmentRead, layout_runs, offset_runs, plan_topic_read, run_table
from spark_pubsub.native_scan import spark_url
from spark_pubsub.schema import SOURCE_SCHEMA

T0 = 1_700_000_000_000


def _send(client: Client, topic: str, n: int, prefix: str, **producer: Any) -> None:
    p = client.create_producer(topic, **producer)
    for i in range(n):
        p.send_async(f"{prefix}{i}".encode() * (1 + i % 3), None, partition_key=None if i % 9 == 0 else f"k{i % 7}",
                     properties={"i": str(i)} if i % 2 else None, event_timestamp=T0 + i if i % 3 else None,
                     ordering_key=f"o{i % 2}" if i % 4 == 1 else None)
    p.flush()
    p.close()


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Topics of every shape; ``shapes`` is partitioned, ``small`` lost its front and was merged."""
    path = make_root(tmp_path_factory.mktemp("native") / "root", maxMessageSize=2000)
    broker = Broker.for_url(path)
    broker.admin.create_partitioned_topic("shapes", 3)
    client = Client(path)
    try:
        _send(client, "shapes", 40, "plain-")  # unbatched: single entries
        _send(client, "shapes", 90, "batched-", batching_enabled=True, batching_max_messages=7,
              compression_type=CompressionType.LZ4)
        _send(client, "shapes", 30, "zstd-", batching_enabled=True, batching_max_messages=5,
              compression_type=CompressionType.ZSTD)
        big = client.create_producer("shapes", chunking_enabled=True)
        for i in range(3):
            big.send(bytes(range(256)) * (12 + i), partition_key=f"big{i}")  # chunked: several rows each
        big.close()
        for i in range(6):  # many small segments, then retention of a front part, then a merge
            _send(client, "small", 5, f"s{i}-", batching_enabled=i % 2 == 1, batching_max_messages=2)
        sub = client.subscribe("small", "s", initial_position=InitialPosition.Earliest)
        for _ in range(12):
            sub.acknowledge_cumulative(sub.receive(timeout_millis=5000))
        sub.close()
        for i in range(3):
            _send(client, "compacted", 20, f"c{i}-", batching_enabled=i == 1)
    finally:
        client.close()
    run_retention(broker, "small", retention_time_in_minutes=0, retention_size_in_mb=0)
    merge_segments(broker, "small", min_age_ms=0, min_segments=2, dry_run=False)
    compact_topic(broker, "compacted")
    client = Client(path)
    try:
        _send(client, "compacted", 10, "tail-")
    finally:
        client.close()
    return path


@pytest.fixture(params=["jvm", "dataframe"])
def route(request: pytest.FixtureRequest, spark: Any) -> Any:
    """``read_topic``'s route for the test: the JVM scan, or the DataFrame route (``ENABLED_CONF``)."""
    spark.conf.set(ENABLED_CONF, "true" if request.param == "jvm" else "false")
    yield request.param
    spark.conf.unset(ENABLED_CONF)


@pytest.fixture
def dataframe_route(spark: Any) -> Any:
    """For tests of the DataFrame route's own machinery (searches, maps, joins)."""
    spark.conf.set(ENABLED_CONF, "false")
    yield "dataframe"
    spark.conf.unset(ENABLED_CONF)


def jvm_scanned(df: Any) -> bool:
    """Whether a classic DataFrame reads through the JVM scan."""
    return "spark_pubsub_planned_segments" in df._jdf.queryExecution().executedPlan().toString()


def via_source(spark: Any, root: str, **options: Any) -> Any:
    reader = spark.read.format("pubsub")
    for key, value in options.items():
        reader = reader.option(key, str(value).lower() if isinstance(value, bool) else str(value))
    return reader.load(root).orderBy("topic", "offset")


def assert_same(spark: Any, root: str, **options: Any) -> int:
    native = read_topic(spark, root, **options)
    assert native.schema == SOURCE_SCHEMA
    expected = via_source(spark, root, **options)
    assert_df_equality(native.orderBy("topic", "offset"), expected)
    return expected.count()


def test_every_topic_shape_reads_the_same_as_the_source(spark: Any, root: str, route: str) -> None:
    assert jvm_scanned(read_topic(spark, root, topics="shapes,compacted")) == (route == "jvm")
    logs = Broker.for_url(root)
    small = logs.topic_log(logs.partitions("small")[0]).snapshot()
    assert small.first_offset > 0 and any(s.num_records > 5 for s in small.segments)  # retained, merged
    shapes = sum(logs.topic_log(p).snapshot().next_offset for p in logs.partitions("shapes"))
    assert assert_same(spark, root, topic="shapes") == shapes > 160 + 3  # chunked messages: several rows
    assert assert_same(spark, root, topic="small") == 30 - small.first_offset
    assert assert_same(spark, root, topics="shapes,compacted") > 160
    assert assert_same(spark, root, topic="compacted", readCompacted=True) < 70
    assert assert_same(spark, root, topic="compacted") == 70


@pytest.mark.parametrize(("limits", "hashed_maps"), [((0, 0), False), ((0, 32), False), ((64, 0), True),
                                                    ((0, 0), True)],
                         ids=["both-joins", "file-join", "run-join", "file-map-run-join"])
def test_the_map_and_join_paths_for_many_files_and_runs_read_the_same(spark: Any, root: str, monkeypatch: Any,
                                                                       limits: tuple[int, int],
                                                                       hashed_maps: bool, dataframe_route: str) -> None:
    """Above ``FILE_SEARCH_LIMIT`` files a scan looks base offsets up in a literal map (a join where
    Spark has no hashed map lookup), above ``RUN_SEARCH_LIMIT`` runs it joins: forced here on every
    shape (limit 0), partial reads included."""
    from spark_pubsub import native_ids

    monkeypatch.setattr(native_ids, "FILE_SEARCH_LIMIT", limits[0])
    monkeypatch.setattr(native_ids, "RUN_SEARCH_LIMIT", limits[1])
    if not hashed_maps:
        monkeypatch.setattr(native_ids, "hashed_map_entries", lambda spark: None)
    assert (native_ids.hashed_map_entries(spark) is not None) == hashed_maps
    plan = read_topic(spark, root, topic="small")._jdf.queryExecution().executedPlan().toString()
    assert ("element_at" in plan) == (hashed_maps and limits[0] == 0), plan
    assert assert_same(spark, root, topics="shapes,small") > 160
    first = "persistent://public/default/shapes-partition-1"
    assert_same(spark, root, topic="shapes", startingOffsets=f'{{"{first}": 5}}', endingOffsets=f'{{"{first}": 40}}')


def test_only_the_snapshot_files_are_read_and_unused_positions_are_pruned(spark: Any, tmp_path: Path,
                                                                         route: str) -> None:
    """Spark reads exactly the planned files (an uncommitted segment beside them is never listed), and a
    query that selects no position column computes none: no join, no message id (the JVM scan is
    given the planned files only, and reads only the columns a query selects)."""
    root = make_root(tmp_path / "root")
    client = Client(root)
    try:
        _send(client, "files", 30, "f", batching_enabled=True, batching_max_messages=4)
        _send(client, "files", 20, "g")
    finally:
        client.close()
    broker = Broker.for_url(root)
    log = broker.topic_log(broker.partitions("files")[0])
    committed = {s.path for s in log.snapshot().segments}
    orphan = Path(log.io.abs_path(f"{log.path}/part-{'f' * 32}.parquet"))  # as a crashed writer leaves it
    orphan.write_bytes(Path(log.io.abs_path(f"{log.path}/{sorted(committed)[0]}")).read_bytes())
    df = read_topic(spark, root, topic="files")
    assert df.count() == 50 and sorted(r.offset for r in df.select("offset").collect()) == list(range(50))
    plan = df.select("value")._jdf.queryExecution().executedPlan().toString()
    if route == "jvm":  # the pruned scan reads the value alone
        assert "spark_pubsub_planned_segments[value#" in plan.replace(" ", ""), plan
    else:
        assert {f.rsplit("/", 1)[1] for f in df.inputFiles()} == committed
        assert "Join" not in plan and "concat" not in plan and "CASE WHEN" not in plan, plan
    assert_same(spark, root, topic="files")


def test_searches_at_their_limits_compile_to_java(spark: Any, tmp_path: Path, dataframe_route: str) -> None:
    """A scan of ``FILE_SEARCH_LIMIT`` files and nearly ``RUN_SEARCH_LIMIT`` runs keeps Spark's generated
    code (no fallback to interpreted evaluation, which Spark would otherwise take silently), and its
    row loop stays within HotSpot's 8,000 bytes per method (a larger one is never JIT-compiled)."""
    import re

    from spark_pubsub.native_ids import FILE_SEARCH_LIMIT, RUN_SEARCH_LIMIT
    from spark_pubsub.native_plan import offset_runs

    root = make_root(tmp_path / "root")
    client = Client(root)
    batched = client.create_producer("wide", batching_enabled=True, batching_max_messages=2)
    single = client.create_producer("wide")
    try:
        for i in range(FILE_SEARCH_LIMIT):  # one commit, one segment each; batched and single ones alternate
            producer = batched if i < RUN_SEARCH_LIMIT and i % 2 == 0 else single
            for j in range(2):
                producer.send_async(f"w{i}-{j}".encode(), None)
            producer.flush()
    finally:
        batched.close()
        single.close()
        client.close()
    broker = Broker.for_url(root)
    log = broker.topic_log(broker.partitions("wide")[0])
    plan = plan_topic_read(log, topic="wide", partition=-1, start=0, end=10**9, read_compacted=False,
                           fail_on_data_loss=True)
    assert len(plan.segments) == FILE_SEARCH_LIMIT
    assert RUN_SEARCH_LIMIT - 4 <= len(offset_runs(plan.segments)) <= RUN_SEARCH_LIMIT
    spark.conf.set("spark.sql.codegen.fallback", "false")
    try:
        assert assert_same(spark, root, topic="wide") == 2 * FILE_SEARCH_LIMIT
    finally:
        spark.conf.unset("spark.sql.codegen.fallback")
    executed = read_topic(spark, root, topic="wide")._jdf.queryExecution().executedPlan()
    code = spark._jvm.org.apache.spark.sql.execution.debug.package.codegenString(executed)
    sizes = [int(n) for n in re.findall(r"maxMethodCodeSize:(\d+)", code)]
    assert sizes and max(sizes) <= 8000, sizes


def test_the_driver_computes_sparks_own_xxhash64(spark: Any) -> None:
    import random
    import string

    from spark_pubsub.xxhash64 import spark_xxhash64, xxh64

    rng = random.Random(7)
    words = ["", "part-" + "0" * 32 + ".parquet", "part-" + "f" * 32 + ".zstd.parquet", "é✓ü"]
    words += ["".join(rng.choice(string.printable) for _ in range(n)) for n in range(1, 90)]  # every tail length
    from pyspark.sql import functions as F

    got = dict(spark.createDataFrame([(w,) for w in words], "w string").select("w", F.xxhash64("w")).collect())
    assert {w: spark_xxhash64(w) for w in words} == got
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999  # the algorithm's published digest of no input


def test_a_hash_collision_between_planned_files_takes_the_exact_join(spark: Any, tmp_path: Path,
                                                                     monkeypatch: Any, dataframe_route: str) -> None:
    from spark_pubsub import native_ids

    root = make_root(tmp_path / "root")
    client = Client(root)
    try:
        for i in range(3):
            _send(client, "collide", 10, f"c{i}-", batching_enabled=i == 1, batching_max_messages=3)
    finally:
        client.close()
    monkeypatch.setattr(native_ids, "spark_xxhash64", lambda name: 1)  # the three names "collide"
    assert assert_same(spark, root, topic="collide") == 30


@pytest.mark.parametrize("search_limit", [64, 0], ids=["search", "map"])
def test_a_row_from_a_file_outside_the_plan_fails_the_query(spark: Any, root: str, monkeypatch: Any,
                                                            search_limit: int) -> None:
    """Defence in depth: were Spark to hand back a row of a file the plan does not name, the search's
    leaf check (or the map's missing key) fails the query naming that file rather than give it a
    neighbour's offsets."""
    import dataclasses

    from pyspark.sql import functions as F

    from spark_pubsub import native_ids
    from spark_pubsub.native_ids import positions

    monkeypatch.setattr(native_ids, "FILE_SEARCH_LIMIT", search_limit)
    from spark_pubsub.native_scan import plan_read, root_uri, segment_rows
    from spark_pubsub.options import SourceOptions, parse_options

    plan = plan_read(parse_options(SourceOptions, {"path": root, "topic": "small"}))[0]
    rows = segment_rows(spark, spark_url(root_uri(root)), plan, ("value",))
    other = tuple(dataclasses.replace(r, segment=dataclasses.replace(r.segment, path=f"part-{i:032x}.parquet"))
                  for i, r in enumerate(plan.segments))
    pos = positions(spark, F, rows, other)
    with pytest.raises(Exception, match=r"not in the planned snapshot: part-[0-9a-f]{32}\.") as failure:
        pos.frame.select(pos.offset).collect()
    assert any(r.segment.path in str(failure.value) for r in plan.segments)


def test_offsets_timestamps_and_patterns_match(spark: Any, root: str, route: str) -> None:
    first = "persistent://public/default/shapes-partition-1"
    assert_same(spark, root, topic="shapes", startingOffsets=f'{{"{first}": 5}}',
                endingOffsets=f'{{"{first}": 40}}')
    assert_same(spark, root, topicsPattern="persistent://public/default/comp.*", startingTimestamp=T0)
    assert assert_same(spark, root, topic="compacted", readCompacted=True,
                       startingOffsets='{"compacted": 10}', endingOffsets='{"compacted": 65}') > 0


def test_retention_loss_is_refused_or_skipped_as_the_source_does(spark: Any, root: str, route: str) -> None:
    with pytest.raises(DataLoss, match="failOnDataLoss"):
        read_topic(spark, root, topic="small", startingOffsets='{"small": 0}')
    assert_same(spark, root, topic="small", startingOffsets='{"small": 0}', failOnDataLoss=False)


def test_bad_options_fail_as_in_the_source(spark: Any, root: str, route: str) -> None:
    with pytest.raises(InvalidConfiguration, match="topic"):
        read_topic(spark, root)
    with pytest.raises(InvalidConfiguration, match="startingOffsets"):
        read_topic(spark, root, topic="shapes", startingOffsets="yesterday")
    with pytest.raises(InvalidConfiguration, match="not both"):
        read_topic(spark, root, topic="shapes", startingOffsets="earliest", startingTimestamp=1)
    with pytest.raises(InvalidConfiguration, match="startingTimestamp"):
        read_topic(spark, root, topic="shapes", startingTimestamp=-1)
    with pytest.raises(InvalidConfiguration, match="storage root"):
        read_topic(spark, "", topic="shapes")


def test_a_read_sees_one_snapshot_while_the_topic_grows(spark: Any, tmp_path: Path, route: str) -> None:
    root = make_root(tmp_path / "root")
    client = Client(root)
    try:
        _send(client, "grow", 50, "a")
        df = read_topic(spark, root, topic="grow")
        _send(client, "grow", 50, "b")  # after planning: neither new files nor offsets are read
        assert df.count() == 50 and df.agg({"offset": "max"}).collect()[0][0] == 49
    finally:
        client.close()


def test_a_file_vacuumed_after_planning_fails_or_is_skipped(spark: Any, tmp_path: Path, route: str) -> None:
    root = make_root(tmp_path / "root")
    client = Client(root)
    try:
        for i in range(3):
            _send(client, "vac", 10, f"v{i}-")
    finally:
        client.close()
    strict = read_topic(spark, root, topic="vac")
    lenient = read_topic(spark, root, topic="vac", failOnDataLoss=False)
    log = Broker.for_url(root).topic_log(Broker.for_url(root).partitions("vac")[0])
    first = log.snapshot().segments[0].path
    (Path(log.io.abs_path(f"{log.path}/{first}"))).unlink()
    with pytest.raises(Exception, match=first.replace(".", r"\.")):
        strict.collect()
    assert sorted(r.offset for r in lenient.select("offset").collect()) == list(range(10, 30))


def test_a_root_spark_cannot_open_falls_back_to_the_source(spark: Any, root: str, caplog: Any) -> None:
    with caplog.at_level(logging.WARNING, logger="spark_pubsub.native_scan"):
        df = read_topic(spark, root, topic="small", spark_root="nosuchfs://bucket/root")
    assert_df_equality(df.orderBy("offset"), via_source(spark, root, topic="small"))
    lines = [r.getMessage() for r in caplog.records if "format('pubsub')" in r.getMessage()]
    assert len(lines) == 1 and "nosuchfs://bucket/root" in lines[0]


def test_without_javac_the_dataframe_route_reads_with_one_log_line(spark: Any, root: str, tmp_path: Path,
                                                                   monkeypatch: Any, caplog: Any) -> None:
    """No ``javac`` (and no jar built before): ``read_topic`` takes the DataFrame route, says so once."""
    from spark_pubsub import jvm_scan

    monkeypatch.setenv(jvm_scan.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(jvm_scan, "_built", {})
    monkeypatch.setattr(jvm_scan, "_loaded", {})
    monkeypatch.setattr(jvm_scan, "_javac", lambda: None)
    with caplog.at_level(logging.WARNING, logger="spark_pubsub.jvm_scan"):
        first, second = read_topic(spark, root, topic="small"), read_topic(spark, root, topic="small")
    assert not jvm_scanned(first) and not jvm_scanned(second)
    assert_df_equality(second.orderBy("offset"), via_source(spark, root, topic="small"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "javac" in lines[0] and "DataFrame route" in lines[0], lines


@pytest.mark.parametrize("kind", ["classic", "connect"])
def test_a_session_that_cannot_load_the_scan_reads_by_the_dataframe_route(spark: Any, root: str, monkeypatch: Any,
                                                                          caplog: Any, kind: str,
                                                                          request: pytest.FixtureRequest) -> None:
    """The jar is added but its class does not load (here: a provider name it lacks; in life, a
    server of another Spark): one warning per session, then the DataFrame route, never a failed query."""
    from spark_pubsub import jvm_scan

    session = spark if kind == "classic" else request.getfixturevalue("connect")
    monkeypatch.setattr(jvm_scan, "_loaded", {})
    monkeypatch.setattr(jvm_scan, "PROVIDER", "sparkpubsub.scan.NoSuchProvider")
    with caplog.at_level(logging.WARNING, logger="spark_pubsub.jvm_scan"):
        first, second = read_topic(session, root, topic="small"), read_topic(session, root, topic="small")
    assert first.orderBy("offset").collect() == second.orderBy("offset").collect() == \
        via_source(spark, root, topic="small").collect()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "cannot load the JVM scan" in lines[0] and "NoSuchProvider" in lines[0], lines


def test_the_jar_is_built_into_the_cache_once(tmp_path: Path, monkeypatch: Any) -> None:
    from spark_pubsub import jvm_scan

    monkeypatch.setenv(jvm_scan.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(jvm_scan, "_built", {})
    jar = jvm_scan.jar_path()
    if jvm_scan._javac() is None:  # this machine cannot build it; the route above is the fallback
        assert jar is None
        return
    assert jar is not None and jar.is_relative_to(tmp_path / "cache")
    import zipfile

    assert "sparkpubsub/scan/PubsubScan.class" in zipfile.ZipFile(jar).namelist()
    monkeypatch.setattr(jvm_scan, "_built", {})
    stamp = jar.stat().st_mtime_ns
    assert jvm_scan.jar_path() == jar and jar.stat().st_mtime_ns == stamp  # reused, not rebuilt


def test_spark_urls() -> None:
    assert spark_url("s3://bucket/root") == "s3a://bucket/root"
    assert spark_url("file:///data/root/") == "file:///data/root"
    assert spark_url("abfss://c@a.dfs.core.windows.net/r") == "abfss://c@a.dfs.core.windows.net/r"


@pytest.mark.parametrize("search_limit", [64, 0], ids=["search", "map"])
def test_a_connect_session_reads_the_same(spark: Any, connect: Any, root: str, monkeypatch: Any,
                                          search_limit: int, route: str) -> None:
    """Both routes on Spark Connect: the JVM scan's jar reaches the server as a session artifact."""
    from spark_pubsub import native_ids

    monkeypatch.setattr(native_ids, "FILE_SEARCH_LIMIT", search_limit)
    connect.conf.set(ENABLED_CONF, "true" if route == "jvm" else "false")
    try:
        native = read_topic(connect, root, topics="shapes,small").orderBy("topic", "offset")
        assert native.schema == SOURCE_SCHEMA
        assert native.collect() == via_source(spark, root, topics="shapes,small").collect()
        assert ("spark_pubsub_planned_segments" in native._explain_string()) == (route == "jvm")
    finally:
        connect.conf.unset(ENABLED_CONF)


# -- planning (no Spark) -------------------------------------------------------------------------------


def _seg(layout: list[int], base_entry: int = 100) -> SegmentRef:
    n = sum(abs(p) for p in layout)
    return SegmentRef(path="part-x.parquet", base_offset=1000, num_records=n, base_entry_id=base_entry,
                      layout=layout, size_bytes=1, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)


def test_layout_runs_give_every_row_its_id() -> None:
    layout = [3, 3, -4, 2, 3, 3, -1, 5]
    seg = _seg(layout)
    runs = layout_runs(seg)
    assert len(runs) == 6  # [3,3] and [3,3] merge; singles merge
    entries, batches = seg.ids_of_rows()
    for row in range(seg.num_records):
        a, _, entry_base, size = next(r for r in runs if r[0] <= row < r[1])
        got = (entry_base + (row - a) // size, (row - a) % size) if size > 0 else (entry_base + row - a, -1)
        assert got == (entries[row], batches[row]), row


def _ids_by_formula(runs: list[Any], offset: int) -> tuple[int, int]:
    run = next(r for r in runs if r.lo <= offset < r.hi)
    rel = offset - run.start
    return (run.entry_base + rel // run.size, rel % run.size) if run.size > 0 else (run.entry_base + rel, -1)


def test_offset_runs_merge_across_segments_and_give_every_offset_its_id() -> None:
    a = SegmentRef(path="part-a.parquet", base_offset=1000, num_records=17, base_entry_id=100, layout=[-5, 4, 4, 4],
                   size_bytes=1, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)
    b = SegmentRef(path="part-b.parquet", base_offset=1017, num_records=13, base_entry_id=a.end_entry_id,
                   layout=[4, 4, -5], size_bytes=1, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)
    c = SegmentRef(path="part-c.parquet", base_offset=1030, num_records=6, base_entry_id=b.end_entry_id,
                   layout=[-6], size_bytes=1, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)
    reads = (SegmentRead(a, 7, 17), SegmentRead(b, 0, 13), SegmentRead(c, 0, 4))  # starts inside a batch
    runs = offset_runs(reads)
    assert [(r.lo, r.hi, r.size) for r in runs] == [(1007, 1025, 4), (1025, 1034, -1)]  # merged over a->b, b->c
    for seg, read in zip((a, b, c), reads, strict=True):
        entries, batches = seg.ids_of_rows()
        for row in range(read.row_lo, read.row_hi):
            assert _ids_by_formula(runs, seg.base_offset + row) == (entries[row], batches[row]), (seg.path, row)
    singles = [SegmentRef(path=f"part-{i}.parquet", base_offset=10 * i, num_records=10, base_entry_id=10 * i,
                          layout=[-10], size_bytes=1, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)
               for i in range(50)]
    assert len(offset_runs(tuple(SegmentRead(s, 0, 10) for s in singles))) == 1  # any number of files: one run


def test_the_run_table_stays_small_and_covers_each_offset_once() -> None:
    seg = _seg([7] * 5000 + [-3000] + [1, 2] * 400)  # many runs
    runs = offset_runs((SegmentRead(seg, 10, seg.num_records - 5),))
    table, shift = run_table(runs)
    assert table.num_rows <= 3 * 4096
    rows = table.to_pylist()
    entries, batches = seg.ids_of_rows()
    for row in (10, 11, 34_999, 35_000, 38_123, seg.num_records - 6):
        offset = seg.base_offset + row
        hits = [r for r in rows if r["bucket"] == offset >> shift and r["lo"] <= offset < r["hi"]]
        assert len(hits) == 1, row
        run = hits[0]
        rel = offset - run["start"]
        got = (run["entry_base"] + rel // run["size"], rel % run["size"]) if run["size"] > 0 else (
            run["entry_base"] + rel, -1)
        assert got == (entries[row], batches[row])
    for row in (9, seg.num_records - 5):
        offset = seg.base_offset + row
        assert not [r for r in rows if r["bucket"] == offset >> shift and r["lo"] <= offset < r["hi"]]


def test_planning_takes_one_snapshot_and_reads_the_view_below_the_horizon(root: str) -> None:
    broker = Broker.for_url(root)
    log = broker.topic_log(broker.partitions("compacted")[0])
    plan = plan_topic_read(log, topic="t", partition=-1, start=0, end=10**9, read_compacted=True,
                           fail_on_data_loss=True)
    assert plan.view is not None and plan.view[1:] == (0, 60)
    assert sum(r.row_hi - r.row_lo for r in plan.segments) == 10
    assert plan.snapshot_version == log.snapshot().version
