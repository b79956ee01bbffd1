"""Connection and cluster APIs: ApiVersions, Metadata, DescribeCluster, SaslHandshake, SaslAuthenticate.

ApiVersions carries the finalized features (transaction.version among them) that decide which
transaction protocol a cluster speaks; Metadata maps topic ids to names for the topic-id versions of
Produce and Fetch. Metadata and DescribeCluster name the cluster and its brokers (ksniff.decode.identity).
"""

from ksniff.decode.apis.common import array, broker
from ksniff.decode.schema import API, ARRAY, BOOL, BYTES, INT8, INT16, INT32, INT64, STRING, UUID, F

_NO_OPERATIONS = -2147483648  # authorized operations not asked for (INT32_MIN)

API_VERSIONS = API(
    18,
    "ApiVersions",
    valid="0-4",
    flexible="3+",
    response_header_v0=True,
    notes="Requests v0-2 have an empty body. The response always uses response header v0, and a broker "
    "that does not support the request's version answers with a v0 body.",
    request=[
        F("client_software_name", STRING, "3+"),
        F("client_software_version", STRING, "3+"),
    ],
    response=[
        F("error_code", INT16, "0+"),
        array(
            "api_keys",
            [F("api_key", INT16, "0+"), F("min_version", INT16, "0+"), F("max_version", INT16, "0+")],
            "0+",
        ),
        F("throttle_time_ms", INT32, "1+"),
        array(
            "supported_features",
            [F("name", STRING, "3+"), F("min_version", INT16, "3+"), F("max_version", INT16, "3+")],
            "3+",
            tag=0,
        ),
        F("finalized_features_epoch", INT64, "3+", tag=1, default=-1),
        array(
            "finalized_features",
            [
                F("name", STRING, "3+"),
                F("max_version_level", INT16, "3+"),
                F("min_version_level", INT16, "3+"),
            ],
            "3+",
            tag=2,
        ),
        F("zk_migration_ready", BOOL, "3+", tag=3, default=False),
    ],
)

METADATA = API(
    3,
    "Metadata",
    valid="0-13",
    flexible="9+",
    notes="A null topics array (v1+) asks for every topic; v0 uses an empty array for that. Topic ids "
    "appear from v10; topic names become nullable in requests from v10 and in responses from v12.",
    request=[
        array(
            "topics",
            [F("topic_id", UUID, "10+"), F("name", STRING, "0+", nullable="10+")],
            "0+",
            nullable="1+",
        ),
        F("allow_auto_topic_creation", BOOL, "4+", default=True),
        F("include_cluster_authorized_operations", BOOL, "8-10"),
        F("include_topic_authorized_operations", BOOL, "8+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "3+"),
        array("brokers", broker(rack="1+"), "0+"),
        F("cluster_id", STRING, "2+", nullable="2+"),
        F("controller_id", INT32, "1+", default=-1),
        array(
            "topics",
            [
                F("error_code", INT16, "0+"),
                F("name", STRING, "0+", nullable="12+"),
                F("topic_id", UUID, "10+"),
                F("is_internal", BOOL, "1+", default=False),
                array(
                    "partitions",
                    [
                        F("error_code", INT16, "0+"),
                        F("partition_index", INT32, "0+"),
                        F("leader_id", INT32, "0+"),
                        F("leader_epoch", INT32, "7+", default=-1),
                        F("replica_nodes", ARRAY(INT32), "0+"),
                        F("isr_nodes", ARRAY(INT32), "0+"),
                        F("offline_replicas", ARRAY(INT32), "5+"),
                    ],
                    "0+",
                ),
                F("topic_authorized_operations", INT32, "8+", default=_NO_OPERATIONS),
            ],
            "0+",
        ),
        F("cluster_authorized_operations", INT32, "8-10", default=_NO_OPERATIONS),
        F("error_code", INT16, "13+"),
    ],
)

DESCRIBE_CLUSTER = API(
    60,
    "DescribeCluster",
    valid="0-2",
    flexible="0+",
    notes="Admin clients ask it; endpoint_type 1 describes the brokers, 2 the KRaft controllers.",
    request=[
        F("include_cluster_authorized_operations", BOOL, "0+"),
        F("endpoint_type", INT8, "1+", default=1),
        F("include_fenced_brokers", BOOL, "2+"),
    ],
    response=[
        F("throttle_time_ms", INT32, "0+"),
        F("error_code", INT16, "0+"),
        F("error_message", STRING, "0+", nullable="0+"),
        F("endpoint_type", INT8, "1+", default=1),
        F("cluster_id", STRING, "0+"),
        F("controller_id", INT32, "0+", default=-1),
        array("brokers", [*broker(node="broker_id"), F("is_fenced", BOOL, "2+")], "0+"),
        F("cluster_authorized_operations", INT32, "0+", default=_NO_OPERATIONS),
    ],
)

SASL_HANDSHAKE = API(
    17,
    "SaslHandshake",
    valid="0-1",
    flexible="none",
    notes="v0 is followed by raw SASL tokens outside Kafka framing (GSSAPI era); v1 is followed by "
    "SaslAuthenticate requests.",
    request=[
        F("mechanism", STRING, "0+"),
    ],
    response=[
        F("error_code", INT16, "0+"),
        F("mechanisms", ARRAY(STRING), "0+"),
    ],
)

SASL_AUTHENTICATE = API(
    36,
    "SaslAuthenticate",
    valid="0-2",
    flexible="2+",
    notes="auth_bytes carry credentials (PLAIN passwords, SCRAM proofs, tokens): never kept.",
    request=[
        F("auth_bytes", BYTES, "0+", secret=True),
    ],
    response=[
        F("error_code", INT16, "0+"),
        F("error_message", STRING, "0+", nullable="0+"),
        F("auth_bytes", BYTES, "0+", secret=True),
        F("session_lifetime_ms", INT64, "1+"),
    ],
)
