import pytest

from eventhub_balancer_devstack.kube import patching


def test_merge_patch_merges_maps_deletes_nulls_and_replaces_lists() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "gone": 1}
    result = patching.merge(target, {"a": {"b": 9}, "l": [3], "gone": None, "new": {"x": 1}})
    assert result == {"a": {"b": 9, "c": 2}, "l": [3], "new": {"x": 1}}
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2], "gone": 1}  # not modified


def test_json_patch_operations() -> None:
    target = {"metadata": {"resourceVersion": "5", "finalizers": ["a"]}, "spec": {"x": 1}}
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
        {"op": "add", "path": "/metadata/finalizers/-", "value": "b"},
        {"op": "replace", "path": "/spec/x", "value": 2},
        {"op": "copy", "from": "/spec/x", "path": "/spec/y"},
        {"op": "move", "from": "/spec/y", "path": "/spec/z"},
        {"op": "remove", "path": "/metadata/finalizers/0"},
        {"op": "add", "path": "/metadata/annotations", "value": {"a~b/c": "1"}},
        {"op": "remove", "path": "/metadata/annotations/a~0b~1c"},
    ]
    result = patching.apply_json_patch(target, ops)
    assert result == {
        "metadata": {"resourceVersion": "5", "finalizers": ["b"], "annotations": {}},
        "spec": {"x": 2, "z": 2},
    }
    assert target["spec"] == {"x": 1}


def test_failed_test_operation_refuses_the_whole_patch() -> None:
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": "4"},
        {"op": "add", "path": "/x", "value": 1},
    ]
    with pytest.raises(patching.PatchTestFailed):
        patching.apply_json_patch({"metadata": {"resourceVersion": "5"}}, ops)


@pytest.mark.parametrize(
    "ops",
    [
        [{"op": "remove", "path": "/missing"}],
        [{"op": "replace", "path": "/missing", "value": 1}],
        [{"op": "add", "path": "/a/b/c", "value": 1}],
        [{"op": "frobnicate", "path": "/a"}],
        [{"path": "/a"}],
        {"op": "add"},
    ],
)
def test_malformed_json_patches_are_refused(ops: object) -> None:
    with pytest.raises(patching.PatchError):
        patching.apply_json_patch({"a": {}}, ops)
