"""`bench content-query-grid`: its rows as ablation variants, and the word a speaker's name becomes."""

import memstream.processors.query.content as content_module
from memstream.bench.content_query_grid import FILL1000, ROWS, names_become, row_variants
from memstream.processors.text import without_names


def test_each_row_is_a_variant_per_budget_with_its_overrides_over_the_budget():
    row, overrides, budgets, _ = next(r for r in ROWS if r[0] == "content semantic, name -> they")
    variants = row_variants(row, overrides, budgets)
    assert set(variants) == {f"{row} @ K=10", f"{row} @ fill 1000"}
    what, params, profile = variants[f"{row} @ fill 1000"]
    assert (what, profile) == (row, None) and params == {**FILL1000, "content_query": "semantic"}


def test_a_name_becomes_the_rows_word_only_while_the_row_runs():
    with names_become("they"):
        assert content_module.without_names("Mel went to Paris", ["Mel"]) == "they went to Paris"
    assert content_module.without_names is without_names
    with names_become(None):
        assert content_module.without_names("Mel went to Paris", ["Mel"]) == "someone went to Paris"
