from processors.query import cap_to_budget, roles_for, search_roles


def test_budget_capping_keeps_order_and_at_least_one():
    texts = ["one two three", "four five six", "seven eight nine"]
    assert cap_to_budget(texts, 6) == 2
    assert cap_to_budget(texts, 100) == 3
    assert cap_to_budget(["a very long text indeed"], 1) == 1


def test_search_roles_split_only_over_the_sides_the_conversation_has():
    both_sides = {"user", "assistant"}.__contains__
    people_only = {"user"}.__contains__
    assert search_roles(roles_for("assistant"), both_sides) == ("assistant",)
    assert search_roles(roles_for("user"), both_sides) == ("user",)
    assert search_roles(roles_for("ambiguous"), both_sides) == ("user", "assistant")
    assert search_roles(roles_for("both"), both_sides) == (None,)
    # Two people and no assistant: a question about "you" searches everything rather than nothing.
    assert search_roles(roles_for("assistant"), people_only) == (None,)
    assert search_roles(roles_for("ambiguous"), people_only) == (None,)
    assert search_roles(roles_for("user"), people_only) == ("user",)
