"""Round trips: object -> bytes -> object, bytes -> object -> bytes, and through the text."""

from hypothesis import given, settings
from nac_strategies import nac_files

from nac import dumps, loads
from nac.text import assemble, disassemble


@settings(max_examples=150, deadline=None)
@given(nac_files())
def test_binary_round_trip(nac):
    raw = dumps(nac)
    back = loads(raw)
    assert back == nac
    assert dumps(back) == raw


@settings(max_examples=100, deadline=None)
@given(nac_files())
def test_text_round_trip(nac):
    text = disassemble(nac)
    assert assemble(text) == nac
    assert dumps(assemble(text)) == dumps(nac)
