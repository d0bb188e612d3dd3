"""`keda scaledobject --keda-version`: objects the named KEDA's admission accepts; names within its limit."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from automator import cli
from automator.keda.scaledobject import CURRENT_KEDA, MAX_NAME, VALUE_WITH_FALLBACK_KEDA, parse_keda_version
from automator.keda.signals import PROFILES


def _scaled_object(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert cli.main(["keda", "scaledobject", "--namespace", "ml", *argv]) == 0, capsys.readouterr().err
    (obj,) = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o["kind"] == "ScaledObject"]
    return obj


def _query(trigger: dict[str, Any]) -> dict[str, list[str]]:
    return parse_qs(urlsplit(trigger["metadata"]["url"]).query)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_before_2_18_value_with_fallback_becomes_average_value_over_sum(
    capsys: pytest.CaptureFixture[str], profile: str
) -> None:
    current = _scaled_object(capsys, "--deployment", "api", "--profile", profile)
    old = _scaled_object(capsys, "--deployment", "api", "--profile", profile, "--keda-version", "2.17")
    (new_trigger,), (old_trigger,) = current["spec"]["triggers"], old["spec"]["triggers"]
    assert "fallback" in current["spec"] and "fallback" in old["spec"]
    assert new_trigger["metricType"] == PROFILES[profile].metric_type == "Value"
    assert "aggregation" not in _query(new_trigger)
    # KEDA 2.17's webhook refuses fallback with Value: AverageValue over the sum (the HPA divides by the
    # replicas, so ceil(sum / target) = ceil(replicas x avg / target), Value's arithmetic over avg).
    assert old_trigger["metricType"] == "AverageValue"
    assert _query(old_trigger)["aggregation"] == ["sum"]
    assert old_trigger["metadata"]["targetValue"] == new_trigger["metadata"]["targetValue"]
    same = _scaled_object(capsys, "--deployment", "api", "--profile", profile, "--keda-version", "2.18.0")
    assert same == current


def test_before_2_18_an_aggregation_without_average_value_equivalent_exits_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["keda", "scaledobject", "--namespace", "ml", "--deployment", "api", "--profile", "training"]
    assert cli.main([*argv, "--keda-version", "2.16", "--aggregation", "max"]) == 2
    err = capsys.readouterr().err
    assert "--keda-version 2.16" in err and "2.18" in err


def test_names_over_kedas_limit_exit_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    longest = "a" * (MAX_NAME - len("-gpu"))
    assert _scaled_object(capsys, "--deployment", longest, "--profile", "training")["metadata"]["name"] == (
        f"{longest}-gpu"
    )
    argv = ["keda", "scaledobject", "--namespace", "ml", "--profile", "training"]
    assert cli.main([*argv, "--deployment", longest + "b"]) == 2
    err = capsys.readouterr().err
    assert f"at most {MAX_NAME}" in err and "keda-hpa-" in err


@pytest.mark.parametrize("text", ["3.0", "1.9", "2", "2.x", "2.17.1.1", "", "2.99999"])
def test_bad_keda_versions_exit_2(capsys: pytest.CaptureFixture[str], text: str) -> None:
    argv = ["keda", "scaledobject", "--namespace", "ml", "--deployment", "api", "--profile", "training"]
    assert cli.main([*argv, "--keda-version", text]) == 2
    assert "--keda-version" in capsys.readouterr().err


def test_versions_parse() -> None:
    assert parse_keda_version("v2.17.3") == (2, 17)
    assert parse_keda_version("2.20") == CURRENT_KEDA
    assert VALUE_WITH_FALLBACK_KEDA == (2, 18)


def test_auth_tls_writes_the_mutual_tls_trigger_authentication(capsys: pytest.CaptureFixture[str]) -> None:
    """KEDA's `authModes: tls` sends its certificate and key and checks the automator's with `ca`."""
    argv = ["keda", "scaledobject", "--namespace", "ml", "--deployment", "api", "--profile", "training"]
    assert cli.main([*argv, "--auth", "tls"]) == 0, capsys.readouterr().err
    docs = {o["kind"]: o for o in yaml.safe_load_all(capsys.readouterr().out)}
    (trigger,) = docs["ScaledObject"]["spec"]["triggers"]
    assert trigger["metadata"]["authMode"] == "tls"
    assert urlsplit(trigger["metadata"]["url"]).scheme == "https"
    assert urlsplit(trigger["metadata"]["url"]).port == 8443  # deploy/components/keda-tls
    refs = docs["TriggerAuthentication"]["spec"]["secretTargetRef"]
    assert sorted(r["parameter"] for r in refs) == ["ca", "cert", "key"]
    assert sorted(docs["Secret"]["stringData"]) == ["ca", "cert", "key"]
    # A plain-HTTP URL cannot carry mutual TLS: refused, naming the flag.
    assert cli.main([*argv, "--auth", "tls", "--url", "http://automator:8080"]) == 2
    assert "--auth tls" in capsys.readouterr().err


def test_tls_chosen_writes_the_https_listener(capsys: pytest.CaptureFixture[str]) -> None:
    from automator.cli import main

    base = [
        "keda",
        "scaledobject",
        "--namespace",
        "inference",
        "--deployment",
        "api",
        "--profile",
        "training",
    ]
    assert main([*base, "--tls", "--auth", "bearer"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    url = docs[-1]["spec"]["triggers"][0]["metadata"]["url"]
    assert url.startswith("https://gpu-steward-automator.gpu-steward.svc:8443/keda/v1/metrics?")
    assert main([*base, "--tls", "--url", "http://127.0.0.1:18080"]) == 2
    assert "--tls" in capsys.readouterr().err
