"""Hidden test of add-kebabize: run by pytest from the attempt's worktree, so `inflection` is the agent's copy."""

import inflection
import pytest


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("DeviceType", "device-type"),
        ("HTTPServer", "http-server"),
        ("SpecialGuest", "special-guest"),
        ("snake_case_word", "snake-case-word"),
        ("already-kebab", "already-kebab"),
        ("Product", "product"),
    ],
)
def test_kebabize(word, expected):
    assert inflection.kebabize(word) == expected


def test_neighbours_unchanged():
    assert inflection.dasherize("puni_puni") == "puni-puni"
    assert inflection.underscore("DeviceType") == "device_type"
