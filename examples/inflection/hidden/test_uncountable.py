"""Hidden test of fix-uncountable-case: the base commit pluralizes "Sheep" to "Sheeps"."""

import inflection
import pytest


@pytest.mark.parametrize("word", ["sheep", "Sheep", "SHEEP", "Information", "Equipment", "rice"])
def test_uncountable_words_keep_their_form(word):
    assert inflection.pluralize(word) == word


@pytest.mark.parametrize(("singular", "plural"), [("search", "searches"), ("Person", "People"), ("box", "boxes")])
def test_countable_words_still_change(singular, plural):
    assert inflection.pluralize(singular) == plural
    assert inflection.singularize(plural) == singular
