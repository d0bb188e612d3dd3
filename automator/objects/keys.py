"""How a Kubernetes object is given and named: its JSON form and its namespace/name key. Pure."""

from __future__ import annotations

from typing import Any, NamedTuple

# A Kubernetes object as the API / kubectl JSON gives it (camelCase keys).
JsonObj = dict[str, Any]


class ObjectKey(NamedTuple):
    """A namespaced object's namespace and name (a tuple: built, hashed and compared in C, as a pass does
    for every pod); str() is "namespace/name"."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> ObjectKey:
        """Parse "namespace/name"; ValueError otherwise."""
        parts = text.split("/")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError(f"expected NAMESPACE/NAME, got {text!r}")
        return cls(parts[0], parts[1])

    @classmethod
    def of(cls, obj: JsonObj) -> ObjectKey:
        """Key of a Kubernetes object from its metadata (namespace defaults to "default")."""
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
