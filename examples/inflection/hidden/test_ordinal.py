"""Hidden test of fix-ordinal-teens: the base commit gives 11st, 12nd and 13rd."""

import inflection
import pytest


@pytest.mark.parametrize(
    ("number", "suffix"),
    [
        (1, "st"),
        (2, "nd"),
        (3, "rd"),
        (4, "th"),
        (10, "th"),
        (11, "th"),
        (12, "th"),
        (13, "th"),
        (111, "th"),
        (1013, "th"),
        (-11, "th"),
        (21, "st"),
        (22, "nd"),
        (23, "rd"),
        (101, "st"),
        (-1021, "st"),
    ],
)
def test_ordinal(number, suffix):
    assert inflection.ordinal(number) == suffix


def test_ordinalize():
    assert inflection.ordinalize(12) == "12th"
    assert inflection.ordinalize(112) == "112th"
    assert inflection.ordinalize(102) == "102nd"
