"""The one settings parser both binaries use: precedence, ranges, and errors that name their source."""

from __future__ import annotations

import argparse

import pytest

from steward_common.settingspec import (
    Setting,
    SettingError,
    add_arguments,
    boolean,
    choice,
    csv,
    integer,
    number,
    port,
    ratio,
    resolve,
)

SETTINGS: tuple[Setting[object], ...] = (
    Setting("--interval", number(0.1, 3600), "10", "seconds between passes"),
    Setting("--threshold", ratio, "0.05", "idle ratio"),
    Setting("--port", port, "8080", "port"),
    Setting("--mode", choice("dry-run", "enforce"), "dry-run", "mode"),
    Setting("--dry", boolean, "false", "switch", action="switch"),
    Setting("--exclude", csv(), "kube-system", "namespaces", action="append"),
    Setting("--token-file", str, None, "optional"),
)


def _resolve(argv: list[str], environ: dict[str, str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_arguments(parser, SETTINGS)
    return resolve(parser.parse_args(argv), SETTINGS, environ or {})


def test_flag_over_environment_over_default() -> None:
    assert _resolve([])["interval"] == 10.0
    assert _resolve([], {"GPU_STEWARD_INTERVAL": "5"})["interval"] == 5.0
    assert _resolve(["--interval", "2"], {"GPU_STEWARD_INTERVAL": "5"})["interval"] == 2.0
    assert _resolve([])["token_file"] is None


def test_switch_append_and_empty_list() -> None:
    assert _resolve(["--dry"])["dry"] is True
    assert _resolve(["--exclude", "a", "--exclude", "b,c"])["exclude"] == ("a", "b", "c")
    assert _resolve([], {"GPU_STEWARD_EXCLUDE": ""})["exclude"] == ()
    assert _resolve([])["exclude"] == ("kube-system",)


@pytest.mark.parametrize(
    ("argv", "environ", "named"),
    [
        (["--interval", "nan"], {}, "--interval"),
        (["--interval", "inf"], {}, "--interval"),
        (["--interval", "1e300"], {}, "--interval"),
        (["--interval", "0"], {}, "--interval"),
        ([], {"GPU_STEWARD_INTERVAL": "soon"}, "GPU_STEWARD_INTERVAL"),
        (["--threshold", "5"], {}, "--threshold"),
        (["--threshold", "-0.1"], {}, "--threshold"),
        (["--port", "70000"], {}, "--port"),
        (["--port", "1.5"], {}, "--port"),
        (["--mode", "yolo"], {}, "--mode"),
        ([], {"GPU_STEWARD_DRY": "maybe"}, "GPU_STEWARD_DRY"),
    ],
)
def test_bad_values_name_their_source(argv: list[str], environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingError, match=f"^{named}: expected"):
        _resolve(argv, environ)


def test_bounds_are_inclusive_unless_open() -> None:
    assert number(0, 1)("0") == 0.0
    assert number(0, 1)("1") == 1.0
    with pytest.raises(ValueError):
        number(0, 1, low_open=True)("0")
    assert integer(1, 3)("3") == 3
    with pytest.raises(ValueError):
        integer(1, 3)("4")
    assert ratio("1") == 1.0
