"""Every other API key Kafka defines: named and version-checked from the header, body skipped.

Version ranges are those of Kafka's current specs (Kafka 4.x trunk). `notes` say where older versions
existed: their headers still decode, and a version outside `valid` counts as unknown, never guessed.
"""

from dataclasses import replace

from ksniff.decode.schema import API, Api

_REMOVED_ZK = "Inter-broker API of ZooKeeper mode, removed in Kafka 4.0; ranges are those of Kafka 3.9."
_KIP_896 = "Versions below the range were removed in Kafka 4.0 (KIP-896)."


def _skipped(key: int, name: str, valid: str, flexible: str, notes: str = "") -> Api:
    api = API(key, name, valid=valid, flexible=flexible, request=[], response=[], notes=notes)
    return replace(api, extra={"body": "skipped"})


HEADER_ONLY: tuple[Api, ...] = (
    _skipped(4, "LeaderAndIsr", "0-7", "4+", _REMOVED_ZK),
    _skipped(5, "StopReplica", "0-4", "2+", _REMOVED_ZK),
    _skipped(6, "UpdateMetadata", "0-8", "6+", _REMOVED_ZK),
    _skipped(7, "ControlledShutdown", "0-3", "3+", _REMOVED_ZK),
    _skipped(15, "DescribeGroups", "0-6", "5+"),
    _skipped(16, "ListGroups", "0-5", "3+"),
    _skipped(19, "CreateTopics", "2-7", "5+", _KIP_896),
    _skipped(20, "DeleteTopics", "1-6", "4+", _KIP_896),
    _skipped(21, "DeleteRecords", "0-2", "2+"),
    _skipped(23, "OffsetForLeaderEpoch", "2-4", "4+", _KIP_896),
    _skipped(29, "DescribeAcls", "1-3", "2+", _KIP_896),
    _skipped(30, "CreateAcls", "1-3", "2+", _KIP_896),
    _skipped(31, "DeleteAcls", "1-3", "2+", _KIP_896),
    _skipped(32, "DescribeConfigs", "1-4", "4+", _KIP_896),
    _skipped(33, "AlterConfigs", "0-2", "2+"),
    _skipped(34, "AlterReplicaLogDirs", "1-2", "2+", _KIP_896),
    _skipped(35, "DescribeLogDirs", "1-5", "2+", _KIP_896),
    _skipped(37, "CreatePartitions", "0-3", "2+"),
    _skipped(38, "CreateDelegationToken", "1-3", "2+", _KIP_896),
    _skipped(39, "RenewDelegationToken", "1-2", "2+", _KIP_896),
    _skipped(40, "ExpireDelegationToken", "1-2", "2+", _KIP_896),
    _skipped(41, "DescribeDelegationToken", "1-3", "2+", _KIP_896),
    _skipped(42, "DeleteGroups", "0-2", "2+"),
    _skipped(43, "ElectLeaders", "0-2", "2+"),
    _skipped(44, "IncrementalAlterConfigs", "0-1", "1+"),
    _skipped(45, "AlterPartitionReassignments", "0-1", "0+"),
    _skipped(46, "ListPartitionReassignments", "0", "0+"),
    _skipped(47, "OffsetDelete", "0", "none"),
    _skipped(48, "DescribeClientQuotas", "0-1", "1+"),
    _skipped(49, "AlterClientQuotas", "0-1", "1+"),
    _skipped(50, "DescribeUserScramCredentials", "0", "0+"),
    _skipped(51, "AlterUserScramCredentials", "0", "0+"),
    _skipped(52, "Vote", "0-2", "0+", "KRaft controllers only."),
    _skipped(53, "BeginQuorumEpoch", "0-1", "1+", "KRaft controllers only."),
    _skipped(54, "EndQuorumEpoch", "0-1", "1+", "KRaft controllers only."),
    _skipped(55, "DescribeQuorum", "0-2", "0+"),
    _skipped(56, "AlterPartition", "2-3", "0+", "Broker to controller. " + _KIP_896),
    _skipped(57, "UpdateFeatures", "0-2", "0+"),
    _skipped(58, "Envelope", "0", "0+", "Broker to controller, wraps a forwarded request."),
    _skipped(59, "FetchSnapshot", "0-1", "0+", "KRaft controllers only."),
    _skipped(62, "BrokerRegistration", "0-4", "0+", "Broker to controller."),
    _skipped(63, "BrokerHeartbeat", "0-1", "0+", "Broker to controller."),
    _skipped(64, "UnregisterBroker", "0", "0+"),
    _skipped(67, "AllocateProducerIds", "0", "0+", "Broker to controller: blocks of producer ids."),
    _skipped(68, "ConsumerGroupHeartbeat", "0-1", "0+", "KIP-848 consumer groups."),
    _skipped(69, "ConsumerGroupDescribe", "0-1", "0+"),
    _skipped(70, "ControllerRegistration", "0", "0+", "KRaft controllers only."),
    _skipped(71, "GetTelemetrySubscriptions", "0", "0+", "KIP-714 client metrics."),
    _skipped(72, "PushTelemetry", "0", "0+", "KIP-714 client metrics."),
    _skipped(73, "AssignReplicasToDirs", "0", "0+", "Broker to controller."),
    _skipped(
        74,
        "ListConfigResources",
        "0-1",
        "0+",
        "Named ListClientMetricsResources (v0 only) before Kafka 4.1 (KIP-1142).",
    ),
    _skipped(75, "DescribeTopicPartitions", "0", "0+"),
    _skipped(76, "ShareGroupHeartbeat", "1", "0+", "v0 was the KIP-932 early access, removed in Kafka 4.1."),
    _skipped(77, "ShareGroupDescribe", "1", "0+", "v0 was the KIP-932 early access, removed in Kafka 4.1."),
    _skipped(78, "ShareFetch", "1-2", "0+", "v0 was the KIP-932 early access, removed in Kafka 4.1."),
    _skipped(79, "ShareAcknowledge", "1-2", "0+", "v0 was the KIP-932 early access, removed in Kafka 4.1."),
    _skipped(80, "AddRaftVoter", "0-1", "0+"),
    _skipped(81, "RemoveRaftVoter", "0", "0+"),
    _skipped(82, "UpdateRaftVoter", "0", "0+", "KRaft controllers only."),
    _skipped(83, "InitializeShareGroupState", "0", "0+", "Broker to share coordinator."),
    _skipped(84, "ReadShareGroupState", "0", "0+", "Broker to share coordinator."),
    _skipped(85, "WriteShareGroupState", "0-1", "0+", "Broker to share coordinator."),
    _skipped(86, "DeleteShareGroupState", "0", "0+", "Broker to share coordinator."),
    _skipped(87, "ReadShareGroupStateSummary", "0-1", "0+", "Broker to share coordinator."),
    _skipped(88, "StreamsGroupHeartbeat", "0", "0+", "KIP-1071 streams groups."),
    _skipped(89, "StreamsGroupDescribe", "0", "0+", "KIP-1071 streams groups."),
    _skipped(90, "DescribeShareGroupOffsets", "0-1", "0+"),
    _skipped(91, "AlterShareGroupOffsets", "0", "0+"),
    _skipped(92, "DeleteShareGroupOffsets", "0", "0+"),
)
