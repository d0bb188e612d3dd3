"""KEDA external scaler over gRPC (KEDA's externalscaler.proto), reading the same cache as the HTTP endpoint.

Trigger metadata: deployment | statefulset | selector, profile, signal, aggregation, window, metricType,
targetValue, activationThreshold; the namespace is the ScaledObject's own (a metadata `namespace` naming
another is refused), the workload by default its scale target. KEDA's external scaler sends no per-call
metadata and authenticates with mutual TLS only (pkg/scalers/external_scaler.go): with any credential
configured the server speaks TLS and requires a client certificate the client CA signed, and nothing else
(a token in metadata admits nothing); without credentials it is open. Errors are gRPC statuses:
UNAUTHENTICATED, PERMISSION_DENIED (another namespace), INVALID_ARGUMENT naming the key, NOT_FOUND (no such
workload, or a question no ScaledObject declares), UNAVAILABLE when data is missing or stale (KEDA's
fallback applies), RESOURCE_EXHAUSTED when too many StreamIsActive streams are open. A bounded thread
pool serves the calls; streams take at most --keda-grpc-max-streams of its threads.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, NoReturn, TypeVar

import grpc

from automator.keda.answers import Answerer
from automator.keda.auth import AuthConfig
from automator.keda.cache import Answer
from automator.keda.certs import Loaded, ReloadingTLS
from automator.keda.externalscaler import externalscaler_pb2 as pb
from automator.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from automator.keda.http import no_value_json
from automator.keda.metrics import KedaMetrics
from automator.keda.request import WORKLOAD_KINDS, ParamError, Question, question
from automator.keda.table import NotDeclared
from automator.keda.values import NoValue
from automator.keda.workloads import UnknownWorkload

log = logging.getLogger(__name__)
T = TypeVar("T")
_NAME_CHARS = re.compile(r"[^a-z0-9-]+")


class OtherNamespace(PermissionError):
    """Trigger metadata naming a namespace other than the ScaledObject's (gRPC PERMISSION_DENIED)."""


def peer_host(peer: str | None) -> str | None:
    """The address of a gRPC peer (`ipv4:10.0.0.7:51234`, `ipv6:[::1]:51234`) without its port."""
    if not peer:
        return None
    address = peer.partition(":")[2] or peer
    return address.rpartition(":")[0].strip("[]") or address


def metric_name(q: Question) -> str:
    """The metric's name in the HPA: signal and aggregation (KEDA prefixes the trigger index)."""
    return _NAME_CHARS.sub("-", f"gpu-{q.signal.name}-{q.aggregation}".lower().replace("_", "-"))


class ExternalScaler(pb_grpc.ExternalScalerServicer):  # type: ignore[misc]
    def __init__(
        self,
        cache: Answerer,
        metrics: KedaMetrics | None = None,
        max_streams: int = 4,
        stream_interval: float | None = None,
        auth: AuthConfig | None = None,
        client_verified: bool = False,
    ) -> None:
        """`client_verified`: the server requires a client certificate signed by the client CA."""
        self.cache = cache
        self.auth = auth or AuthConfig()
        self.client_verified = client_verified
        self.metrics = metrics
        self._streams = threading.BoundedSemaphore(max_streams) if max_streams > 0 else None
        self.stream_interval = stream_interval or cache.refresh_seconds
        self._stopping = threading.Event()

    def _count(self, code: grpc.StatusCode) -> None:
        if self.metrics is not None:
            self.metrics.requests.labels("grpc", code.name).inc()

    def _abort(self, context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
        self._count(code)
        context.abort(code, message)
        raise AssertionError("unreachable")  # abort raises

    def _authorize(self, context: grpc.ServicerContext) -> None:
        # Credentials configured: only a client certificate the server verified (the TLS handshake refuses
        # every other connection, so this holds by construction); per-call metadata is never read.
        if self.auth.enabled and not self.client_verified:
            self._abort(context, grpc.StatusCode.UNAUTHENTICATED, "mutual TLS is required")

    def _call(self, context: grpc.ServicerContext, fn: Callable[[], T]) -> T:
        self._authorize(context)
        try:
            result = fn()
        except OtherNamespace as e:
            self._abort(context, grpc.StatusCode.PERMISSION_DENIED, str(e))
        except ParamError as e:
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"{e.parameter}: {e.message}")
        except (UnknownWorkload, NotDeclared) as e:
            self._abort(context, grpc.StatusCode.NOT_FOUND, str(e))
        except NoValue as e:
            body = no_value_json(e)
            self._abort(context, grpc.StatusCode.UNAVAILABLE, f"{body['error']}: {body['reason']}")
        return result

    def _question(self, ref: Any) -> Question:
        """The question of the ScaledObject, pinned to its own namespace; the workload by default its
        scale target (as the ScaledObject's declaration reads it)."""
        meta = dict(ref.scalerMetadata)
        if not ref.namespace:
            raise ParamError("namespace", "the ScaledObjectRef names no namespace")
        asked = meta.pop("namespace", None)
        if asked and asked != ref.namespace:
            raise OtherNamespace("namespace: a ScaledObject reads its own namespace only")
        if not any(meta.get(k) for k in WORKLOAD_KINDS):
            target = self.cache.target_of((ref.namespace, ref.name))
            if target is not None:
                meta[target[0].lower()] = target[1]
            elif self.cache.declared:  # not listed yet: its scale target is known at the next refresh
                raise NoValue(
                    "warming_up", f"ScaledObject {ref.namespace}/{ref.name} is read at the next refresh"
                )
        return question(meta, default_namespace=ref.namespace)

    def _answer(self, ref: Any, context: grpc.ServicerContext) -> tuple[Question, Answer]:
        q = self._question(ref)
        asker = (ref.namespace, ref.name) if ref.name else None
        return q, self.cache.answer(q, None, asker, peer_host(context.peer()))

    @staticmethod
    def _active(q: Question, a: Answer) -> bool:
        return a.value.value > (q.activation or 0.0)

    def IsActive(self, request: Any, context: grpc.ServicerContext) -> Any:
        q, a = self._call(context, lambda: self._answer(request, context))
        self._count(grpc.StatusCode.OK)
        return pb.IsActiveResponse(result=self._active(q, a))

    def StreamIsActive(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        self._authorize(context)
        if self._streams is None or not self._streams.acquire(blocking=False):
            self._abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, "too many StreamIsActive streams")
        try:
            last: bool | None = None
            while context.is_active() and not self._stopping.is_set():
                q, a = self._call(context, lambda: self._answer(request, context))
                active = self._active(q, a)
                if active != last:
                    self._count(grpc.StatusCode.OK)
                    yield pb.IsActiveResponse(result=active)
                    last = active
                self._stopping.wait(self.stream_interval)
        finally:
            self._streams.release()

    def GetMetricSpec(self, request: Any, context: grpc.ServicerContext) -> Any:
        q = self._call(context, lambda: self._question(request))
        if q.target is None:
            self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, "targetValue: required without a profile")
        self._count(grpc.StatusCode.OK)
        spec = pb.MetricSpec(
            metricName=metric_name(q), targetSize=max(1, round(q.target)), targetSizeFloat=q.target
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    def GetMetrics(self, request: Any, context: grpc.ServicerContext) -> Any:
        q, a = self._call(context, lambda: self._answer(request.scaledObjectRef, context))
        self._count(grpc.StatusCode.OK)
        value = pb.MetricValue(
            metricName=request.metricName or metric_name(q),
            metricValue=round(a.value.value),
            metricValueFloat=a.value.value,
        )
        return pb.GetMetricsResponse(metricValues=[value])

    def stop(self) -> None:
        self._stopping.set()


def serve(
    scaler: ExternalScaler,
    address: str,
    port: int,
    workers: int,
    tls: ReloadingTLS | None = None,
) -> tuple[grpc.Server, int]:
    """Start the gRPC server; returns it and its port. `tls` (with a client CA): TLS requiring a client
    certificate the CA signed, the certificates reloaded when their files change (gRPC asks on every new
    handshake; connections in flight keep theirs); without it plaintext (keep it on a cluster-internal
    Service)."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="keda-grpc"),
        maximum_concurrent_rpcs=workers * 4,  # beyond: RESOURCE_EXHAUSTED, never an unbounded queue
        options=[("grpc.max_receive_message_length", 1 << 20)],
    )
    pb_grpc.add_ExternalScalerServicer_to_server(scaler, server)
    if tls is not None:
        served = [tls.loaded]

        def configuration(loaded: Loaded) -> Any:
            return grpc.ssl_server_certificate_configuration([(loaded.key, loaded.cert)], loaded.ca)

        def fetch() -> Any:
            loaded = tls.current()
            if loaded is served[0]:
                return None  # unchanged
            served[0] = loaded
            return configuration(loaded)

        credentials = grpc.dynamic_ssl_server_credentials(
            configuration(tls.loaded), fetch, require_client_authentication=True
        )
        bound = server.add_secure_port(f"{address}:{port}", credentials)
    else:
        bound = server.add_insecure_port(f"{address}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen on {address}:{port} for the KEDA external scaler")
    server.start()
    return server, bound
