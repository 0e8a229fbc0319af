"""CEL device selectors behave as in Kubernetes' DRA environment
(``k8s.io/dynamic-resource-allocation/cel/compile.go``), on devices read from v1 JSON."""

from __future__ import annotations

import pytest

from webhook.engine.resources.cel.celbudget import EVALUATION_STEPS, REVIEW_STEPS, review_budget
from webhook.engine.resources.cel.celenvironment import desugar
from webhook.engine.resources.cel.deviceselectors import Selector, SelectorError, compile_selector
from webhook.engine.resources.cel.values import Version
from webhook.engine.resources.devices import device_from_json

H100 = device_from_json(
    {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "570.124.6"},
            "index": {"int": 0},
            "mig": {"bool": False},
            "interconnects": {"string": "nvlink,pcie"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    },
    driver="gpu.nvidia.com",
    pool="node-a",
).view()


def matches(expression: str) -> bool:
    selector = compile_selector(expression)
    assert isinstance(selector, Selector), selector
    return selector.matches(H100)


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        pytest.param('device.driver == "gpu.nvidia.com"', True, id="driver"),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].type == 'gpu'", True, id="bare-name-is-the-drivers"
        ),
        pytest.param(
            "device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:00'",
            True,
            id="qualified-name-has-its-own-domain",
        ),
        pytest.param(
            "'productName' in device.attributes['other.example.com']",
            False,
            id="unknown-domain-is-an-empty-map",
        ),
        pytest.param("device.attributes['gpu.nvidia.com'].index == 0", True, id="int"),
        pytest.param("!device.attributes['gpu.nvidia.com'].mig", True, id="bool"),
        pytest.param(
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) == 0",
            True,
            id="quantity-compareTo",
        ),
        pytest.param(
            "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40G'))",
            True,
            id="quantity-isGreaterThan",
        ),
        pytest.param(
            "device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('80000Mi'))",
            False,
            id="quantity-isLessThan",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.9.0'))",
            True,
            id="version-isGreaterThan",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].driverVersion.major() >= 570",
            True,
            id="version-major",
        ),
        pytest.param(
            "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')",
            True,
            id="string-function",
        ),
    ],
)
def test_selectors_see_the_device_as_kubernetes_shows_it(expression: str, want: bool) -> None:
    assert matches(expression) is want


def test_a_missing_attribute_is_a_runtime_error_as_in_the_allocator() -> None:
    selector = compile_selector("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")
    assert isinstance(selector, Selector)
    with pytest.raises(SelectorError) as raised:
        selector.matches(H100)
    assert not raised.value.unsupported


def test_an_expression_that_does_not_parse_here_is_not_evaluated_not_a_mismatch() -> None:
    # The API server compiled every stored selector (validateCELSelector): a parse failure
    # here is this webhook's grammar, so the answer is unknown, never "no device matches".
    compiled = compile_selector("device.driver == ")
    assert isinstance(compiled, SelectorError)
    assert "cannot be parsed here" in str(compiled)
    assert compiled.unsupported


def test_a_function_this_library_lacks_is_unsupported_not_a_mismatch() -> None:
    selector = compile_selector("isCIDR('10.0.0.0/8')")
    assert isinstance(selector, Selector)
    with pytest.raises(SelectorError) as raised:
        selector.matches(H100)
    assert raised.value.unsupported


def test_each_expression_is_compiled_once() -> None:
    text = "device.driver == 'compiled-once.example.com'"
    assert compile_selector(text) is compile_selector(text)


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        pytest.param("1.2.3", "1.10.0", id="numeric-not-lexical"),
        pytest.param("1.0.0-rc.1", "1.0.0", id="release-after-prerelease"),
        pytest.param("1.0.0-alpha", "1.0.0-beta", id="prerelease-order"),
    ],
)
def test_versions_order_as_semver(older: str, newer: str) -> None:
    assert Version(older).key() < Version(newer).key()


A = "device.attributes['gpu.nvidia.com']"


@pytest.mark.parametrize(
    ("expression", "want"),
    [
        # ext.Strings version 2 (environment/base.go: ext.Strings(ext.StringsVersion(2))).
        pytest.param(f"{A}.interconnects.split(',')[0] == 'nvlink'", True, id="split"),
        pytest.param(f"'pcie' in {A}.interconnects.split(',')", True, id="split-in"),
        pytest.param(f"{A}.interconnects.split(',', 1).size() == 1", True, id="split-limit"),
        pytest.param(f"{A}.productName.lowerAscii().contains('h100')", True, id="lowerAscii"),
        pytest.param(f"{A}.type.upperAscii() == 'GPU'", True, id="upperAscii"),
        pytest.param(
            f"{A}.productName.replace(' ', '-').startsWith('NVIDIA-H100')", True, id="replace"
        ),
        pytest.param("'  gpu '.trim() == 'gpu'", True, id="trim"),
        pytest.param(f"{A}.productName.indexOf('H100') == 7", True, id="indexOf"),
        pytest.param(f"{A}.productName.lastIndexOf('B') == 18", True, id="lastIndexOf"),
        pytest.param(f"{A}.productName.substring(7, 11) == 'H100'", True, id="substring"),
        pytest.param(f"{A}.productName.charAt(0) == 'N'", True, id="charAt"),
        pytest.param("['a', 'b'].join('-') == 'a-b'", True, id="join"),
        pytest.param("strings.quote('x') == '\"x\"'", True, id="strings.quote"),
        # library.Lists, ext.Sets, library.Regex.
        pytest.param("[1, 2, 3].isSorted() && [3, 1].sum() == 4", True, id="isSorted-sum"),
        pytest.param("[4, 9, 2].max() == 9 && [4, 9, 2].min() == 2", True, id="max-min"),
        pytest.param("[4, 9, 2].indexOf(9) == 1", True, id="list-indexOf"),
        pytest.param("sets.contains([1, 2, 3], [3, 1])", True, id="sets.contains"),
        pytest.param("sets.intersects([1, 2], [5, 2])", True, id="sets.intersects"),
        pytest.param("sets.equivalent([1, 2], [2, 1])", True, id="sets.equivalent"),
        pytest.param(f"{A}.productName.find('H[0-9]+') == 'H100'", True, id="find"),
        pytest.param(f"{A}.productName.findAll('[0-9]+').size() == 3", True, id="findAll"),
        # cel.CrossTypeNumericComparisons, heterogeneous equality.
        pytest.param(f"{A}.index < 0.5", True, id="int-lt-double"),
        pytest.param("2u > 1 && 1 <= 1u", True, id="uint-and-int"),
        pytest.param("1 == 1.0 && 1 != 2.5", True, id="int-eq-double"),
        pytest.param("1 in [1.0, 2.0]", True, id="int-in-doubles"),
        pytest.param("'a' == 1", False, id="mixed-types-unequal"),
        # compile.go declares it since DRAConsumableCapacity; false where the slice is silent.
        pytest.param("!device.allowMultipleAllocations", True, id="allowMultipleAllocations"),
        # cel.OptionalTypes.
        pytest.param(f"{A}.?profile.orValue('none') == 'none'", True, id="optional-field-absent"),
        pytest.param(f"{A}.?type.orValue('none') == 'gpu'", True, id="optional-field-present"),
        pytest.param(f"{A}[?'productName'].hasValue()", True, id="optional-index"),
        pytest.param(
            "device.attributes[?'other.example.com'].?x.hasValue()", False, id="optional-chain"
        ),
        pytest.param("optional.of(1).value() == 1", True, id="optional.of"),
        pytest.param("optional.none().or(optional.of(2)).value() == 2", True, id="optional.or"),
        pytest.param("!optional.ofNonZeroValue('').hasValue()", True, id="optional.ofNonZeroValue"),
        # library.SemverLib version 1 (normalize).
        pytest.param(
            f"{A}.driverVersion.isGreaterThan(semver('v570', true))", True, id="semver-normalize"
        ),
        pytest.param("isSemver('1.2', true) && !isSemver('1.2')", True, id="isSemver-normalize"),
    ],
)
def test_kubernetes_cel_libraries_are_evaluated(expression: str, want: bool) -> None:
    assert matches(expression) is want


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("cel.bind(x, 1, x + 1) == 2", id="cel.bind"),
        pytest.param("'%s'.format(['a']) == 'a'", id="format"),
        pytest.param("isIP('10.0.0.1')", id="ip"),
        pytest.param("url('https://x').getHost() == 'x'", id="url"),
        pytest.param("[?1].size() == 1", id="optional-list-element"),
        pytest.param("{'a': 1}.all(k, v, v > 0)", id="two-variable-comprehension"),
    ],
)
def test_a_library_this_webhook_lacks_is_not_evaluated_never_false(expression: str) -> None:
    compiled = compile_selector(expression)
    if isinstance(compiled, Selector):
        with pytest.raises(SelectorError) as raised:
            compiled.matches(H100)
        compiled = raised.value
    assert compiled.unsupported, compiled


def test_an_error_inside_a_comparison_stays_an_error() -> None:
    # celpy hands the comparison an error value; it must not compare as unequal.
    with pytest.raises(SelectorError) as raised:
        compile_selector(f"{A}.profile == 'x'").matches(H100)  # type: ignore[union-attr]
    assert not raised.value.unsupported  # no such key: the allocator fails the node too


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("a.?b", "a.optSelect('b')", id="field"),
        pytest.param("a[?'k'].?c", "a.optSelect('k').optSelect('c')", id="index-then-field"),
        pytest.param("a[b[?c]]", "a[b.optSelect(c)]", id="nested-brackets"),
        pytest.param("'.?x' == a.?x", "'.?x' == a.optSelect('x')", id="string-untouched"),
        pytest.param('"[?" + x', '"[?" + x', id="double-quoted-untouched"),
        pytest.param("[?a]", "[?a]", id="list-literal-left"),
    ],
)
def test_optional_syntax_is_rewritten_into_calls(text: str, want: str) -> None:
    assert desugar(text) == want


BOMB = "[0,1,2,3,4,5,6,7,8,9].all(a, " * 5 + "a >= 0" + ")" * 5


def test_a_comprehension_bomb_is_refused_before_it_runs() -> None:
    compiled = compile_selector(BOMB)
    assert isinstance(compiled, SelectorError)
    assert compiled.unsupported
    assert "too costly" in str(compiled)


def test_one_evaluation_stops_at_its_step_limit() -> None:
    # 10 x 10 x 10 iterations: within the review's budget by estimate, past one evaluation's.
    selector = compile_selector("[0,1,2,3,4,5,6,7,8,9].all(a, " * 3 + "a >= 0" + ")" * 3)
    assert isinstance(selector, Selector)
    assert EVALUATION_STEPS < selector.cost <= REVIEW_STEPS
    with review_budget() as budget, pytest.raises(SelectorError) as raised:
        selector.matches(H100)
    assert raised.value.unsupported
    assert not raised.value.spent
    assert REVIEW_STEPS - budget.left <= EVALUATION_STEPS + 1


def _until_refused(selector: Selector) -> SelectorError:
    for _ in range(1000):
        try:
            selector.matches(H100)
        except SelectorError as exc:
            return exc
    raise AssertionError("the budget never ran out")


def test_a_spent_review_budget_answers_at_once() -> None:
    selector = compile_selector("device.driver == 'gpu.nvidia.com'")
    assert isinstance(selector, Selector)
    with review_budget(steps=30) as budget:
        assert selector.matches(H100)  # a handful of steps
        refused = _until_refused(selector)
        assert refused.spent
        assert refused.unsupported
        assert budget.left <= 0
        assert _until_refused(selector).spent  # and from then on, before any step
    with review_budget():  # the next review has its own budget
        assert selector.matches(H100)


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("(" * 400 + "true" + ")" * 400, id="parentheses"),
        pytest.param("!" * 5000 + "true", id="negations"),
        pytest.param("[" * 3000 + "]" * 3000, id="lists"),
        pytest.param("(" * 100 + "true" + ")" * 100, id="evaluated-too-deep"),
    ],
)
def test_deep_nesting_is_not_evaluated_never_a_crash(expression: str) -> None:
    compiled = compile_selector(expression)
    if isinstance(compiled, Selector):
        with pytest.raises(SelectorError) as raised:
            compiled.matches(H100)
        compiled = raised.value
    assert compiled.unsupported


def test_compiling_is_charged_to_the_review_so_long_distinct_selectors_cannot_pin_it() -> None:
    long = [
        " || ".join(
            f"device.attributes['gpu.nvidia.com'].productName == 'n{n}-{i}'" for i in range(150)
        )
        for n in range(40)
    ]
    with review_budget() as budget:
        answers = [compile_selector(text) for text in long]
    compiled = [a for a in answers if isinstance(a, Selector)]
    refused = [a for a in answers if isinstance(a, SelectorError)]
    assert refused, "40 selectors of 9,000 characters fit one review's budget"
    assert all(a.spent and a.unsupported for a in refused)
    assert len(compiled) * len(long[0]) // 2 <= REVIEW_STEPS
    assert budget.left >= 0
    # A refusal for this review's budget is not kept: the next review compiles it.
    with review_budget():
        assert isinstance(compile_selector(long[-1]), Selector)


LISTED = device_from_json(
    {"name": "gpu-1", "attributes": {"links": {"strings": ["nvlink"]}, "type": {"string": "gpu"}}},
    driver="gpu.nvidia.com",
    pool="node-a",
).view()


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param(f"'nvlink' in {A}.links", id="in"),
        pytest.param(f"{A}.links == 'nvlink'", id="equality"),
        pytest.param(f"{A}.links.exists(l, l == 'nvlink')", id="comprehension"),
    ],
)
def test_an_attribute_of_a_kind_not_read_here_is_not_evaluated_never_missing(
    expression: str,
) -> None:
    # A list-valued attribute (DRAListTypeAttributes) is there for the allocator: reading
    # it as missing would fail the device where Kubernetes may match it.
    selector = compile_selector(expression)
    assert isinstance(selector, Selector)
    with pytest.raises(SelectorError) as raised:
        selector.matches(LISTED)
    assert raised.value.unsupported
    assert compile_selector(f"has({A}.links) && {A}.type == 'gpu'").matches(LISTED)  # type: ignore[union-attr]
