"""Parsing the files a user hands in (cluster, usage, DRA, scenario, web-config files), bounded (pure).

YAML aliases let a few hundred bytes stand for billions of nodes ("billion laughs"): the parser shares
them, but every reader that walks the result pays for each one. A document that uses anchors is
therefore measured, as written and as expanded, before it is built: past the limits, or when an alias
refers to its own ancestor, it is refused. Deep nesting (RecursionError) and numbers Python will not
convert (ValueError past its 4,300-digit limit) become the same error, so every reader reports the file
instead of crashing.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import yaml

# For a document with anchors (one without is as large as its file, and its nesting is bounded by the
# parser and the recursion limit): the nodes it may expand to, how many of them aliases may add beyond
# those written, and its nesting (a Kubernetes object is a few dozen levels deep at most).
MAX_NODES = 20_000_000
MAX_ALIAS_NODES = 100_000
MAX_DEPTH = 200


class UnreadableError(ValueError):
    """A file is refused: too large once expanded, self-referential, too deep, or a number out of range."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    value = node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in value for n in pair]
    return list(value) if isinstance(node, yaml.SequenceNode) else []


def check_node(root: yaml.Node) -> None:
    """Refuse a composed document that expands past the limits or holds an alias to its own ancestor.

    Iterative, each distinct node measured once (its expanded size and height remembered), so a billion
    laughs costs what it takes to write down, not what it expands to."""
    measured: dict[int, tuple[int, int]] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, list[yaml.Node] | None]] = [(root, None)]
    while stack:
        node, children = stack.pop()
        key = id(node)
        if children is not None:  # its children are measured: now the node itself
            size, height = 1, 0
            for child in children:
                child_size, child_height = measured[id(child)]
                size += child_size
                if child_height > height:
                    height = child_height
            height += 1
            if size > MAX_NODES:
                raise UnreadableError(f"more than {MAX_NODES} nodes once aliases are expanded")
            if height > MAX_DEPTH:
                raise UnreadableError(f"nested more than {MAX_DEPTH} levels deep")
            open_nodes.discard(key)
            measured[key] = (size, height)
            continue
        if key in measured:
            continue
        if isinstance(node, yaml.ScalarNode):
            measured[key] = (1, 1)
            continue
        if key in open_nodes:  # reached again inside its own subtree: an alias to an ancestor
            line = node.start_mark.line + 1
            raise UnreadableError(f"line {line}: an alias refers to a node that contains it")
        open_nodes.add(key)
        children = _children(node)
        stack.append((node, children))
        stack.extend([(child, None) for child in children if id(child) not in measured])
    expanded = measured[id(root)][0]
    if expanded - len(measured) > MAX_ALIAS_NODES:
        raise UnreadableError(f"aliases expand to more than {MAX_ALIAS_NODES} nodes beyond those written")


# An anchor (`&name`) comes after a line start, a space (or line break), a flow indicator, `:` or `?`; an
# `&` anywhere else (a URL's query string, say) is text. Without an anchor there is no alias: nothing
# expands and nothing refers back, and the document is as large as the file, so it is not measured.
_BEFORE_ANCHOR = frozenset(" \t\r\n\x85\u2028\u2029\ufeff[{,:?")  # what libyaml and PyYAML accept there


def has_anchor(text: str) -> bool:
    """Whether `text` may hold a YAML anchor (never False for one that does)."""
    at = text.find("&")
    while at != -1:
        if at == 0 or text[at - 1] in _BEFORE_ANCHOR:
            return True
        at = text.find("&", at + 1)
    return False


def _unreadable(exc: RecursionError | ValueError) -> UnreadableError:
    if isinstance(exc, UnreadableError):
        return exc
    if isinstance(exc, RecursionError):
        return UnreadableError("nested too deeply")
    return UnreadableError(str(exc).split("; use sys.set_int_max_str_digits")[0])


def yaml_documents(text: str, loader: Callable[[str], Any]) -> Iterator[Any]:
    """yaml.load_all with `loader` (a SafeLoader class), each document checked by check_node first when
    the text has an anchor at all; the parser's errors on one line.
    yaml.YAMLError when malformed, UnreadableError past the limits."""
    check = has_anchor(text)
    parser = loader(text)
    try:
        while parser.check_node():
            node = parser.get_node()
            if check:
                check_node(node)
            try:
                yield parser.construct_document(node)
            except (RecursionError, ValueError) as exc:
                raise _unreadable(exc) from None
    except RecursionError as exc:
        raise _unreadable(exc) from None
    except yaml.MarkedYAMLError as exc:
        # one line (the parser's spans several): an error message is one line wherever it is shown
        raise yaml.YAMLError(" ".join(str(exc).split())) from None
    finally:
        parser.dispose()


def yaml_document(text: str, loader: Callable[[str], Any]) -> Any:
    """One YAML document (None when empty), as yaml.load does, bounded as yaml_documents."""
    docs = list(itertools.islice(yaml_documents(text, loader), 2))
    if len(docs) > 1:
        raise yaml.YAMLError("expected a single document in the stream, found another")
    return docs[0] if docs else None


def json_document(data: str | bytes, **hooks: Any) -> Any:
    """json.loads; json.JSONDecodeError when malformed, UnreadableError when nested too deeply or a
    number is past Python's conversion limit."""
    try:
        return json.loads(data, **hooks)
    except json.JSONDecodeError:
        raise
    except (RecursionError, ValueError) as exc:
        raise _unreadable(exc) from None
