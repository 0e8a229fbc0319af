"""The CEL budget: the cost estimate grows as cel-go's does (range size times body), and the
step counters stop an evaluation and a review where their budgets say."""

from __future__ import annotations

import pytest

from webhook.engine.resources.cel.celbudget import (
    LIST_ITEMS,
    MAP_ENTRIES,
    Meter,
    OutOfSteps,
    close_review,
    current_review,
    estimated_steps,
    open_review,
    review_budget,
    review_spent,
)
from webhook.engine.resources.cel.celenvironment import compile_program


def cost(text: str) -> int:
    return estimated_steps(compile_program(text).tree)


def nested(depth: int, items: int) -> str:
    literal = "[" + ",".join(str(i) for i in range(items)) + "]"
    return f"{literal}.all(x{depth}, " * depth + "true" + ")" * depth


def test_a_plain_comparison_costs_its_nodes_only() -> None:
    assert 0 < cost("device.driver == 'gpu.nvidia.com'") < 40


@pytest.mark.parametrize("items", [2, 5, 10])
def test_a_comprehension_costs_its_body_once_per_literal_element(items: int) -> None:
    one, two = cost(nested(1, items)), cost(nested(1, 2 * items))
    # Doubling the range roughly doubles the cost: the body dominates.
    assert 1.6 < two / one < 2.4


def test_nesting_multiplies() -> None:
    assert cost(nested(3, 10)) > 9 * cost(nested(2, 10))
    assert cost(nested(5, 10)) > 10**5


def test_a_range_over_the_devices_maps_counts_the_apis_bound() -> None:
    over_attributes = cost("device.attributes.exists(d, d == 'x')")
    over_literal = cost("['a'].exists(d, d == 'x')")
    assert over_attributes - over_literal >= (MAP_ENTRIES - 1) * 5


def test_a_range_the_expression_does_not_bound_counts_a_strings_most_parts() -> None:
    split = cost("device.attributes['a'].b.split(',').exists(p, p == 'x')")
    assert split > LIST_ITEMS * 5


def test_a_meter_stops_at_its_own_limit() -> None:
    meter = Meter(None, steps=3)
    for _ in range(3):
        meter.step()
    with pytest.raises(OutOfSteps) as raised:
        meter.step()
    assert raised.value.which == "expression"


def test_the_review_budget_is_shared_by_every_meter_of_the_review() -> None:
    with review_budget(steps=5) as budget:
        assert current_review() is budget
        first, second = Meter(budget), Meter(budget)
        for _ in range(3):
            first.step()
        second.step()
        second.step()
        assert budget.left == 0
        assert review_spent()
        with pytest.raises(OutOfSteps) as raised:
            second.step()
        assert raised.value.which == "review"
    assert current_review() is None
    assert not review_spent()


def test_a_review_inside_a_review_keeps_the_outer_budget() -> None:
    with review_budget(steps=10) as outer, review_budget(steps=10**6) as inner:
        assert inner is outer


def test_open_and_close_review_are_the_review_budget_as_two_calls() -> None:
    token = open_review(steps=7)
    try:
        budget = current_review()
        assert budget is not None
        assert budget.left == 7
        inner = open_review(steps=10**6)  # an outer review of the same request is kept
        assert inner is None
        assert current_review() is budget
        close_review(inner)
        assert current_review() is budget
    finally:
        close_review(token)
    assert current_review() is None
