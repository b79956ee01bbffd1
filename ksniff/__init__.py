"""ksniff: a passive Apache Kafka protocol sniffer and transaction auditor.

    import ksniff
    result = ksniff.audit("dump.pcap")      # or a folder, or a list of captures
    result.findings                          # pandas DataFrames: findings, transactions, exchanges, batches
"""

__version__ = "0.1.0"

from ksniff import audit  # noqa: E402  - the callable room; see ksniff/audit/__init__.py

__all__ = ["__version__", "audit"]
