"""ksniff: a passive Apache Kafka protocol sniffer and transaction auditor."""

__version__ = "0.1.0"
