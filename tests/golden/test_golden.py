"""`plan`, `explain` and `dra-check` answer byte for byte what tests/golden/corpus.json froze.

The corpus is the behaviour the restructuring must keep: a difference here is a changed answer (exit
code, stdout or stderr), not a test to update. After a deliberate change of behaviour, regenerate it with
`python -m tests.golden.make_corpus` and say why in the commit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.golden import make_corpus

CASES = {case.name: case for case in make_corpus.cases()}


@pytest.fixture(scope="module")
def corpus() -> dict[str, Any]:
    frozen: dict[str, Any] = json.loads(make_corpus.CORPUS.read_text())
    return frozen


def test_corpus_holds_every_case(corpus: dict[str, Any]) -> None:
    assert sorted(corpus) == sorted(CASES)


def test_corpus_covers_the_plan_set_and_each_kind(corpus: dict[str, Any]) -> None:
    plans = [n for n in corpus if n.startswith("bench-") and n.endswith("-plan-json")]
    assert len(plans) == 24
    for kind in ("pod", "node", "pdb", "priorityclass", "claim", "slice", "deviceclass"):
        assert any(f"-{kind}-" in n for n in corpus if n.startswith("malformed-")), kind
    # no malformed input crashes a command: each is a clean answer or a clean error naming the field
    assert not [n for n, record in corpus.items() if "exception" in record]


@pytest.mark.parametrize("name", sorted(CASES))
def test_answer_is_unchanged(name: str, corpus: dict[str, Any]) -> None:
    assert make_corpus.run_case(CASES[name]) == corpus[name]
