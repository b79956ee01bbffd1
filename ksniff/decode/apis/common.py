"""Field groups that several APIs' tables share, written once: the topic -> partition nesting, a
partition's error, a broker's address, a partition's current leader.

Each builder returns plain `Field`s, equal to the ones a table would spell out by hand; the interpreter
and the generated decoders see no difference.
"""

from ksniff.decode.schema import ARRAY, INT16, INT32, STRING, STRUCT, UUID, Array, F, Field, Primitive


def array(name: str, of: Primitive | list[Field], versions: str, **kwargs) -> Field:
    """An array field in one line: array("topics", [...], "0+") is F("topics", ARRAY([...]), "0+")."""
    return F(name, ARRAY(of), versions, **kwargs)


def topics(
    partitions: Primitive | list[Field],
    versions: str = "0+",
    *,
    field: str = "topics",
    name: str = "name",
    names: str | None = None,
    topic_id: str | None = None,
    key: str = "partitions",
    nullable: str = "none",
) -> Field:
    """Kafka's usual nesting: an array of topics, each named `name` (in `names`, by default the array's
    versions), by topic id from `topic_id` on, with its `partitions` under `key`."""
    struct = [F(name, STRING, names or versions)]
    if topic_id is not None:
        struct.append(F("topic_id", UUID, topic_id))
    struct.append(array(key, partitions, versions))
    return array(field, struct, versions, nullable=nullable)


def topics_type(partitions: Primitive | list[Field], versions: str = "0+", **kwargs) -> Array:
    """The type of `topics(...)`, for a table that names the field itself."""
    return topics(partitions, versions, **kwargs).type


def partition_errors(versions: str = "0+", *, error: str = "error_code") -> list[Field]:
    """A partition's answer that carries nothing but its error code."""
    return [F("partition_index", INT32, versions), F(error, INT16, versions)]


def endpoint(versions: str, *, node: str = "node_id") -> list[Field]:
    """A broker's id and address."""
    return [F(node, INT32, versions), F("host", STRING, versions), F("port", INT32, versions)]


def broker(versions: str = "0+", *, node: str = "node_id", rack: str | None = None) -> list[Field]:
    """A broker's id, address and (nullable) rack; `rack` when the rack came later than the rest."""
    rack = rack or versions
    return [*endpoint(versions, node=node), F("rack", STRING, rack, nullable=rack)]


def current_leader(versions: str, *, tag: int) -> Field:
    """The tagged leader hint a partition error comes with (KIP-951)."""
    leader = [F("leader_id", INT32, versions, default=-1), F("leader_epoch", INT32, versions, default=-1)]
    return F("current_leader", STRUCT(leader), versions, tag=tag)
