"""The protocol tables: one `Api` per Kafka API key, by key (`ALL_APIS`) and by Kafka's name (`BY_NAME`).

APIs whose bodies the audit or the exports read have full request and response tables; every other key
Kafka defines is header-only (`body_skipped(api)` is true, its request and response are empty).
"""

from ksniff.decode.apis.cluster import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
)
from ksniff.decode.apis.consumer import (
    FETCH,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from ksniff.decode.apis.errors import ERROR_CODES, error_name
from ksniff.decode.apis.header_only import HEADER_ONLY
from ksniff.decode.apis.producer import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
    PRODUCE,
    TXN_OFFSET_COMMIT,
    WRITE_TXN_MARKERS,
)
from ksniff.decode.schema import Api

FULL_BODY: tuple[Api, ...] = (
    PRODUCE,
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    FIND_COORDINATOR,
    JOIN_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    SYNC_GROUP,
    SASL_HANDSHAKE,
    API_VERSIONS,
    INIT_PRODUCER_ID,
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    WRITE_TXN_MARKERS,
    TXN_OFFSET_COMMIT,
    SASL_AUTHENTICATE,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
    DESCRIBE_CLUSTER,
)

ALL_APIS: dict[int, Api] = {api.key: api for api in sorted(FULL_BODY + HEADER_ONLY, key=lambda a: a.key)}
BY_NAME: dict[str, Api] = {api.name: api for api in ALL_APIS.values()}


def body_skipped(api: Api) -> bool:
    """True for header-only APIs: their bodies are counted, never decoded."""
    return api.extra.get("body") == "skipped"


__all__ = ["ALL_APIS", "BY_NAME", "ERROR_CODES", "FULL_BODY", "HEADER_ONLY", "body_skipped", "error_name"]
