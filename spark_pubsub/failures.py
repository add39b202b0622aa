"""Negative acknowledgment the Spark way: helpers to call inside ``foreachBatch``.

A streaming pipeline that finds rows it cannot process sends them to the subscription's retry letter
topic (with a delay and ``RECONSUMETIMES`` bookkeeping) or, past the limit, to its dead letter
topic.  The query reads the retry topic back when it was started with ``retryEnable=true``, as a
Pulsar consumer with retry enabled does.  The rows keep the source's columns, so a failed subset of
the micro-batch DataFrame can be passed as it is.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from broker_core.broker.broker import Broker
from broker_core.client.dead_letters import DEFAULT_MAX_RECONSUME_TIMES
from broker_core.client.retry_letters import RetryOutcome, retry_or_dead_letter
from broker_core.errors import InvalidConfiguration


def _failed_table(df: Any) -> pa.Table:
    needed = {"value", "topic", "messageId"}
    missing = needed - set(df.columns)
    if missing:
        raise InvalidConfiguration(
            f"the DataFrame lacks column(s) {sorted(missing)}; pass rows as read from format('pubsub')"
        )
    columns = [c for c in ("value", "key", "orderingKey", "properties", "topic", "messageId") if c in df.columns]
    table = df.select(*columns).toArrow()
    rename = {"orderingKey": "ordering_key", "messageId": "message_id"}
    return table.rename_columns([rename.get(c, c) for c in table.column_names])


def reconsume_later(
    df: Any,
    *,
    service_url: str,
    subscription: str,
    delay_ms: int,
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    properties: dict[str, str] | None = None,
) -> RetryOutcome:
    """Send the rows of ``df`` to ``<topic>-<subscription>-RETRY`` after ``delay_ms`` (or to the DLQ).

    Call it inside ``foreachBatch`` with the rows that failed; the query acknowledges the originals
    when the batch commits, like ``Consumer.reconsume_later`` does.
    """
    if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
        raise InvalidConfiguration(f"delay_ms must be an int >= 0, got {delay_ms!r}")
    if not isinstance(max_reconsume_times, int) or max_reconsume_times < 1:
        raise InvalidConfiguration(f"max_reconsume_times must be an int >= 1, got {max_reconsume_times!r}")
    table = _failed_table(df)
    return retry_or_dead_letter(
        Broker.for_url(service_url), table, subscription=subscription, delay_ms=delay_ms,
        max_reconsume_times=max_reconsume_times, extra_properties=properties, now_ms=int(time.time() * 1000),
    )


def dead_letter(df: Any, *, service_url: str, subscription: str) -> RetryOutcome:
    """Send the rows of ``df`` straight to ``<topic>-<subscription>-DLQ``."""
    table = _failed_table(df)
    return retry_or_dead_letter(
        Broker.for_url(service_url), table, subscription=subscription, delay_ms=0, max_reconsume_times=0,
        now_ms=int(time.time() * 1000),
    ) if table.num_rows else RetryOutcome(0, 0)


__all__ = ["dead_letter", "reconsume_later"]
