"""Producer and transaction APIs: the exchanges the transaction audit folds.

Where the transactional id lives, per API and version:
- Produce: `transactional_id` (v3+; absent, hence None, in v0-2).
- InitProducerId, AddOffsetsToTxn, EndTxn, TxnOffsetCommit: `transactional_id` at the top level.
- AddPartitionsToTxn v0-3: `v3_and_below_transactional_id` (one transaction per request);
  v4+: `transactions[].transactional_id` (a batch, sent broker to coordinator, maybe VerifyOnly).
- WriteTxnMarkers carries no transactional id: markers are keyed by producer id and epoch.
"""

from ksniff.decode.apis.common import array, broker, current_leader, partition_errors, topics, topics_type
from ksniff.decode.schema import API, ARRAY, BOOL, INT8, INT16, INT32, INT64, RECORDS, STRING, F, Field

PRODUCE = API(
    0,
    "Produce",
    valid="0-13",
    flexible="9+",
    notes="Kafka 4.0 removed v0-2 from its specs (KIP-896); their layout (no transactional id, message "
    "sets of magic 0/1) is kept here from the earlier specs because old clients still send them. "
    "From v13 topics are named by topic id (resolve through Metadata). acks=0 gets no response.",
    request=[
        F("transactional_id", STRING, "3+", nullable="3+"),
        F("acks", INT16, "0+"),
        F("timeout_ms", INT32, "0+"),
        topics(
            [F("index", INT32, "0+"), F("records", RECORDS, "0+", nullable="0+")],
            field="topic_data",
            names="0-12",
            topic_id="13+",
            key="partition_data",
        ),
    ],
    response=[
        topics(
            [
                F("index", INT32, "0+"),
                F("error_code", INT16, "0+"),
                F("base_offset", INT64, "0+"),
                F("log_append_time_ms", INT64, "2+", default=-1),
                F("log_start_offset", INT64, "5+", default=-1),
                array(
                    "record_errors",
                    [
                        F("batch_index", INT32, "8+"),
                        F("batch_index_error_message", STRING, "8+", nullable="8+"),
                    ],
                    "8+",
                ),
                F("error_message", STRING, "8+", nullable="8+"),
                current_leader("10+", tag=0),
            ],
            field="responses",
            names="0-12",
            topic_id="13+",
            key="partition_responses",
        ),
        F("throttle_time_ms", INT32, "1+", default=0),
        F("node_endpoints", ARRAY(broker()), "10+", tag=0),
    ],
)

INIT_PRODUCER_ID = API(
    22,
    "InitProducerId",
    valid="0-6",
    flexible="2+",
    notes="v3+ lets a producer bump its own epoch (producer_id/producer_epoch of the current one, -1 "
    "when new). v6 (KIP-939, two-phase commit) is marked unstable in Kafka's spec.",
    request=[
        F("transactional_id", STRING, "0+", nullable="0+"),
        F("transaction_timeout_ms", INT32, "0+"),
        F("producer_id", INT64, "3+", default=-1),
        F("producer_epoch", INT16, "3+", default=-1),
        F("enable2_pc", BOOL, "6+", default=False),
        F("keep_prepared_txn", BOOL, "6+", default=False),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
        F("producer_id", INT64, "0+", default=-1),
        F("producer_epoch", INT16, "0+"),
        F("ongoing_txn_producer_id", INT64, "6+", default=-1),
        F("ongoing_txn_producer_epoch", INT16, "6+", default=-1),
    ],
)


def _producer(versions: str, prefix: str = "") -> list[Field]:
    """A transactional producer's id, producer id and epoch: the key of every transactional request."""
    return [
        F(prefix + "transactional_id", STRING, versions),
        F(prefix + "producer_id", INT64, versions),
        F(prefix + "producer_epoch", INT16, versions),
    ]


_TXN_TOPICS = topics_type(INT32)
_TXN_TOPIC_RESULTS = topics_type(partition_errors(error="partition_error_code"), key="results_by_partition")

ADD_PARTITIONS_TO_TXN = API(
    24,
    "AddPartitionsToTxn",
    valid="0-5",
    flexible="3+",
    notes="v0-3: sent by producers, one transaction per request, fields prefixed v3_and_below_. v4+: "
    "broker to coordinator only, a batch of transactions and a top-level error_code: with "
    "verify_only=True a partition leader checks that a transactional Produce's partition is in the "
    "transaction (KIP-890 part 1); with transaction.version 2 (part 2) producers stop sending this "
    "API and the leader adds the partition itself (verify_only=False).",
    request=[
        array(
            "transactions",
            [*_producer("4+"), F("verify_only", BOOL, "4+", default=False), F("topics", _TXN_TOPICS, "4+")],
            "4+",
        ),
        *_producer("0-3", prefix="v3_and_below_"),
        F("v3_and_below_topics", _TXN_TOPICS, "0-3"),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "4+"),
        array(
            "results_by_transaction",
            [F("transactional_id", STRING, "4+"), F("topic_results", _TXN_TOPIC_RESULTS, "4+")],
            "4+",
        ),
        F("results_by_topic_v3_and_below", _TXN_TOPIC_RESULTS, "0-3"),
    ],
)

ADD_OFFSETS_TO_TXN = API(
    25,
    "AddOffsetsToTxn",
    valid="0-4",
    flexible="3+",
    request=[*_producer("0+"), F("group_id", STRING, "0+")],
    response=[F("throttle_time_ms", INT32, "0+"), F("error_code", INT16, "0+")],
)

END_TXN = API(
    26,
    "EndTxn",
    valid="0-5",
    flexible="3+",
    notes="v5 (transaction.version 2, KIP-890) answers with the producer id and epoch to use next: the "
    "coordinator bumps the epoch on every commit or abort.",
    request=[*_producer("0+"), F("committed", BOOL, "0+")],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
        F("producer_id", INT64, "5+", default=-1),
        F("producer_epoch", INT16, "5+", default=-1),
    ],
)

WRITE_TXN_MARKERS = API(
    27,
    "WriteTxnMarkers",
    valid="0-2",
    flexible="1+",
    notes="Coordinator to partition leaders. Kafka 4.0 removed v0 (KIP-896); its layout equals v1 "
    "without flexible encoding. transaction_result: True commits, False aborts.",
    request=[
        array(
            "markers",
            [
                F("producer_id", INT64, "0+"),
                F("producer_epoch", INT16, "0+"),
                F("transaction_result", BOOL, "0+"),
                topics(INT32, key="partition_indexes"),
                F("coordinator_epoch", INT32, "0+"),
                F("transaction_version", INT8, "2+", default=0),
            ],
            "0+",
        ),
    ],
    response=[array("markers", [F("producer_id", INT64, "0+"), topics(partition_errors())], "0+")],
)

TXN_OFFSET_COMMIT = API(
    28,
    "TxnOffsetCommit",
    valid="0-5",
    flexible="3+",
    notes="v5 (transaction.version 2) is sent without a prior AddOffsetsToTxn: the coordinator adds the "
    "group's offsets partition itself.",
    request=[
        F("transactional_id", STRING, "0+"),
        F("group_id", STRING, "0+"),
        F("producer_id", INT64, "0+"),
        F("producer_epoch", INT16, "0+"),
        F("generation_id", INT32, "3+", default=-1),
        F("member_id", STRING, "3+", default=""),
        F("group_instance_id", STRING, "3+", nullable="3+"),
        topics(
            [
                F("partition_index", INT32, "0+"),
                F("committed_offset", INT64, "0+"),
                F("committed_leader_epoch", INT32, "2+", default=-1),
                F("committed_metadata", STRING, "0+", nullable="0+"),
            ]
        ),
    ],
    response=[F("throttle_time_ms", INT32, "0+"), topics(partition_errors())],
)

DESCRIBE_PRODUCERS = API(
    61,
    "DescribeProducers",
    valid="0",
    flexible="0+",
    request=[topics(INT32, key="partition_indexes")],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        topics(
            [
                *partition_errors(),
                F("error_message", STRING, "0+", nullable="0+"),
                array(
                    "active_producers",
                    [
                        F("producer_id", INT64, "0+"),
                        F("producer_epoch", INT32, "0+"),
                        F("last_sequence", INT32, "0+", default=-1),
                        F("last_timestamp", INT64, "0+", default=-1),
                        F("coordinator_epoch", INT32, "0+"),
                        F("current_txn_start_offset", INT64, "0+", default=-1),
                    ],
                    "0+",
                ),
            ]
        ),
    ],
)

DESCRIBE_TRANSACTIONS = API(
    65,
    "DescribeTransactions",
    valid="0",
    flexible="0+",
    request=[F("transactional_ids", ARRAY(STRING), "0+")],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        array(
            "transaction_states",
            [
                F("error_code", INT16, "0+"),
                F("transactional_id", STRING, "0+"),
                F("transaction_state", STRING, "0+"),
                F("transaction_timeout_ms", INT32, "0+"),
                F("transaction_start_time_ms", INT64, "0+"),
                F("producer_id", INT64, "0+"),
                F("producer_epoch", INT16, "0+"),
                topics(INT32, name="topic"),
            ],
            "0+",
        ),
    ],
)

LIST_TRANSACTIONS = API(
    66,
    "ListTransactions",
    valid="0-2",
    flexible="0+",
    request=[
        F("state_filters", ARRAY(STRING), "0+"),
        F("producer_id_filters", ARRAY(INT64), "0+"),
        F("duration_filter", INT64, "1+", default=-1),
        F("transactional_id_pattern", STRING, "2+", nullable="2+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
        F("unknown_state_filters", ARRAY(STRING), "0+"),
        array(
            "transaction_states",
            [
                F("transactional_id", STRING, "0+"),
                F("producer_id", INT64, "0+"),
                F("transaction_state", STRING, "0+"),
            ],
            "0+",
        ),
    ],
)
