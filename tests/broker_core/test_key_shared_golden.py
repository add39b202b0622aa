"""A root written before the 4.x Key_Shared selectors stays readable and its AUTO_SPLIT layout carries over.

``golden/key_shared_regions_root`` was written by commit 4f6b4b7 (``golden/make_key_shared_regions_root.py``):
topic ``t`` with 12 keyed messages, Key_Shared subscription ``s`` on hash ranges with consumers
``a``, ``b``, ``c`` still registered, b holding offset 0 and a offset 3, and the legacy cursor layout
``regions = c [0, 16383], b [16384, 32767], a [32768, 65535]``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import mmh3

from broker_core import BrokerConfig, Client, ConsumerType, InitialPosition, MessageId
from broker_core.subscription.dispatch import cursor_selector

GOLDEN = Path(__file__).parent / "golden" / "key_shared_regions_root"
WAIT_MS = 10_000


def range_hash(key: str) -> int:
    return (mmh3.hash(key.encode(), 0, signed=False) & 0x7FFFFFFF) % 65536 or 1


def test_legacy_auto_split_root_is_read_and_its_layout_converted(tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(GOLDEN, root)
    # this client's default is consistent hashing: the subscription keeps the ranges it was created with
    client = Client(str(root), broker_config=BrokerConfig(fsync_enabled=False))
    store = client._broker.cursor_store(client._broker.partitions("t")[0], "s")
    cursor = store.load()[1]
    assert cursor.key_shared["regions"] == [[0, 16383, "c"], [16384, 32767, "b"], [32768, 65535, "a"]]
    selector, _ = cursor_selector(cursor, now_ms=0)
    assert selector.ranges() == {"a": [(32769, 65536)], "b": [(16385, 32768)], "c": [(0, 16384)]}

    reader = client.create_reader("t", start_message_id=MessageId.earliest)
    assert [reader.read_next(WAIT_MS).data() for _ in range(12)] == [f"m{i}".encode() for i in range(12)]
    reader.close()

    d = client.subscribe("t", "s", consumer_type=ConsumerType.KeyShared, consumer_name="d",
                         initial_position=InitialPosition.Earliest)
    cursor = store.load()[1]
    assert "regions" not in cursor.key_shared
    # a's range (32768, 65536] is the largest (32768 slots): d splits it at 65536 - 16384 = 49152
    assert cursor.key_shared["autoSplitEndKeys"] == [[16384, "c"], [32768, "b"], [49152, "d"], [65536, "a"]]
    held = {0, 3}  # claimed by b and a in the golden cursor: never handed to d while they hold them
    mine = [i for i in range(12) if 32768 < range_hash(f"k{i}") <= 49152 and i not in held]
    got = []
    while len(got) < len(mine):
        msg = d.receive(WAIT_MS)
        got.append(int(msg.data().decode()[1:]))
        d.acknowledge(msg)
    assert mine and sorted(got) == mine
    d.close()
    client.close()

