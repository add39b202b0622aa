"""Readahead of tiny segments (``broker_core/topic/readahead.py``): it only ever warms the cache.

A read spanning many small segments has the following ones decoded on a background thread; the
reader's answers, its damage reports and the process's exit must be exactly as without it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from log_helpers import TOPIC_DIR, open_topic, producer_table

from broker_core.errors import SegmentCorrupted
from broker_core.log.segment_ref import SegmentRef
from broker_core.topic import topic_log as topic_log_module
from broker_core.topic.readahead import Readahead
from broker_core.topic.topic_log import TopicLog

_MIN = topic_log_module._READAHEAD_MIN_SEGMENTS


def _topic(root: Path, segments: int) -> TopicLog:
    topic = open_topic(root, fsync=False)
    for i in range(segments):
        topic.append(producer_table("p", [3 * i, 3 * i + 1, 3 * i + 2]), layout=[3])
    return topic


def test_a_long_read_has_the_following_segments_decoded_in_the_background(tmp_path: Path) -> None:
    _topic(tmp_path, 3 * _MIN)
    topic = open_topic(tmp_path, fsync=False, create=False)  # a reader with a cold cache
    segments = topic.snapshot().segments
    table, _ = topic.read(0, 3 * _MIN, read_ahead_to=10**9)  # the first _MIN segments
    assert table.column("sequence_id").to_pylist() == list(range(3 * _MIN))
    assert topic._readahead.wait_idle(30)
    ahead = {seg.path for seg in segments[_MIN:2 * _MIN]}
    assert ahead <= set(topic._cache), "the next segments were not decoded ahead"
    assert segments[2 * _MIN].path not in topic._cache  # as many as the read spanned, no more
    rest, offsets = topic.read(3 * _MIN, 9 * _MIN)  # served from the cache, the same rows
    assert rest.column("sequence_id").to_pylist() == offsets.tolist() == list(range(3 * _MIN, 9 * _MIN))


def test_a_short_read_or_one_without_read_ahead_to_starts_no_readahead(tmp_path: Path) -> None:
    _topic(tmp_path, 2 * _MIN + 4)
    topic = open_topic(tmp_path, fsync=False, create=False)
    topic.read(0, 3 * (_MIN - 1), read_ahead_to=10**9)
    topic.read(3 * (_MIN - 1), 3 * (2 * _MIN - 1))  # a one-off read: no readahead
    assert topic._readahead.wait_idle(30)
    assert len(topic._cache) == 2 * _MIN - 1


def test_readahead_stops_at_read_ahead_to(tmp_path: Path) -> None:
    _topic(tmp_path, 3 * _MIN)
    topic = open_topic(tmp_path, fsync=False, create=False)
    segments = topic.snapshot().segments
    topic.read(0, 3 * _MIN, read_ahead_to=3 * (_MIN + 2))  # a scan whose range ends two segments on
    assert topic._readahead.wait_idle(30)
    assert {s.path for s in segments[:_MIN + 2]} == set(topic._cache)


def test_damage_ahead_is_left_to_the_reader_to_report(tmp_path: Path) -> None:
    _topic(tmp_path, 2 * _MIN + 1)
    topic = open_topic(tmp_path, fsync=False, create=False)
    victim = topic.snapshot().segments[_MIN + 2]
    (tmp_path / TOPIC_DIR / victim.path).write_bytes(b"PAR1 not a parquet file")
    topic.read(0, 3 * _MIN, read_ahead_to=10**9)
    assert topic._readahead.wait_idle(30)  # the background decode failed quietly
    assert victim.path not in topic._cache
    _, offsets, stop = topic.read_until(3 * _MIN, 3 * (2 * _MIN + 1))
    assert stop == victim.base_offset and offsets.tolist() == list(range(3 * _MIN, victim.base_offset))
    with pytest.raises(SegmentCorrupted, match="is unreadable"):
        topic.read(victim.base_offset, victim.end_offset)


def test_a_reader_waits_for_the_segment_being_decoded_instead_of_decoding_it_twice() -> None:
    started, release = threading.Event(), threading.Event()
    loaded: list[str] = []

    def load(seg: SegmentRef) -> None:
        started.set()
        release.wait(30)
        loaded.append(seg.path)

    seg = SegmentRef(path="part-a.parquet", base_offset=0, num_records=1, base_entry_id=0, layout=[1],
                     size_bytes=10, min_publish_ms=0, max_publish_ms=0, modification_time_ms=0)
    readahead = Readahead(load, name="t")
    readahead.want([seg])
    assert started.wait(30)
    waiter = threading.Thread(target=readahead.forget, args=(seg.path,))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive() and not loaded  # still waiting for the decode in flight
    release.set()
    waiter.join(30)
    assert not waiter.is_alive() and loaded == [seg.path]
    readahead.forget("part-other.parquet")  # not in flight: returns at once


def test_the_process_exits_cleanly_right_after_a_read_that_started_readahead(tmp_path: Path) -> None:
    _topic(tmp_path, 4 * _MIN)
    helpers = Path(__file__).parent
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(helpers)!r})
        from log_helpers import open_topic
        topic = open_topic({str(tmp_path)!r}, fsync=False, create=False)
        topic.read(0, {3 * 2 * _MIN}, read_ahead_to=10**9)
        print("read", flush=True)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "read" and "terminate" not in done.stderr
