"""Consumer and group APIs: fetching, offsets, coordinators and the classic group protocol.

Fetch responses carry the aborted transactions a read_committed consumer skips; TxnOffsetCommit's
non-transactional sibling OffsetCommit and FindCoordinator (which also finds transaction coordinators,
key_type 1) matter to the transaction audit too.
"""

from ksniff.decode.apis.common import array, broker, current_leader, endpoint, partition_errors, topics
from ksniff.decode.schema import (
    API,
    ARRAY,
    BOOL,
    BYTES,
    INT8,
    INT16,
    INT32,
    INT64,
    RECORDS,
    STRING,
    STRUCT,
    UUID,
    F,
    Field,
)


def _epoch_and_offset(versions: str, *, epoch_first: bool) -> tuple[Field, ...]:
    """A leader epoch and an offset, the two halves of a log position."""
    epoch, offset = F("epoch", INT32, versions, default=-1), F("end_offset", INT64, versions, default=-1)
    return STRUCT([epoch, offset] if epoch_first else [offset, epoch])


FETCH = API(
    1,
    "Fetch",
    valid="0-18",
    flexible="12+",
    notes="Kafka 4.0 removed v0-3 from its specs (KIP-896); their layout is kept here from the earlier "
    "specs. Topics are named by topic id from v13. replica_id moved into the tagged replica_state "
    "in v15.",
    request=[
        F("cluster_id", STRING, "12+", nullable="12+", tag=0),
        F("replica_id", INT32, "0-14", default=-1),
        F(
            "replica_state",
            STRUCT([F("replica_id", INT32, "15+", default=-1), F("replica_epoch", INT64, "15+", default=-1)]),
            "15+",
            tag=1,
        ),
        F("max_wait_ms", INT32, "0+"),
        F("min_bytes", INT32, "0+"),
        F("max_bytes", INT32, "3+", default=0x7FFFFFFF),
        F("isolation_level", INT8, "4+", default=0),
        F("session_id", INT32, "7+", default=0),
        F("session_epoch", INT32, "7+", default=-1),
        topics(
            [
                F("partition", INT32, "0+"),
                F("current_leader_epoch", INT32, "9+", default=-1),
                F("fetch_offset", INT64, "0+"),
                F("last_fetched_epoch", INT32, "12+", default=-1),
                F("log_start_offset", INT64, "5+", default=-1),
                F("partition_max_bytes", INT32, "0+"),
                F("replica_directory_id", UUID, "17+", tag=0),
                F("high_watermark", INT64, "18+", tag=1, default=0x7FFFFFFFFFFFFFFF),
            ],
            name="topic",
            names="0-12",
            topic_id="13+",
        ),
        topics(INT32, "7+", field="forgotten_topics_data", name="topic", names="7-12", topic_id="13+"),
        F("rack_id", STRING, "11+", default=""),
    ],
    response=[
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "7+"),
        F("session_id", INT32, "7+", default=0),
        topics(
            [
                F("partition_index", INT32, "0+"),
                F("error_code", INT16, "0+"),
                F("high_watermark", INT64, "0+"),
                F("last_stable_offset", INT64, "4+", default=-1),
                F("log_start_offset", INT64, "5+", default=-1),
                F("diverging_epoch", _epoch_and_offset("12+", epoch_first=True), "12+", tag=0),
                current_leader("12+", tag=1),
                F("snapshot_id", _epoch_and_offset("12+", epoch_first=False), "12+", tag=2),
                array(
                    "aborted_transactions",
                    [F("producer_id", INT64, "4+"), F("first_offset", INT64, "4+")],
                    "4+",
                    nullable="4+",
                ),
                F("preferred_read_replica", INT32, "11+", default=-1),
                F("records", RECORDS, "0+", nullable="0+"),
            ],
            field="responses",
            name="topic",
            names="0-12",
            topic_id="13+",
        ),
        array("node_endpoints", broker("16+"), "16+", tag=0),
    ],
)

LIST_OFFSETS = API(
    2,
    "ListOffsets",
    valid="0-11",
    flexible="6+",
    notes="Kafka 4.0 removed v0 (KIP-896); kept here from the earlier specs: v0 asks for up to "
    "max_num_offsets offsets and gets old_style_offsets back instead of timestamp/offset.",
    request=[
        F("replica_id", INT32, "0+"),
        F("isolation_level", INT8, "2+"),
        topics(
            [
                F("partition_index", INT32, "0+"),
                F("current_leader_epoch", INT32, "4+", default=-1),
                F("timestamp", INT64, "0+"),
                F("max_num_offsets", INT32, "0", default=1),
            ]
        ),
        F("timeout_ms", INT32, "10+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "2+"),
        topics(
            [
                *partition_errors(),
                F("old_style_offsets", ARRAY(INT64), "0"),
                F("timestamp", INT64, "1+", default=-1),
                F("offset", INT64, "1+", default=-1),
                F("leader_epoch", INT32, "4+", default=-1),
            ]
        ),
    ],
)

OFFSET_COMMIT = API(
    8,
    "OffsetCommit",
    valid="0-10",
    flexible="8+",
    notes="Kafka 4.0 removed v0-1 (KIP-896); kept here from the earlier specs (v1 alone carries a "
    "commit_timestamp per partition, v2-4 a retention_time_ms). Topics are named by topic id from "
    "v10.",
    request=[
        F("group_id", STRING, "0+"),
        F("generation_id_or_member_epoch", INT32, "1+", default=-1),
        F("member_id", STRING, "1+"),
        F("group_instance_id", STRING, "7+", nullable="7+"),
        F("retention_time_ms", INT64, "2-4", default=-1),
        topics(
            [
                F("partition_index", INT32, "0+"),
                F("committed_offset", INT64, "0+"),
                F("committed_leader_epoch", INT32, "6+", default=-1),
                F("commit_timestamp", INT64, "1", default=-1),
                F("committed_metadata", STRING, "0+", nullable="0+"),
            ],
            names="0-9",
            topic_id="10+",
        ),
    ],
    response=[
        F("throttle_time_ms", INT32, "3+"),
        topics(partition_errors(), names="0-9", topic_id="10+"),
    ],
)


def _committed(versions: str, epoch: str) -> list[Field]:
    """A partition's committed offset as OffsetFetch answers it (its leader epoch from `epoch`)."""
    return [
        F("partition_index", INT32, versions),
        F("committed_offset", INT64, versions),
        F("committed_leader_epoch", INT32, epoch, default=-1),
        F("metadata", STRING, versions, nullable=versions),
        F("error_code", INT16, versions),
    ]


OFFSET_FETCH = API(
    9,
    "OffsetFetch",
    valid="0-10",
    flexible="6+",
    notes="Kafka 4.0 removed v0 (KIP-896); its layout equals v1. v8+ batches several groups; topics are "
    "named by topic id from v10.",
    request=[
        F("group_id", STRING, "0-7"),
        topics(INT32, "0-7", key="partition_indexes", nullable="2-7"),
        array(
            "groups",
            [
                F("group_id", STRING, "8+"),
                F("member_id", STRING, "9+", nullable="9+"),
                F("member_epoch", INT32, "9+", default=-1),
                topics(INT32, "8+", names="8-9", topic_id="10+", key="partition_indexes", nullable="8+"),
            ],
            "8+",
        ),
        F("require_stable", BOOL, "7+", default=False),
    ],
    response=[
        F("throttle_time_ms", INT32, "3+"),
        topics(_committed("0-7", "5-7"), "0-7"),
        F("error_code", INT16, "2-7", default=0),
        array(
            "groups",
            [
                F("group_id", STRING, "8+"),
                topics(_committed("8+", "8+"), "8+", names="8-9", topic_id="10+"),
                F("error_code", INT16, "8+", default=0),
            ],
            "8+",
        ),
    ],
)

FIND_COORDINATOR = API(
    10,
    "FindCoordinator",
    valid="0-6",
    flexible="3+",
    notes="key_type 0 = group, 1 = transaction, 2 = share. v4+ batches keys (coordinator_keys) and "
    "answers per key in coordinators[]; v0-3 have a single key and a single answer.",
    request=[
        F("key", STRING, "0-3"),
        F("key_type", INT8, "1+", default=0),
        F("coordinator_keys", ARRAY(STRING), "4+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "1+"),
        F("error_code", INT16, "0-3"),
        F("error_message", STRING, "1-3", nullable="1-3"),
        *endpoint("0-3"),
        array(
            "coordinators",
            [
                F("key", STRING, "4+"),
                *endpoint("4+"),
                F("error_code", INT16, "4+"),
                F("error_message", STRING, "4+", nullable="4+"),
            ],
            "4+",
        ),
    ],
)

JOIN_GROUP = API(
    11,
    "JoinGroup",
    valid="0-9",
    flexible="6+",
    request=[
        F("group_id", STRING, "0+"),
        F("session_timeout_ms", INT32, "0+"),
        F("rebalance_timeout_ms", INT32, "1+", default=-1),
        F("member_id", STRING, "0+"),
        F("group_instance_id", STRING, "5+", nullable="5+"),
        F("protocol_type", STRING, "0+"),
        array("protocols", [F("name", STRING, "0+"), F("metadata", BYTES, "0+")], "0+"),
        F("reason", STRING, "8+", nullable="8+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "2+"),
        F("error_code", INT16, "0+"),
        F("generation_id", INT32, "0+", default=-1),
        F("protocol_type", STRING, "7+", nullable="7+"),
        F("protocol_name", STRING, "0+", nullable="7+"),
        F("leader", STRING, "0+"),
        F("skip_assignment", BOOL, "9+", default=False),
        F("member_id", STRING, "0+"),
        array(
            "members",
            [
                F("member_id", STRING, "0+"),
                F("group_instance_id", STRING, "5+", nullable="5+"),
                F("metadata", BYTES, "0+"),
            ],
            "0+",
        ),
    ],
)

# Heartbeat and SyncGroup name their sender alike; so do their answers open alike.
_GROUP_MEMBER = [
    F("group_id", STRING, "0+"),
    F("generation_id", INT32, "0+"),
    F("member_id", STRING, "0+"),
    F("group_instance_id", STRING, "3+", nullable="3+"),
]
_THROTTLE_AND_ERROR = [F("throttle_time_ms", INT32, "1+"), F("error_code", INT16, "0+")]

HEARTBEAT = API(
    12, "Heartbeat", valid="0-4", flexible="4+", request=_GROUP_MEMBER, response=_THROTTLE_AND_ERROR
)

LEAVE_GROUP = API(
    13,
    "LeaveGroup",
    valid="0-5",
    flexible="4+",
    notes="v0-2 leave one member (member_id); v3+ leave a batch (members[]).",
    request=[
        F("group_id", STRING, "0+"),
        F("member_id", STRING, "0-2"),
        array(
            "members",
            [
                F("member_id", STRING, "3+"),
                F("group_instance_id", STRING, "3+", nullable="3+"),
                F("reason", STRING, "5+", nullable="5+"),
            ],
            "3+",
        ),
    ],
    response=[
        *_THROTTLE_AND_ERROR,
        array(
            "members",
            [
                F("member_id", STRING, "3+"),
                F("group_instance_id", STRING, "3+", nullable="3+"),
                F("error_code", INT16, "3+"),
            ],
            "3+",
        ),
    ],
)

SYNC_GROUP = API(
    14,
    "SyncGroup",
    valid="0-5",
    flexible="4+",
    request=[
        *_GROUP_MEMBER,
        F("protocol_type", STRING, "5+", nullable="5+"),
        F("protocol_name", STRING, "5+", nullable="5+"),
        array("assignments", [F("member_id", STRING, "0+"), F("assignment", BYTES, "0+")], "0+"),
    ],
    response=[
        *_THROTTLE_AND_ERROR,
        F("protocol_type", STRING, "5+", nullable="5+"),
        F("protocol_name", STRING, "5+", nullable="5+"),
        F("assignment", BYTES, "0+"),
    ],
)
