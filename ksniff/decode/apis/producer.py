"""Producer and transaction APIs: the exchanges the transaction audit folds.

Where the transactional id lives, per API and version:
- Produce: `transactional_id` (v3+; absent, hence None, in v0-2).
- InitProducerId, AddOffsetsToTxn, EndTxn, TxnOffsetCommit: `transactional_id` at the top level.
- AddPartitionsToTxn v0-3: `v3_and_below_transactional_id` (one transaction per request);
  v4+: `transactions[].transactional_id` (a batch, sent broker to coordinator, maybe VerifyOnly).
- WriteTxnMarkers carries no transactional id: markers are keyed by producer id and epoch.
"""

from ksniff.decode.schema import API, ARRAY, BOOL, INT8, INT16, INT32, INT64, RECORDS, STRING, STRUCT, UUID, F

_NODE_ENDPOINTS = ARRAY(
    [
        F("node_id", INT32, "0+"),
        F("host", STRING, "0+"),
        F("port", INT32, "0+"),
        F("rack", STRING, "0+", nullable="0+"),
    ]
)

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
        F(
            "topic_data",
            ARRAY(
                [
                    F("name", STRING, "0-12"),
                    F("topic_id", UUID, "13+"),
                    F(
                        "partition_data",
                        ARRAY(
                            [
                                F("index", INT32, "0+"),
                                F("records", RECORDS, "0+", nullable="0+"),
                            ]
                        ),
                        "0+",
                    ),
                ]
            ),
            "0+",
        ),
    ],
    response=[
        F(
            "responses",
            ARRAY(
                [
                    F("name", STRING, "0-12"),
                    F("topic_id", UUID, "13+"),
                    F(
                        "partition_responses",
                        ARRAY(
                            [
                                F("index", INT32, "0+"),
                                F("error_code", INT16, "0+"),
                                F("base_offset", INT64, "0+"),
                                F("log_append_time_ms", INT64, "2+", default=-1),
                                F("log_start_offset", INT64, "5+", default=-1),
                                F(
                                    "record_errors",
                                    ARRAY(
                                        [
                                            F("batch_index", INT32, "8+"),
                                            F("batch_index_error_message", STRING, "8+", nullable="8+"),
                                        ]
                                    ),
                                    "8+",
                                ),
                                F("error_message", STRING, "8+", nullable="8+"),
                                F(
                                    "current_leader",
                                    STRUCT(
                                        [
                                            F("leader_id", INT32, "10+", default=-1),
                                            F("leader_epoch", INT32, "10+", default=-1),
                                        ]
                                    ),
                                    "10+",
                                    tag=0,
                                ),
                            ]
                        ),
                        "0+",
                    ),
                ]
            ),
            "0+",
        ),
        F("throttle_time_ms", INT32, "1+", default=0),
        F("node_endpoints", _NODE_ENDPOINTS, "10+", tag=0),
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

_TXN_TOPICS = ARRAY(
    [
        F("name", STRING, "0+"),
        F("partitions", ARRAY(INT32), "0+"),
    ]
)

_TXN_TOPIC_RESULTS = ARRAY(
    [
        F("name", STRING, "0+"),
        F(
            "results_by_partition",
            ARRAY(
                [
                    F("partition_index", INT32, "0+"),
                    F("partition_error_code", INT16, "0+"),
                ]
            ),
            "0+",
        ),
    ]
)

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
        F(
            "transactions",
            ARRAY(
                [
                    F("transactional_id", STRING, "4+"),
                    F("producer_id", INT64, "4+"),
                    F("producer_epoch", INT16, "4+"),
                    F("verify_only", BOOL, "4+", default=False),
                    F("topics", _TXN_TOPICS, "4+"),
                ]
            ),
            "4+",
        ),
        F("v3_and_below_transactional_id", STRING, "0-3"),
        F("v3_and_below_producer_id", INT64, "0-3"),
        F("v3_and_below_producer_epoch", INT16, "0-3"),
        F("v3_and_below_topics", _TXN_TOPICS, "0-3"),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "4+"),
        F(
            "results_by_transaction",
            ARRAY(
                [
                    F("transactional_id", STRING, "4+"),
                    F("topic_results", _TXN_TOPIC_RESULTS, "4+"),
                ]
            ),
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
    request=[
        F("transactional_id", STRING, "0+"),
        F("producer_id", INT64, "0+"),
        F("producer_epoch", INT16, "0+"),
        F("group_id", STRING, "0+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
    ],
)

END_TXN = API(
    26,
    "EndTxn",
    valid="0-5",
    flexible="3+",
    notes="v5 (transaction.version 2, KIP-890) answers with the producer id and epoch to use next: the "
    "coordinator bumps the epoch on every commit or abort.",
    request=[
        F("transactional_id", STRING, "0+"),
        F("producer_id", INT64, "0+"),
        F("producer_epoch", INT16, "0+"),
        F("committed", BOOL, "0+"),
    ],
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
        F(
            "markers",
            ARRAY(
                [
                    F("producer_id", INT64, "0+"),
                    F("producer_epoch", INT16, "0+"),
                    F("transaction_result", BOOL, "0+"),
                    F(
                        "topics",
                        ARRAY(
                            [
                                F("name", STRING, "0+"),
                                F("partition_indexes", ARRAY(INT32), "0+"),
                            ]
                        ),
                        "0+",
                    ),
                    F("coordinator_epoch", INT32, "0+"),
                    F("transaction_version", INT8, "2+", default=0),
                ]
            ),
            "0+",
        ),
    ],
    response=[
        F(
            "markers",
            ARRAY(
                [
                    F("producer_id", INT64, "0+"),
                    F(
                        "topics",
                        ARRAY(
                            [
                                F("name", STRING, "0+"),
                                F(
                                    "partitions",
                                    ARRAY(
                                        [
                                            F("partition_index", INT32, "0+"),
                                            F("error_code", INT16, "0+"),
                                        ]
                                    ),
                                    "0+",
                                ),
                            ]
                        ),
                        "0+",
                    ),
                ]
            ),
            "0+",
        ),
    ],
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
        F(
            "topics",
            ARRAY(
                [
                    F("name", STRING, "0+"),
                    F(
                        "partitions",
                        ARRAY(
                            [
                                F("partition_index", INT32, "0+"),
                                F("committed_offset", INT64, "0+"),
                                F("committed_leader_epoch", INT32, "2+", default=-1),
                                F("committed_metadata", STRING, "0+", nullable="0+"),
                            ]
                        ),
                        "0+",
                    ),
                ]
            ),
            "0+",
        ),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F(
            "topics",
            ARRAY(
                [
                    F("name", STRING, "0+"),
                    F(
                        "partitions",
                        ARRAY(
                            [
                                F("partition_index", INT32, "0+"),
                                F("error_code", INT16, "0+"),
                            ]
                        ),
                        "0+",
                    ),
                ]
            ),
            "0+",
        ),
    ],
)

DESCRIBE_PRODUCERS = API(
    61,
    "DescribeProducers",
    valid="0",
    flexible="0+",
    request=[
        F(
            "topics",
            ARRAY(
                [
                    F("name", STRING, "0+"),
                    F("partition_indexes", ARRAY(INT32), "0+"),
                ]
            ),
            "0+",
        ),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F(
            "topics",
            ARRAY(
                [
                    F("name", STRING, "0+"),
                    F(
                        "partitions",
                        ARRAY(
                            [
                                F("partition_index", INT32, "0+"),
                                F("error_code", INT16, "0+"),
                                F("error_message", STRING, "0+", nullable="0+"),
                                F(
                                    "active_producers",
                                    ARRAY(
                                        [
                                            F("producer_id", INT64, "0+"),
                                            F("producer_epoch", INT32, "0+"),
                                            F("last_sequence", INT32, "0+", default=-1),
                                            F("last_timestamp", INT64, "0+", default=-1),
                                            F("coordinator_epoch", INT32, "0+"),
                                            F("current_txn_start_offset", INT64, "0+", default=-1),
                                        ]
                                    ),
                                    "0+",
                                ),
                            ]
                        ),
                        "0+",
                    ),
                ]
            ),
            "0+",
        ),
    ],
)

DESCRIBE_TRANSACTIONS = API(
    65,
    "DescribeTransactions",
    valid="0",
    flexible="0+",
    request=[
        F("transactional_ids", ARRAY(STRING), "0+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F(
            "transaction_states",
            ARRAY(
                [
                    F("error_code", INT16, "0+"),
                    F("transactional_id", STRING, "0+"),
                    F("transaction_state", STRING, "0+"),
                    F("transaction_timeout_ms", INT32, "0+"),
                    F("transaction_start_time_ms", INT64, "0+"),
                    F("producer_id", INT64, "0+"),
                    F("producer_epoch", INT16, "0+"),
                    F(
                        "topics",
                        ARRAY(
                            [
                                F("topic", STRING, "0+"),
                                F("partitions", ARRAY(INT32), "0+"),
                            ]
                        ),
                        "0+",
                    ),
                ]
            ),
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
        F(
            "transaction_states",
            ARRAY(
                [
                    F("transactional_id", STRING, "0+"),
                    F("producer_id", INT64, "0+"),
                    F("transaction_state", STRING, "0+"),
                ]
            ),
            "0+",
        ),
    ],
)
