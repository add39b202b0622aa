"""spark-pubsub's core: Pulsar's messaging model over partitioned Parquet logs, with no broker.

``import broker_core`` never imports pyspark (a test proves it).
"""

from __future__ import annotations

from broker_core import schema  # ``broker_core.schema`` as ``pulsar.schema``
from broker_core.admin import Admin
from broker_core.backoff import MultiplierRedeliveryBackoff
from broker_core.client import BatchingType, Client, Producer, Reader
from broker_core.client.consumer import Consumer
from broker_core.client.policies import (
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerKeySharedPolicy,
    InitialPosition,
    RegexSubscriptionMode,
    SubscriptionMode,
)
from broker_core.client.table_view import TableView
from broker_core.config import BrokerConfig, load_broker_config
from broker_core.cursor import ConsumerType
from broker_core.errors import (
    AlreadyClosed,
    AlreadyExists,
    BrokerPersistenceError,
    CommitConflict,
    ConsumerBusy,
    CumulativeAcknowledgementNotAllowedError,
    DataLoss,
    IncompatibleSchema,
    InvalidConfiguration,
    InvalidMessage,
    InvalidTopicName,
    InvalidUrl,
    LogCorrupted,
    MessageTooBig,
    NamespaceNotFound,
    NotAllowedError,
    NotFound,
    OperationNotSupported,
    PayloadTypeError,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ProducerBusy,
    ProducerFenced,
    ProducerQueueIsFull,
    PulsarException,
    Result,
    SchemaDefinitionError,
    SchemaNotFound,
    SubscriptionNotFound,
    TenantNotFound,
    Timeout,
    TopicDeleted,
    TopicNotFound,
    result_for,
)
from broker_core.hashing import HashingScheme
from broker_core.key_shared import KeySharedMode
from broker_core.message import BytesSchema, Message, Schema, StringSchema
from broker_core.message_id import MessageId
from broker_core.naming import TopicName
from broker_core.producer_registry import ProducerAccessMode
from broker_core.routing import PartitionsRoutingMode
from broker_core.segment import CompressionType

__all__ = [
    "Admin",
    "AlreadyClosed",
    "AlreadyExists",
    "BatchingType",
    "BrokerConfig",
    "BrokerPersistenceError",
    "BytesSchema",
    "Client",
    "CommitConflict",
    "CompressionType",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerBusy",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "CumulativeAcknowledgementNotAllowedError",
    "DataLoss",
    "HashingScheme",
    "IncompatibleSchema",
    "InitialPosition",
    "InvalidConfiguration",
    "InvalidMessage",
    "InvalidTopicName",
    "InvalidUrl",
    "KeySharedMode",
    "LogCorrupted",
    "Message",
    "MessageId",
    "MessageTooBig",
    "MultiplierRedeliveryBackoff",
    "NamespaceNotFound",
    "NotAllowedError",
    "NotFound",
    "OperationNotSupported",
    "PartitionsRoutingMode",
    "PayloadTypeError",
    "Producer",
    "ProducerAccessMode",
    "ProducerBlockedQuotaExceededError",
    "ProducerBlockedQuotaExceededException",
    "ProducerBusy",
    "ProducerFenced",
    "ProducerQueueIsFull",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "Schema",
    "SchemaDefinitionError",
    "SchemaNotFound",
    "StringSchema",
    "SubscriptionMode",
    "SubscriptionNotFound",
    "TableView",
    "TenantNotFound",
    "Timeout",
    "TopicDeleted",
    "TopicName",
    "TopicNotFound",
    "load_broker_config",
    "result_for",
    "schema",
]
