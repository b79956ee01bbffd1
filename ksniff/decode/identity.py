"""Whose traffic it is: the cluster, its brokers and coordinators, as the brokers' own answers name them.

Metadata and DescribeCluster answers carry the cluster id and the brokers (node id, host, port);
FindCoordinator answers say which broker coordinates a transactional id or a group. A connection's
server side is the broker that answered on it: it belongs to the cluster named by an answer on that
connection, or by an answer anywhere that lists a broker at that address. `Identity.feed` is a fold over
exchanges (no I/O); `Identity.clusters()` gives the result as frozen rows for the report.

Cluster ids are chosen by operators (Tansu's default is the same for every instance) or by the broker
(librdkafka's mock draws one per cluster, and may draw the same twice): an id names a cluster only
together with the capture set it was seen in (ksniff.engine.sets).
"""

from __future__ import annotations

from ksniff.common.frozen import frozen_dataclass
from ksniff.decode.events import Exchange

IDENTITY_APIS = frozenset({"Metadata", "DescribeCluster", "FindCoordinator"})
# The most brokers, coordinators and connections remembered per run: identity is a few rows per broker,
# and a capture cannot make it grow without bound.
MAX_ENTRIES = 100_000
_KEY_TYPES = {0: "group", 1: "transaction", 2: "share"}


@frozen_dataclass
class Broker:
    """A broker as the answers name it: node id, host and port."""

    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def as_contract(self) -> dict:
        return {"node_id": self.node_id, "host": self.host, "port": self.port}


@frozen_dataclass
class ClusterInfo:
    """One cluster as a capture set saw it (the JSON document's `clusters` rows)."""

    cluster_id: str | None  # None: brokers whose answers never named a cluster
    brokers: tuple[Broker, ...]
    # (kind, key, node id): "transaction" or "group", the transactional id or group, its coordinator.
    coordinators: tuple[tuple[str, str, int], ...]
    # (broker address as captured, node id or None when no answer listed that address)
    connections: tuple[tuple[str, int | None], ...]


class Identity:
    """Learns clusters, brokers, coordinators and which broker each connection reached."""

    __slots__ = ("_brokers", "_by_address", "_conn_cluster", "_coordinators", "_addresses", "_order")

    def __init__(self) -> None:
        self._brokers: dict[str | None, dict[int, Broker]] = {}
        self._by_address: dict[str, tuple[str | None, int]] = {}  # "host:port" -> (cluster, node id)
        self._conn_cluster: dict[str, str | None] = {}  # broker address -> cluster named on it
        self._coordinators: dict[tuple[str | None, str, str], int] = {}
        self._addresses: dict[str, None] = {}  # every broker address a Kafka connection reached, in order
        self._order: dict[str | None, None] = {}  # clusters in order learnt

    def saw_broker(self, address: str) -> None:
        """A Kafka connection's server side, whether or not anything named it."""
        if address not in self._addresses and len(self._addresses) < MAX_ENTRIES:
            self._addresses[address] = None

    def feed(self, ex: Exchange) -> None:
        """Learn from one exchange, in audit order (cheap for every API that names no identity)."""
        if ex.broker not in self._addresses and len(self._addresses) < MAX_ENTRIES:
            self._addresses[ex.broker] = None
        if ex.api_name not in IDENTITY_APIS or ex.response is None:
            return
        body = ex.response
        if ex.api_name == "FindCoordinator":
            self._coordinator(ex)
            return
        if getattr(body, "error_code", 0):  # DescribeCluster's error, Metadata v13's top-level error
            return
        cluster = getattr(body, "cluster_id", None) or None
        self._order.setdefault(cluster, None)
        if cluster is not None:
            self._conn_cluster[ex.broker] = cluster
        known = self._brokers.setdefault(cluster, {})
        for b in body.brokers:
            node = b.node_id if ex.api_name == "Metadata" else b.broker_id
            if len(self._by_address) >= MAX_ENTRIES:
                break
            broker = Broker(node, b.host, b.port)
            known[node] = broker
            self._by_address[broker.address] = (cluster, node)

    def _coordinator(self, ex: Exchange) -> None:
        req, body = ex.request, ex.response
        if req is None or len(self._coordinators) >= MAX_ENTRIES:
            return
        kind = _KEY_TYPES.get(getattr(req, "key_type", 0), "other")
        cluster = self.cluster_of(ex.broker)
        if ex.api_version <= 3:
            if body.error_code == 0 and req.key:
                self._coordinators[(cluster, kind, req.key)] = body.node_id
            return
        for c in body.coordinators:
            if c.error_code == 0 and c.key:
                self._coordinators[(cluster, kind, c.key)] = c.node_id

    @property
    def cluster_ids(self) -> list[str]:
        """The cluster ids the answers named, in the order learnt."""
        return [c for c in self._order if c is not None]

    def brokers(self, cluster: str | None) -> tuple[Broker, ...]:
        return tuple(sorted(self._brokers.get(cluster, {}).values(), key=lambda b: b.node_id))

    def cluster_of(self, address: str) -> str | None:
        """The cluster of the broker at `address`: named on a connection to it, or listing it."""
        cluster = self._conn_cluster.get(address)
        if cluster is None:
            cluster = self._by_address.get(address, (None, 0))[0]
        return cluster

    def node_of(self, address: str) -> int | None:
        found = self._by_address.get(address)
        return None if found is None else found[1]

    def clusters(self) -> list[ClusterInfo]:
        """What was learnt, one row per cluster id (and one for brokers no answer named, if any)."""
        rows = []
        named = list(self._order)
        addresses = sorted(self._addresses)
        unnamed = [a for a in addresses if self.cluster_of(a) is None]
        if unnamed and None not in named:
            named.append(None)
        for cluster in named:
            conns = tuple((a, self.node_of(a)) for a in addresses if self.cluster_of(a) == cluster)
            coordinators = tuple(
                sorted(
                    (kind, key, node) for (c, kind, key), node in self._coordinators.items() if c == cluster
                )
            )
            brokers = self.brokers(cluster)
            if cluster is None and not (brokers or conns):
                continue
            rows.append(ClusterInfo(cluster, brokers, coordinators, conns))
        return rows
