"""Odd shapes of ResourceClaims and Pods, and the JSON usage file.

Every realistic claim and pod with one field under spec/status deleted or replaced by a value of another
type loads without an error: what does not parse is an `unparsable` finding naming the object, and the
realistic objects themselves give none. A JSON usage file gives its entries or an error naming the file
and the field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from automator.dra.load import DraInputError, load_objects, load_usage_file
from automator.dra.model import UNPARSABLE
from tests.automator.fixtures.dra import builders as b

Obj = dict[str, Any]
FIXTURE = Path(__file__).parents[1] / "fixtures" / "dra" / "hami-cluster.yaml"

# What a field is replaced by: other types, empty values, odd quantities.
ODD: tuple[Any, ...] = (None, "", 0, 7, True, 1.5, "x", "-1", "1e400", [], [1], {}, {"a": 1}, {"name": 3})


def fixture_objects(kind: str) -> list[Obj]:
    objects = [o for doc in yaml.safe_load_all(FIXTURE.read_text()) if doc for o in doc.get("items", [doc])]
    return [o for o in objects if o.get("kind") == kind]


def realistic_claims() -> list[Obj]:
    status_claim = b.claim("ml", "two", [b.result("n1", 0, {"memory": "1Gi"}), b.result("n1", 1, None)])
    status_claim["status"]["reservedFor"] = [
        {"resource": "pods", "name": "p", "uid": "u1"},
        {"apiGroup": "batch", "resource": "jobs", "name": "j", "uid": "u2"},
    ]
    return [
        b.shared_claim("ml", "a-gpu", "n1", 0, "20", "16Gi", "a"),
        b.shared_claim("ml", "b-gpu", "n1", 0, "20", str(16000 * b.MIB), "b"),
        b.claim("ml", "pending", None),
        b.claim("ml", "exclusive", [b.result("n1", 1, None)], ["c"]),
        status_claim,
        *fixture_objects("ResourceClaim"),
    ]


def realistic_pods() -> list[Obj]:
    templated = b.pod("ml", "t", "n1", {"gpu": "t-gpu"})
    templated["status"]["resourceClaimStatuses"] = [
        {"name": "gpu", "resourceClaimName": "other"},
        {"name": "extra", "resourceClaimName": "t-extra"},
    ]
    templated["spec"]["initContainers"] = [
        {"name": "init", "resources": {"claims": [{"name": "gpu", "request": "gpu"}]}},
        {"name": "plain", "resources": {"limits": {"cpu": "1"}}},
        {"name": "bare"},
    ]
    return [
        b.pod("ml", "a", "n1", {"gpu": "a-gpu"}),
        b.pod("ml", "pending", None, {"gpu": "p-gpu", "more": "p-more"}),
        b.pod("ml", "plain", "n1", {}),
        templated,
        *fixture_objects("Pod"),
    ]


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every map key and list index under `value`, outermost first."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        yield (*prefix, key)
        yield from paths(child, (*prefix, key))


def variants(obj: Obj) -> Iterator[tuple[str, Obj]]:
    """The object with one field under spec/status deleted or replaced by each of ODD."""
    for path in paths({"spec": obj.get("spec"), "status": obj.get("status")}):
        parent_path, key = path[:-1], path[-1]
        for replacement in ("<deleted>", *ODD):
            copied = copy.deepcopy(obj)
            parent: Any = copied
            for step in parent_path:
                parent = parent[step]
            if replacement == "<deleted>":
                del parent[key]
            else:
                parent[key] = copy.deepcopy(replacement)
            yield f"{'.'.join(map(str, path))}={replacement!r}", copied


def test_realistic_objects_give_no_finding() -> None:
    records = load_objects((obj, "test") for obj in [*realistic_claims(), *realistic_pods()])
    assert records.findings == [] and len(records.claims) == len(realistic_claims())


@pytest.mark.parametrize("kind", ["ResourceClaim", "Pod"])
def test_every_one_field_variant_loads_and_names_the_object(kind: str) -> None:
    objects = realistic_claims() if kind == "ResourceClaim" else realistic_pods()
    unparsable = 0
    for obj in objects:
        label = f"{kind} {obj['metadata']['namespace']}/{obj['metadata']['name']}: "
        for what, variant in variants(obj):
            records = load_objects([(variant, "test")])
            assert len(records.claims if kind == "ResourceClaim" else records.pods) == 1, what
            for finding in records.findings:
                assert finding.kind == UNPARSABLE and finding.message.startswith(label), (what, finding)
            unparsable += bool(records.findings)
    assert unparsable


_ROW = '{"namespace": "ml", "pod": "a", "container": "c", "gpu_uuid": "G", "memory_bytes": %s}'


@pytest.mark.parametrize(
    ("text", "outcome"),
    [
        (
            json.dumps({"containers": [b.usage("ml", "a", "GPU-1", 2**70)]}),
            "memory_bytes: 1180591620717411303424 is not between 0 and 2^63",
        ),
        (
            json.dumps({"containers": [b.usage("ml", "a", "GPU-1", -1)]}),
            "memory_bytes: -1 is not between 0 and 2^63",
        ),
        (json.dumps({"containers": {}}), "containers: expected a list"),
        (json.dumps([{"containers": []}]), "expected one YAML mapping with a `containers` list"),
        ('{"containers": [%s]}' % (_ROW % "NaN"), "memory_bytes: 'NaN' is not a number"),
        ('{"containers": [%s]}' % (_ROW % "1e400"), "refused: Number out of range"),
        ('{"containers": [', "not valid YAML/JSON"),
        ('{"containers": [], "containers": [%s]}' % (_ROW % "5"), [("ml", "a", "c", "G", 5)]),
        ("containers: []", []),
        (
            json.dumps({"containers": [b.usage("ml", "a", "GPU-1", 1.5e9)]}, indent=2),
            [("ml", "a", "main", "GPU-1", 1.5e9)],
        ),
    ],
)
def test_json_usage_file(tmp_path: Path, text: str, outcome: Any) -> None:
    """JSON usage files (told by content) take the general reader's path: the last of repeated keys wins,
    what JSON cannot hold is refused, and every error names the file and the field."""
    path = tmp_path / "usage.json"
    path.write_text(text)
    if isinstance(outcome, str):
        with pytest.raises(DraInputError) as caught:
            load_usage_file(path)
        assert str(caught.value).startswith(str(path)) and outcome in str(caught.value)
    else:
        assert [tuple(u) for u in load_usage_file(path)] == [
            (*row[:4], Decimal(str(row[4]))) for row in outcome
        ]
