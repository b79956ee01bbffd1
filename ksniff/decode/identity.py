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
# The two kinds of `fact_of`: an answer naming a cluster and its brokers, one naming coordinators.
NAMED, COORDINATORS = "named", "coordinators"


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

    __slots__ = ("_brokers", "_by_address", "_conn_cluster", "_coordinators", "_addresses", "_order", "_told")

    def __init__(self) -> None:
        self._brokers: dict[str | None, dict[int, Broker]] = {}
        self._by_address: dict[str, tuple[str | None, int]] = {}  # "host:port" -> (cluster, node id)
        self._conn_cluster: dict[str, str | None] = {}  # broker address -> cluster named on it
        # (broker address that answered, kind, key) -> (the answer's place among them, coordinator's node id):
        # its cluster is the broker's, as the whole capture names it (`clusters`), so that what is learnt
        # depends on each answer's last place only, not on what other answers were learnt before it.
        self._coordinators: dict[tuple[str, str, str], tuple[int, int]] = {}
        self._told = 0  # coordinator answers learnt
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
        if ex.api_name in IDENTITY_APIS and ex.response is not None:
            fact = fact_of(ex)
            if fact is not None:
                self.learn(fact)

    def learn(self, fact: tuple) -> None:
        """Learn one answer's `fact_of`, in audit order: what `feed` learns from the answer itself."""
        if fact[0] == COORDINATORS:
            _tag, broker, kind, pairs = fact
            if len(self._coordinators) >= MAX_ENTRIES:
                return
            self._told += 1
            for key, node in pairs:
                self._coordinators[(broker, kind, key)] = (self._told, node)
            return
        _tag, broker, cluster, brokers = fact
        self._order.setdefault(cluster, None)
        if cluster is not None:
            self._conn_cluster[broker] = cluster
        known = self._brokers.setdefault(cluster, {})
        for node, host, port in brokers:
            if len(self._by_address) >= MAX_ENTRIES:
                break
            found = Broker(node, host, port)
            known[node] = found
            self._by_address[found.address] = (cluster, node)

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
        latest: dict[tuple[str | None, str, str], tuple[int, int]] = {}  # the last answer per cluster's key
        for (broker, kind, key), told in self._coordinators.items():
            at = (self.cluster_of(broker), kind, key)
            if at not in latest or latest[at] < told:
                latest[at] = told
        for cluster in named:
            conns = tuple((a, self.node_of(a)) for a in addresses if self.cluster_of(a) == cluster)
            coordinators = tuple(
                sorted((kind, key, node) for (c, kind, key), (_n, node) in latest.items() if c == cluster)
            )
            brokers = self.brokers(cluster)
            if cluster is None and not (brokers or conns):
                continue
            rows.append(ClusterInfo(cluster, brokers, coordinators, conns))
        return rows


def fact_of(ex: Exchange) -> tuple | None:
    """What `Identity` learns from an answer of IDENTITY_APIS, as a few numbers and strings, without the
    rest of the answer (a Metadata answer's topics and partitions): `(NAMED, broker address, cluster id
    or None, ((node id, host, port), ...))`, `(COORDINATORS, broker address, kind, ((key, node id),
    ...))`, or None when it teaches nothing (an error answer). An engine that decodes connections apart
    (ksniff.engine.spark_tasks) ships these, and `Identity.learn` takes them in audit order."""
    body = ex.response
    if ex.api_name == "FindCoordinator":
        req = ex.request
        if req is None:
            return None
        kind = _KEY_TYPES.get(getattr(req, "key_type", 0), "other")
        if ex.api_version <= 3:
            pairs = ((req.key, body.node_id),) if body.error_code == 0 and req.key else ()
        else:
            pairs = tuple((c.key, c.node_id) for c in body.coordinators if c.error_code == 0 and c.key)
        return (COORDINATORS, ex.broker, kind, pairs)
    if getattr(body, "error_code", 0):  # DescribeCluster's error, Metadata v13's top-level error
        return None
    metadata = ex.api_name == "Metadata"
    brokers = tuple((b.node_id if metadata else b.broker_id, b.host, b.port) for b in body.brokers)
    return (NAMED, ex.broker, getattr(body, "cluster_id", None) or None, brokers)
