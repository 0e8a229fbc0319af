from fractions import Fraction

import pytest

from webhook.engine.kube.quantity import (
    QuantityError,
    format_bytes,
    format_quantity,
    parse_quantity,
    whole_quantity,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(1, Fraction(1), id="yaml-int"),
        pytest.param("1", Fraction(1), id="quoted-int"),
        pytest.param(0.5, Fraction(1, 2), id="yaml-float"),
        pytest.param("500m", Fraction(1, 2), id="milli"),
        pytest.param("1.5", Fraction(3, 2), id="decimal-string"),
        pytest.param("-1", Fraction(-1), id="negative"),
        pytest.param("2Gi", Fraction(2 * 2**30), id="binary-suffix"),
        pytest.param("1k", Fraction(1000), id="decimal-suffix"),
        pytest.param("1e3", Fraction(1000), id="exponent"),
        pytest.param(".5", Fraction(1, 2), id="leading-dot"),
    ],
)
def test_quantities_parse_exactly(raw: object, expected: Fraction) -> None:
    assert parse_quantity(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("${GPU_LIMIT:-1}", id="shell-placeholder"),
        pytest.param("one", id="word"),
        pytest.param("", id="empty"),
        pytest.param(None, id="null"),
        pytest.param(True, id="boolean"),
        pytest.param([1], id="list"),
        pytest.param("1Gb", id="unknown-suffix"),
    ],
)
def test_what_kubernetes_rejects_is_not_a_quantity(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(4, 4, id="yaml-int"),
        pytest.param("4", 4, id="quoted-int"),
        pytest.param("0", 0, id="zero"),
        pytest.param(2.0, 2, id="whole-float"),
        pytest.param("2000m", 2, id="whole-in-milli"),
        pytest.param("1k", 1000, id="decimal-suffix"),
        pytest.param("0.5", None, id="a-part"),
        pytest.param("-1", None, id="negative"),
        pytest.param("lots", None, id="not-a-quantity"),
        pytest.param(True, None, id="boolean"),
        pytest.param([1], None, id="unhashable-list"),
        pytest.param({"n": 1}, None, id="unhashable-map"),
        pytest.param("9223372036854775808", None, id="out-of-range"),
    ],
)
def test_whole_quantities_are_counts_and_anything_else_is_none(
    raw: object, expected: int | None
) -> None:
    assert whole_quantity(raw) == expected
    assert whole_quantity(raw) == expected  # the second answer comes from the memo


def test_whole_and_milli_quantities_format_as_users_write_them() -> None:
    assert format_quantity(Fraction(2)) == "2"
    assert format_quantity(Fraction(1, 2)) == "500m"


def test_bytes_format_with_the_largest_whole_binary_suffix() -> None:
    assert format_bytes(64 * 2**30) == "64Gi"
    assert format_bytes(1536 * 2**20) == "1536Mi"
    assert format_bytes(1000) == "1000"


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("1e20000000", id="huge-exponent"),
        pytest.param("9223372036854775808", id="one-past-int64"),
        pytest.param("8Ei", id="binary-past-int64"),
        pytest.param(10**30, id="yaml-int"),
        pytest.param(1e300, id="yaml-float"),
        pytest.param("1e99999999999999999999", id="exponent-past-int64"),
        pytest.param("1" * 2000, id="too-many-digits"),
    ],
)
def test_quantities_beyond_what_kubernetes_holds_are_out_of_range(raw: object) -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(raw)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("9223372036854775807", Fraction(2**63 - 1), id="int64-max"),
        pytest.param("1e-20000000", Fraction(1, 10**9), id="tiny-rounds-up-to-a-nano"),
        pytest.param("-1e-30", Fraction(-1, 10**9), id="tiny-negative-rounds-away-from-zero"),
        pytest.param("1.0000000001", Fraction(1_000_000_001, 10**9), id="past-nano-rounds-up"),
        pytest.param("0e999999999", Fraction(0), id="zero-with-any-exponent"),
        pytest.param("0000000000000000000000001", Fraction(1), id="leading-zeros"),
        pytest.param("1.5Ei", Fraction(3 * 2**59), id="binary-fraction"),
    ],
)
def test_quantities_round_to_a_nano_unit_as_kubernetes_does(
    raw: object, expected: Fraction
) -> None:
    assert parse_quantity(raw) == expected


def test_not_a_number_is_not_a_quantity() -> None:
    with pytest.raises(QuantityError, match="not a quantity"):
        parse_quantity(float("inf"))


def test_a_long_value_is_shortened_in_the_message() -> None:
    with pytest.raises(QuantityError) as caught:
        parse_quantity("x" * 100_000)
    assert len(str(caught.value)) < 100
