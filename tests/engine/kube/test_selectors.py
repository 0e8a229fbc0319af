import pytest

from webhook.engine.kube.selectors import (
    label_selector_matches,
    terms_match,
    tolerates,
    toleration_covers,
)

LABELS = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920"}


@pytest.mark.parametrize(
    ("expr", "matches"),
    [
        pytest.param(
            {
                "key": "nvidia.com/gpu.product",
                "operator": "In",
                "values": ["NVIDIA-A100-SXM4-80GB"],
            },
            True,
            id="in",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["Tesla-T4"]},
            True,
            id="not-in",
        ),
        pytest.param(
            {"key": "absent", "operator": "NotIn", "values": ["x"]}, True, id="not-in-absent-key"
        ),
        pytest.param({"key": "nvidia.com/gpu.product", "operator": "Exists"}, True, id="exists"),
        pytest.param(
            {"key": "nvidia.com/gpu.product", "operator": "DoesNotExist"},
            False,
            id="does-not-exist",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["16384"]}, True, id="gt"
        ),
        pytest.param(
            {"key": "nvidia.com/gpu.memory", "operator": "Lt", "values": ["16384"]}, False, id="lt"
        ),
        pytest.param(
            {"key": "nvidia.com/gpu.product", "operator": "Gt", "values": ["1"]},
            False,
            id="gt-non-integer-label",
        ),
    ],
)
def test_node_selector_requirements_follow_kubernetes(
    expr: dict[str, object], matches: bool
) -> None:
    assert terms_match([{"matchExpressions": [expr]}], LABELS, "node-a") is matches


def test_terms_are_ored_and_an_empty_term_matches_nothing() -> None:
    never = {"matchExpressions": [{"key": "absent", "operator": "Exists"}]}
    always = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "Exists"}]}
    assert terms_match([never, always], LABELS, "n")
    assert not terms_match([{}], LABELS, "n")


def test_match_fields_select_nodes_by_name() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    assert terms_match([term], {}, "node-a")
    assert not terms_match([term], {}, "node-b")


def test_label_selectors_combine_labels_and_expressions() -> None:
    selector = {
        "matchLabels": {"team": "a"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}],
    }
    assert label_selector_matches(selector, {"team": "a", "tier": "gold"})
    assert not label_selector_matches(selector, {"team": "a", "tier": "bronze"})
    assert label_selector_matches({}, {})


TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            True,
            id="exists",
        ),
        pytest.param({"key": "nvidia.com/gpu", "value": "present"}, True, id="equal-any-effect"),
        pytest.param({"operator": "Exists"}, True, id="blanket"),
        pytest.param({"key": "nvidia.com/gpu", "value": "other"}, False, id="other-value"),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
            False,
            id="other-effect",
        ),
        pytest.param({"key": "", "operator": "Equal"}, False, id="empty-key-equal"),
    ],
)
def test_tolerations_tolerate_taints_as_kubernetes_does(
    toleration: dict[str, str], tolerated: bool
) -> None:
    assert tolerates(toleration, **TAINT) is tolerated


WANTED = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("existing", "covers"),
    [
        pytest.param(WANTED, True, id="same"),
        pytest.param({"operator": "Exists"}, True, id="blanket-exists"),
        pytest.param({"key": "nvidia.com/gpu", "operator": "Exists"}, True, id="any-effect"),
        pytest.param(
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            False,
            id="one-value-only",
        ),
        pytest.param(
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"},
            False,
            id="other-effect",
        ),
    ],
)
def test_an_existing_toleration_covers_a_wanted_one_in_any_form(
    existing: dict[str, str], covers: bool
) -> None:
    assert toleration_covers(existing, WANTED) is covers
