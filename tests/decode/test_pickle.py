"""Decode events pickle as they are (engines ship them between processes): every event of the corpus
comes back equal, its bodies of the very classes the decoders make, in this process or a fresh one."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from ksniff.capture import read_files
from ksniff.decode import Decoder, interp
from ksniff.decode.events import Exchange
from ksniff.decode.values import Struct, class_at, struct_class

PCAPS = Path(__file__).resolve().parents[1] / "pcaps"
CORPUS = sorted(p for p in PCAPS.glob("*.pcap*") if p.stat().st_size > 24)


def decoded(path: Path, **decoder_args) -> list:
    run = read_files([str(path)])
    dec = Decoder(ports=(9092,), on_not_kafka=run.drop, **decoder_args)
    out = []
    for ev in run:
        out += dec.feed(ev)
    return out + dec.finish()


def structs(value, found: list[Struct]) -> list[Struct]:
    """Every Struct inside `value`, nested ones included."""
    if isinstance(value, Struct):
        found.append(value)
    if isinstance(value, tuple):
        for item in value:
            structs(item, found)
    return found


@pytest.mark.parametrize(
    "decoder_args",
    [{}, {"keep_records": True}, {"body_decoder": interp.decode_body}],
    ids=["compiled", "records", "interpreter"],
)
@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_every_decoded_event_survives_pickle(path: Path, decoder_args: dict) -> None:
    events = decoded(path, **decoder_args)
    back = pickle.loads(pickle.dumps(events, protocol=pickle.HIGHEST_PROTOCOL))
    assert back == events
    bodies = [b for e in events if isinstance(e, Exchange) for b in (e.request, e.response)]
    assert any(isinstance(b, Struct) for b in bodies)
    copies = [b for e in back if isinstance(e, Exchange) for b in (e.request, e.response)]
    for body, copy in zip(bodies, copies, strict=True):
        assert [type(s) for s in structs(copy, [])] == [type(s) for s in structs(body, [])]


def test_bodies_come_back_as_the_decoders_classes_in_a_fresh_process() -> None:
    path = max(CORPUS, key=lambda p: p.stat().st_size)
    bodies = [e.request for e in decoded(path) if isinstance(e, Exchange) and e.api_name == "Produce"]
    assert bodies
    check = (
        "import pickle, sys\n"
        "from ksniff.decode.values import class_at\n"
        "bodies = pickle.loads(sys.stdin.buffer.read())\n"
        "assert all(type(b) is class_at(0, True, ()) for b in bodies)\n"
        "topics = class_at(0, True, ('topic_data',))\n"
        "assert all(type(t) is topics for b in bodies for t in b.topic_data)\n"
        "print(len(bodies), bodies[0].transactional_id)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check],
        input=pickle.dumps(bodies),
        capture_output=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.stdout.split()[0] == str(len(bodies)).encode()
    assert type(bodies[0]) is class_at(0, True, ())


def test_a_struct_made_outside_the_tables_travels_by_its_field_names() -> None:
    fields = tuple(type("F", (), {"name": n})() for n in ("transactional_id", "producer_id"))
    body = struct_class(fields, "Adhoc")(("tx-A", 7, ()))
    back = pickle.loads(pickle.dumps(body))
    assert back == body and type(back).__name__ == "Adhoc"
    assert back.transactional_id == "tx-A" and back.producer_id == 7
