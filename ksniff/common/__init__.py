"""The shared low room: helpers with no Kafka or capture knowledge that every room may import.

`codegen`: the code generators (fast dataclass `__init__`s, compiled decoders' helpers);
`counters`: adding one set of counters into another;
`sources`: whether a compiled module or its pure-Python reference runs (`load`, KSNIFF_PURE_PYTHON).
It imports nothing else of ksniff.
"""
