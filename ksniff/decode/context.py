"""What every Kafka connection of a run shares: body decoding, the counters, the caps, topic names.

A Connection (ksniff.decode.connection) is given this context, not the Decoder that owns it: the
decoder routes stream events to connections, the context is all a connection needs back.
"""

from __future__ import annotations

import copy
import functools
import struct
from collections.abc import Callable, Mapping
from typing import Any

from ksniff.common.frozen import slotted_dataclass
from ksniff.decode import compiled
from ksniff.decode.events import ApiCounts, DecodeStats
from ksniff.decode.frames import parse_request_header
from ksniff.decode.reader import MAX_BODY_ITEMS, DecodeError, TooManyItems
from ksniff.decode.schema import Api
from ksniff.decode.sync import BODY_BAD, BODY_OK, RequestCheck, body_verdict
from ksniff.decode.values import Struct

BodyDecoder = Callable[[Api, int, bool, Any], Struct]


@slotted_dataclass
class VersionPlan:
    """What a connection's per-frame path needs of one (API key, version) whose bodies the generated
    decoders read, looked up once: the API, whether its request and response headers are flexible, its
    counters, and the request and response decoders."""

    api: Api
    name: str
    request_flexible: bool  # request header v2
    response_flexible: bool  # response header v1 (ApiVersions answers with v0 at every version)
    counts: ApiCounts
    request: Any
    response: Any


class DecodeContext:
    """Body decoding (the generated decoders, or a `body_decoder` given in, e.g. the interpreter in
    tests), the run's DecodeStats and per-API counts, the frame and in-flight caps, and the topic names
    learnt from Metadata responses anywhere in the run."""

    def __init__(
        self,
        apis: Mapping[int, Api],
        *,
        max_frame: int,
        max_in_flight: int,
        keep_records: bool,
        body_decoder: BodyDecoder | None = None,
        max_body_items: int = MAX_BODY_ITEMS,
        only: frozenset[int] | None = None,
    ) -> None:
        self.apis = apis
        # A pass that reads a few APIs (the planner's clock anchors and cluster identity): the keys of
        # those; every other request is passed over (`Connection._request`). None: every API.
        self.only = only
        self.max_frame = max_frame
        self.max_body_items = max_body_items  # array elements and record batches one body may make
        self.max_in_flight = max_in_flight
        self.keep_records = keep_records
        # With the default (compiled) decoders, `decode` calls each generated function directly through
        # `_bodies`; a decoder passed in (the interpreter, in tests) goes through `body_decoder` always.
        self._compiled = body_decoder is None
        self._counts: dict[tuple[str, int], ApiCounts] = {}
        self._bodies: dict[tuple[int, int, bool], tuple[Api | None, Any, str | None]] = {}
        if body_decoder is None:
            body_decoder = (
                functools.partial(compiled.decode_body, keep_records=True)
                if keep_records
                else compiled.decode_body
            )
        self.body_decoder: BodyDecoder = body_decoder
        self.request_check = RequestCheck(apis, max_frame, verify=self.verify_request)
        self.stats = DecodeStats(by_api={})
        self.topic_names: dict[Any, str] = {}
        # (API key, version) -> VersionPlan: only versions the tables know, so hostile keys and versions
        # never grow it; made by `remember` once the version's counters exist.
        self.plans: dict[tuple[int, int], VersionPlan] = {}

    def sharing(self) -> DecodeContext:
        """A context for another part of the same run, decoded apart (the Spark engine's flows of one
        task): the same counters, per-API counts and caches of body decoders and version plans, so that
        nothing is made or counted once per part, but topic names of its own, as each part learns them
        only from the Metadata answers it sees."""
        other = copy.copy(self)
        other.topic_names = {}
        return other

    def remember(self, api: Api | None, version: int, counts: ApiCounts) -> VersionPlan | None:
        """The VersionPlan of `api` at `version` (made on first call), or None when its bodies are not
        read by the generated decoders (an unknown API or version, a skipped API, a decoder given in)."""
        if not self._compiled or self._undecodable(api, version) is not None:
            return None
        key = (api.key, version)
        plan = self.plans.get(key)
        if plan is None:
            flexible = api.flexible.contains(version)
            plan = self.plans[key] = VersionPlan(
                api,
                api.name,
                flexible,
                flexible and not api.response_header_v0,
                counts,
                compiled.fast_decoder_for(api, version, True, self.keep_records),
                compiled.fast_decoder_for(api, version, False, self.keep_records),
            )
        return plan

    def topic_name(self, topic_id: Any) -> str:
        """A topic id's name when a Metadata response told it, else the id as a string."""
        return self.topic_names.get(topic_id, str(topic_id))

    def count(self, name: str, version: int) -> ApiCounts:
        hit = self._counts.get((name, version))  # once per frame: skip the versions set after the first
        if hit is not None:
            return hit
        hit = self._counts[(name, version)] = self._count(name, version)
        return hit

    def _count(self, name: str, version: int) -> ApiCounts:
        by_api = self.stats.by_api
        c = by_api.get(name)
        if c is None:
            c = by_api[name] = ApiCounts(versions=set())
        c.versions.add(version)
        return c

    def decode(
        self, api: Api | None, version: int, is_request: bool, body: memoryview
    ) -> tuple[Struct | None, str | None]:
        if self._compiled:  # twice per exchange: one dict lookup, then the generated function
            key = (id(api), version, is_request)
            plan = self._bodies.get(key)
            if plan is None or plan[0] is not api:
                plan = self._bodies[key] = (api, *self._plan(api, version, is_request))
            _, fn, reason = plan
            if fn is None:
                self.stats.undecoded_bodies += 1
                return None, reason
            return self.run(fn, api, version, is_request, body)
        return self._decode(api, version, is_request, body)

    def run(
        self, fn: Any, api: Api, version: int, is_request: bool, body: memoryview
    ) -> tuple[Struct | None, str | None]:
        """`decode` with its generated decoder `fn` already found (a VersionPlan's)."""
        try:
            value, end = fn(body, self.max_body_items)
        except TooManyItems:
            return self._over_item_cap()
        except Exception:  # noqa: BLE001 - rare: the general path words the error
            return self._decode(api, version, is_request, body)
        if end != len(body):  # bytes the schema does not define: the body is still what it says
            self.leftover(len(body) - end, self.count(api.name, version))
        return value, None

    def leftover(self, n: int, counts: ApiCounts) -> None:
        """A body of the API `counts` counts decoded with `n` bytes after what its schema defines
        (counted, never dropped)."""
        self.stats.bodies_with_leftover += 1
        self.stats.leftover_bytes += n
        counts.with_leftover += 1

    def _over_item_cap(self) -> tuple[None, str]:
        self.stats.bodies_over_item_cap += 1
        return None, "over_item_cap"

    def _plan(self, api: Api | None, version: int, is_request: bool) -> tuple[Any, str | None]:
        """(generated decoder, None), or (None, why the body is not decoded): `_decode`'s checks, once."""
        reason = self._undecodable(api, version)
        if reason is not None:
            return None, reason
        return compiled.decoder_for(api, version, is_request, self.keep_records), None

    @staticmethod
    def _undecodable(api: Api | None, version: int) -> str | None:
        if api is None:
            return "unknown_api"
        if api.extra.get("body") == "skipped" or not (api.request or api.response):
            return "skipped_api"
        if not api.valid.contains(version):
            # Never guess a newer (or retired) version's layout from one we know.
            return "unknown_version"
        return None

    def _decode(
        self, api: Api | None, version: int, is_request: bool, body: memoryview
    ) -> tuple[Struct | None, str | None]:
        reason = self._undecodable(api, version)
        if reason is not None:
            self.stats.undecoded_bodies += 1
            return None, reason
        try:
            return self.body_decoder(api, version, is_request, body, max_items=self.max_body_items), None
        except TooManyItems:
            return self._over_item_cap()
        except DecodeError as e:
            self.stats.errors += 1
            return None, f"malformed: {e}"
        except Exception as e:  # noqa: BLE001 - untrusted bytes must never stop the run
            self.stats.errors += 1
            return None, f"malformed: {type(e).__name__}: {e}"

    def verify(self, api: Api | None, version: int, is_request: bool, body: memoryview) -> int:
        """Resynchronisation's test of a candidate frame's body (`sync.body_verdict`); bodies that are
        never decoded pass."""
        if api is None or api.extra.get("body") == "skipped" or not api.valid.contains(version):
            return BODY_OK
        return body_verdict(functools.partial(self.body_decoder, api, version, is_request), body)

    def verify_request(self, payload: memoryview) -> int:
        api_key, api_version = struct.unpack_from(">hh", payload, 0)
        api = self.apis.get(api_key)
        header = parse_request_header(payload, api is not None and api.flexible.contains(api_version))
        if header is None:
            return BODY_BAD
        return self.verify(api, api_version, True, payload[header.body_offset :])
