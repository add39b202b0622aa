"""An end-to-end job on ``local-cluster[2,1,1024]``: two executor JVMs with their own Python workers,
so nothing the driver's reader holds in memory can reach the tasks except through what it pickles
(the scan partitions) and what it commits to storage (cursors).

The job runs in a subprocess (``source_job.py cluster``) because the test session's SparkSession is a
``local[2]`` one and a process has one SparkContext.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest
from moto_s3 import MotoS3
from processes import child_env
from source_job import make_root, names

from broker_core.broker.broker import Broker
from broker_core.jobs.compaction import compact_topic
from broker_core.topic.compacted_view import COMPACTED_DIR, decode_view, view_store
from spark_pubsub import jvm_scan, read_topic

HERE = Path(__file__).resolve().parent
MASTER = "local-cluster[2,1,1024]"


def _view(root: str, part: Any) -> Any:
    log = Broker.for_url(root).topic_log(part, create=False)
    pointer = view_store(log.io, log.path).latest()
    assert pointer is not None
    return decode_view(log.io.open_input(f"{log.path}/{pointer.file}"))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_end_to_end_on_a_local_cluster(spark: Any, tmp_path: Path, moto_s3: MotoS3) -> None:
    """Also reads and writes an S3 root (moto) from the executors, with ``storage.*`` options."""
    spark_home = Path(pyspark.__file__).parent  # pip's pyspark ships bin/ and jars/ here
    if not (spark_home / "bin" / "spark-class").exists():
        pytest.skip(f"local-cluster needs Spark's launch scripts; {spark_home}/bin/spark-class is missing")
    root = make_root(tmp_path / "root")
    s3_root = moto_s3.fresh_root()
    out = tmp_path / "report.json"
    env = child_env(SPARK_HOME=str(spark_home))
    log = tmp_path / "job.log"
    with open(log, "wb") as fh:
        try:
            proc = subprocess.run(
                [sys.executable, str(HERE / "source_job.py"), "cluster", root, str(out), MASTER,
                 json.dumps({"root": s3_root, "options": moto_s3.storage_options})],
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                timeout=780,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"the local-cluster job did not finish in 13 minutes on this machine; see {log}")
    text = log.read_text(errors="replace")
    if proc.returncode != 0 and any(
        sign in text
        for sign in ("Failed to launch", "Cannot find SPARK_HOME", "ExecutorRunner: Error running executor")
    ):
        pytest.skip(f"local-cluster cannot start executors here: {text[-1500:]}")
    assert proc.returncode == 0, text[-5000:]
    report = json.loads(out.read_text())
    if "skip" in report:
        pytest.skip(f"local-cluster did not come up: {report['skip']}")
    print(
        f"\nlocal-cluster: {report['executors']} executors, task processes {report['task_pids']}, "
        f"driver {report['driver_pid']}, stream batches {report['stream_batches']}, "
        f"sink {'not present' if report['sink'] is None else 'checked'}"
    )

    expected = sorted(names("lc", 2000))
    assert report["master"] == MASTER and report["executors"] == 2
    # bounded read: the rows were produced by broker_core and read inside executor processes
    assert report["batch_values"] == expected
    assert report["task_pids"] and report["driver_pid"] not in report["task_pids"]
    assert report["batch_partitions"] == 4 and report["max_tasks_per_key"] == 1
    # subscription stream: the driver claimed and acknowledged, executors read exactly the claims
    assert report["stream_values"] == expected
    assert sum(report["stream_batches"]) == 2000 and max(report["stream_batches"]) <= 700
    broker = Broker.for_url(root)
    for part in broker.partitions("lc"):
        _, cursor = broker.cursor_store(part, "lc-sub").load()
        assert cursor is not None
        assert cursor.mark_delete == broker.topic_log(part).snapshot().next_offset
        assert not any(cursor.claims.values())
    # the native scan on the cluster (the JVM scan: its jar reaches the executors): the source's rows
    # and ids, and the same as on local[2]
    assert report["native_jvm"] is (jvm_scan.jar_path() is not None)
    assert report["native_rows"] == report["source_rows"] and len(report["native_rows"]) == 2000
    here = sorted([r.topic, r.offset, r.messageId, r.key, r.value.decode()] for r in read_topic(
        spark, root, topic="lc").select("topic", "offset", "messageId", "key", "value").collect())
    assert report["native_rows"] == [list(r) for r in here]
    # the compaction job on the cluster wrote the views the local run writes
    assert report["compaction"] == ["compacted", "compacted"]
    local = make_root(tmp_path / "local")
    shutil.copytree(root, local, dirs_exist_ok=True, ignore=shutil.ignore_patterns(COMPACTED_DIR))
    compact_topic(Broker.for_url(local), "lc")
    for part in broker.partitions("lc"):
        assert _view(root, part).equals(_view(local, part)), part
    if report["sink"] is not None:  # spark_pubsub/sink.py exists: what went through it came back
        assert report["sink"] == expected, report["sink"]
    # the S3 root: produced by the driver's process, read and copied by the executors through obstore
    s3 = report["s3"]
    assert s3["values"] == sorted(names("s3", 500)) and s3["copied"] == s3["values"]
    assert s3["task_pids"] and report["driver_pid"] not in s3["task_pids"]
