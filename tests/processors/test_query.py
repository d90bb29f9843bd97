from processors.query import cap_to_budget


def test_budget_capping_keeps_order_and_at_least_one():
    texts = ["one two three", "four five six", "seven eight nine"]
    assert cap_to_budget(texts, 6) == 2
    assert cap_to_budget(texts, 100) == 3
    assert cap_to_budget(["a very long text indeed"], 1) == 1
