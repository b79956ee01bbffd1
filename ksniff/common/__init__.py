"""The shared low room: helpers with no Kafka or capture knowledge that every room may import.

`codegen`: the code generators (fast dataclass `__init__`s, compiled decoders' helpers);
`counters`: adding one set of counters into another.
It imports nothing else of ksniff.
"""
