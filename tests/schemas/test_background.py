"""The background header: what marks a record as a history import's work, and nothing else."""

from memstream.schemas.background import HEADER, background_header, is_background


def test_a_record_is_background_only_with_the_header_set_to_one():
    assert is_background([background_header()])
    assert is_background([("traceparent", b"00-ab-cd-01"), (HEADER.upper(), b"1")]), "names are case-blind"
    assert is_background({HEADER: b"1"})
    assert not is_background(None)
    assert not is_background([])
    assert not is_background([(HEADER, b"0")])
    assert not is_background([("memstream-signature", b"k:ff")])
