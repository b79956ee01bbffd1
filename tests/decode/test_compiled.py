"""The compiled fast path equals the reference interpreter: values on every fixture, first errors on
truncated and mutated ones."""

from __future__ import annotations

import pytest
from decode_builders import mutations, produce_bodies
from decode_encoder import fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksniff.decode import compiled, interp
from ksniff.decode.apis import ALL_APIS, FULL_BODY
from ksniff.decode.reader import DecodeError, TooManyItems

CASES = [
    pytest.param(api, v, is_request, id=f"{api.name}-v{v}-{'req' if is_request else 'resp'}")
    for api in FULL_BODY
    for v in range(api.valid.low, api.valid.high + 1)
    for is_request in (True, False)
]


def both(api, version, is_request, data, strict=True, **kw):
    results = []
    for decode in (interp.decode_body, compiled.decode_body):
        try:
            results.append(("ok", decode(api, version, is_request, memoryview(data), strict=strict, **kw)))
        except DecodeError as e:
            results.append(("error", e))
    return results


@pytest.mark.parametrize("api, version, is_request", CASES)
@pytest.mark.parametrize("nulls, tags", [(False, True), (True, True), (False, False)])
def test_equal_on_table_fixtures(api, version, is_request, nulls, tags):
    data = fixture(api, version, is_request, nulls=nulls, tags=tags)
    (kind_i, value_i), (kind_c, value_c) = both(api, version, is_request, data)
    assert kind_i == "ok", value_i
    assert kind_c == "ok" and value_c == value_i
    assert type(value_c) is type(value_i)


@pytest.mark.parametrize("api, version, is_request", CASES)
def test_equal_under_every_item_budget(api, version, is_request):
    """The item cap (--max-body-items) cuts both decoders at the same field and offset: every budget from
    none to enough, on a fixture whose arrays, tagged fields and record batches are all filled."""
    data = fixture(api, version, is_request, nulls=False, tags=True)
    for budget in range(12):
        a, b = both(api, version, is_request, data, max_items=budget)
        assert a == b, budget
        if a[0] == "error":
            assert isinstance(a[1], TooManyItems), a[1]
            assert str(budget) in a[1].why


@pytest.mark.parametrize("api, version, is_request", CASES)
def test_equal_errors_on_truncations(api, version, is_request):
    data = fixture(api, version, is_request)
    for n in range(len(data)):
        a, b = both(api, version, is_request, data[:n])
        assert a == b, n


@pytest.mark.parametrize("api, version, is_request", CASES)
def test_equal_on_mutations(api, version, is_request):
    data = bytearray(fixture(api, version, is_request))
    if not data:
        pytest.skip("empty body at this version")
    for mutated in mutations(bytes(data), f"{api.key}-{version}-{is_request}"):
        a, b = both(api, version, is_request, mutated, strict=False)
        assert a == b


@pytest.mark.parametrize("version", range(0, 14))
def test_equal_on_real_client_produce(version):
    produce = ALL_APIS[0]
    req_body, resp_body = produce_bodies(version)
    for is_request, body in ((True, req_body), (False, resp_body)):
        (ka, a), (kb, b) = both(produce, version, is_request, body)
        assert ka == kb == "ok" and a == b


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES), st.binary(max_size=80))
def test_equal_on_random_bytes(case, data):
    api, version, is_request = case.values
    a, b = both(api, version, is_request, data, strict=False)
    assert a == b


def test_compiled_once_per_version():
    api = ALL_APIS[0]
    assert compiled.decoder_for(api, 9, True) is compiled.decoder_for(api, 9, True)
    assert compiled.decoder_for(api, 9, True) is not compiled.decoder_for(api, 8, True)
