"""The JVM scan: ``read_topic``'s planned segment files read by a small Java data source of our own.

The DataFrame route (``native_ids``) names each row's file and position through ``_metadata``,
which costs a per-row struct and expressions that keep it above 1.3x Spark's Parquet reader (D106).
``spark_pubsub/jvm/src`` is a DataSource V2 table (``PROVIDER``) that takes the driver's plan as an
option (files in order, each with its rows, base offset, ledger id, partition and layout runs) and
reads each file with Spark's own vectorized Parquet reader: the file's column vectors pass through,
constants are constant vectors, offsets and message ids are filled per batch in a Java loop (D113).

The jar is built on first use with the ``javac`` on the ``PATH`` (or under ``JAVA_HOME``) against
pyspark's own jars, into a cache directory keyed by the sources and the Spark version, and added to
each session that reads (``ADD JAR`` on a classic session, ``addArtifacts`` on Spark Connect).
Where it cannot be built or loaded, ``read_topic`` keeps the DataFrame route, with one log line.
Setting the session's ``spark.pubsub.jvmScan.enabled`` to ``false`` chooses the DataFrame route too.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import urllib.parse
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_pubsub.native_plan import TopicRead, offset_runs
from spark_pubsub.schema import user_topic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

PROVIDER = "sparkpubsub.scan.PubsubScan"
ENABLED_CONF = "spark.pubsub.jvmScan.enabled"
SOURCE_DIR = Path(__file__).resolve().parent / "jvm" / "src"
CACHE_ENV = "SPARK_PUBSUB_CACHE_DIR"
"""Where built jars are kept (default ``~/.cache/spark-pubsub``)."""

_lock = threading.Lock()
_built: dict[str, Path | None] = {}  # cache key -> jar, or None when it cannot be built
_loaded: dict[int, tuple[Any, bool]] = {}  # id(session) -> (the session, whether it loads the scan)


def enabled(spark: SparkSession) -> bool:
    """Whether this session reads through the JVM scan (``ENABLED_CONF``, default true)."""
    return str(spark.conf.get(ENABLED_CONF, "true")).strip().lower() != "false"


def spark_jars() -> Path | None:
    """pyspark's jar folder (the classpath the sources compile against), if this pyspark has one."""
    import pyspark

    jars = Path(pyspark.__file__).resolve().parent / "jars"
    return jars if any(jars.glob("spark-sql_*.jar")) else None


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def jar_path() -> Path | None:
    """The scan's jar, built on first use and cached; None (logged once) where it cannot be built."""
    import pyspark

    sources = sorted(SOURCE_DIR.rglob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    key = digest.hexdigest()[:16]
    with _lock:
        if key not in _built:
            _built[key] = _build(key, sources)
        return _built[key]


def _build(key: str, sources: list[Path]) -> Path | None:
    cache = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "spark-pubsub") / "jvm" / key
    jar = cache / "spark-pubsub-scan.jar"
    if jar.is_file():
        return jar
    javac, jars = _javac(), spark_jars()
    if javac is None or jars is None or not sources:
        missing = "javac" if javac is None else "pyspark's jars" if jars is None else "the Java sources"
        log.warning("spark_pubsub: no %s to build the JVM scan; read_topic uses its DataFrame route", missing)
        return None
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as work:
        classes = Path(work) / "classes"
        command = [javac, "--release", "17", "-nowarn", "-d", str(classes), "-cp", str(jars / "*"),
                   *map(str, sources)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            log.warning("spark_pubsub: building the JVM scan failed (%s); read_topic uses its DataFrame route",
                        (done.stderr or done.stdout).strip().splitlines()[:1])
            return None
        staged = Path(work) / jar.name
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as out:
            for cls in sorted(classes.rglob("*.class")):
                out.write(cls, cls.relative_to(classes).as_posix())
        os.replace(staged, jar)  # atomic: concurrent builders (test workers) each publish a whole jar
    return jar


def load(spark: SparkSession) -> bool:
    """Make ``PROVIDER`` loadable by this session; False (logged once per session) where it cannot be."""
    connect = type(spark).__module__.startswith("pyspark.sql.connect")
    with _lock:
        known = _loaded.get(id(spark))
    if known is None or known[0] is not spark:
        ok = _add_jar(spark, connect)  # (sets this thread's class loader on a classic session)
        with _lock:
            _loaded[id(spark)] = (spark, ok)
        return ok
    if known[1] and not connect:
        _jar_loader_for_this_thread(spark)  # a read from another Python thread: another JVM thread
    return known[1]


def _add_jar(spark: SparkSession, connect: bool) -> bool:
    jar = jar_path()
    if jar is None:
        return False
    try:
        if connect:
            spark.addArtifacts(str(jar))
        else:
            spark.sql(f"ADD JAR '{jar}'")
            _jar_loader_for_this_thread(spark)
        # resolving the schema loads the class where the session resolves data sources (on Spark
        # Connect, on the server): a server that cannot load it fails here, not in the user's query
        _ = spark.read.format(PROVIDER).load().schema
    except Exception as exc:
        # py4j's first line only names the JVM call; the Java exception follows it
        lines = [line.strip() for line in str(exc).splitlines()
                 if line.strip() and not line.startswith("An error occurred while calling")]
        log.warning("spark_pubsub: this session cannot load the JVM scan (%s); read_topic uses its DataFrame route",
                    lines[0][:300] if lines else type(exc).__name__)
        return False
    return True


def _jar_loader_for_this_thread(spark: SparkSession) -> None:
    """``ADD JAR`` makes the jar's class loader the context class loader of the calling JVM thread
    only, and py4j runs each Python thread on a JVM thread of its own: set it for this one."""
    jvm: Any = spark._jvm
    loader = spark._jsparkSession.sharedState().jarClassLoader()
    jvm.java.lang.Thread.currentThread().setContextClassLoader(loader)


def plan_text(base: str, plans: list[TopicRead]) -> str:
    """The plan option: per planned file ``F path size rowLo rowHi baseOffset ledgerId partition topic
    internalTopic maxMessageBytes`` (strings percent-encoded; ``-1``: no footer check), then its layout
    runs ``R lo hi start entryBase size``."""
    lines = []
    for plan in plans:
        runs = offset_runs(plan.segments)
        topic = _quote(user_topic(plan.topic, plan.partition))
        limit = -1 if plan.max_message_bytes is None else plan.max_message_bytes
        first = 0  # runs and files both ascend in offsets: each file's runs start where the last one's ended
        for read in plan.segments:
            seg = read.segment
            path = _quote(f"{base}/{plan.topic_path}/{seg.path}")
            lines.append(f"F {path} {seg.size_bytes} {read.row_lo} {read.row_hi} {seg.base_offset} {plan.ledger_id} "
                         f"{plan.partition} {topic} {_quote(plan.topic)} {limit}")
            lo, hi = seg.base_offset + read.row_lo, seg.base_offset + read.row_hi
            while runs[first].hi <= lo:
                first += 1
            last = first
            while last < len(runs) and runs[last].lo < hi:
                r = runs[last]
                lines.append(f"R {r.lo} {r.hi} {r.start} {r.entry_base} {r.size}")
                last += 1
            first = max(first, last - 1)
    return "\n".join(lines)


def _quote(text: str) -> str:
    return urllib.parse.quote(text, safe="/:")


def scan_segments(spark: SparkSession, base: str, plans: list[TopicRead], *, fail_on_data_loss: bool) -> DataFrame:
    """The planned segment rows of ``plans`` in ``SOURCE_SCHEMA``, by the JVM scan (``load`` first)."""
    return (spark.read.format(PROVIDER).option("plan", plan_text(base, plans))
            .option("ignoreMissingFiles", "false" if fail_on_data_loss else "true").load())


__all__ = ["CACHE_ENV", "ENABLED_CONF", "PROVIDER", "enabled", "jar_path", "load", "plan_text", "scan_segments",
           "spark_jars"]
