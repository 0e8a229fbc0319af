from fractions import Fraction

import pytest

from webhook.engine.quantity import QuantityError, format_bytes, format_quantity, parse_quantity


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


def test_whole_and_milli_quantities_format_as_users_write_them() -> None:
    assert format_quantity(Fraction(2)) == "2"
    assert format_quantity(Fraction(1, 2)) == "500m"


def test_bytes_format_with_the_largest_whole_binary_suffix() -> None:
    assert format_bytes(64 * 2**30) == "64Gi"
    assert format_bytes(1536 * 2**20) == "1536Mi"
    assert format_bytes(1000) == "1000"
