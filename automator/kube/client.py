"""The Kubernetes client's plumbing shared by the adapters: the ApiClient, errors, paging, timeouts.

Every call has a timeout and no hidden retries; a failed call becomes KubernetesUnavailable naming it.
Lists are read in pages of PAGE_SIZE as JSON bytes (`_preload_content=False`): no client objects are built.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from automator.objects.keys import JsonObj
from automator.ports import KubernetesUnavailable

PAGE_SIZE = 500
# Finished pods hold nothing; leaving them out keeps a big cluster's list small.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
# This client version drops _content_type on POST; the header itself always goes through.
JSON_HEADERS = {"Content-Type": "application/json"}
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (urllib3.exceptions.HTTPError, OSError)

# One page's items (records or objects) and its continue token (None on the last page), from its JSON bytes.
_T = TypeVar("_T")
PageDecoder = Callable[[bytes], tuple[list[_T], str | None]]


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or the pod's service account when none is given."""
    cfg = client.Configuration()
    # No hidden retries: a call's time is bounded by its own timeout; the next pass or round tries again.
    cfg.retries = False
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
    return client.ApiClient(cfg)


def status_message(e: ApiException) -> str:
    """The Status message the API server sent, else the HTTP reason."""
    try:
        body = json.loads(e.body or "")
        return str(body.get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


def retry_after(e: ApiException) -> float | None:
    """The Retry-After header of an answer, in seconds (None when absent or not a number)."""
    headers = e.headers or {}
    raw = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(raw) if raw is not None else None
    except ValueError:
        return None


@contextmanager
def api_call(what: str, *also: type[Exception]) -> Iterator[None]:
    """Turn a failed API call (or one of `also`) into KubernetesUnavailable naming the call."""
    try:
        yield
    except ApiException as e:
        raise KubernetesUnavailable(f"{what}: {e.status} {status_message(e)}") from e
    except (*TRANSPORT_ERRORS, *also) as e:
        raise KubernetesUnavailable(f"{what}: {e}") from e


def records_of(record: Callable[[JsonObj], _T]) -> PageDecoder[_T]:
    """Decode a page straight into records, `record(item)` of each item; ValueError for an item that is not
    an object."""

    def decode(data: bytes) -> tuple[list[_T], str | None]:
        body = json.loads(data)
        items = body.get("items") or []
        if not all(isinstance(item, dict) for item in items):
            raise ValueError("a list item is not an object")
        return [record(item) for item in items], (body.get("metadata") or {}).get("continue") or None

    return decode


def objects_of(kind: str, api_version: str) -> PageDecoder[JsonObj]:
    """Decode a page into whole objects, managedFields dropped, kind and apiVersion set as `kubectl get -o
    json` shows them (list items carry none)."""

    def whole(item: JsonObj) -> JsonObj:
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
        (item.get("metadata") or {}).pop("managedFields", None)
        return item

    return records_of(whole)


def list_all(
    what: str, call: Callable[..., Any], decode: PageDecoder[_T], timeout: float, **kwargs: Any
) -> Iterator[_T]:
    """The items of every page of a list call (`call` is a client method such as CoreV1Api.list_node),
    each page decoded by `decode`; KubernetesUnavailable("list <what>: ...") on any failure."""
    token: str | None = None
    while True:
        with api_call(f"list {what}", ValueError):  # ValueError: a body that is not JSON
            resp = call(
                limit=PAGE_SIZE, _continue=token, _preload_content=False, _request_timeout=timeout, **kwargs
            )
            items, token = decode(resp.data)
        yield from items
        if token is None:
            return
