"""`gpu-automator backtest`'s flags: times, durations, sweeps, and bad input exiting 2 naming the flag."""

from __future__ import annotations

import pytest

from automator import cli
from automator.backtest.cli import BacktestError, duration, instant, options
from tools.fakes.promserver import free_port

BASE = ["backtest", "--prometheus", "http://127.0.0.1:1", "--from", "1780000000", "--to", "1780003600"]


def _options(*extra: str) -> object:
    return options(cli.build_parser().parse_args([*BASE, *extra]), now=1_790_000_000)


def test_times_and_durations() -> None:
    assert duration("300", "--step") == 300
    assert (
        duration("5m", "--step") == 300
        and duration("1h30m", "--step") == 5400
        and duration("2d", "--x") == 172800
    )
    assert instant("2026-05-28T20:26:40Z", "--from", 0) == 1_780_000_000
    assert instant("now", "--to", 1000.5) == 1000 and instant("now-10m", "--from", 1000) == 400
    assert instant("1780000000", "--from", 0) == 1_780_000_000
    for bad in ("5 minutes", "-5m", "1.5h", ""):
        with pytest.raises(BacktestError, match=r"^--step"):
            duration(bad, "--step")
    with pytest.raises(BacktestError, match=r"^--from"):
        instant("yesterday", "--from", 0)


def test_defaults() -> None:
    opts = _options()
    assert opts.step == 30 and opts.lookahead == 1800  # type: ignore[attr-defined]
    [policy] = opts.policies  # type: ignore[attr-defined]
    assert policy.name == "default" and policy.max_evictions_per_hour == 60
    assert policy.settings["default-gpu-idle-threshold"] == 0.05
    assert policy.settings["exclude-namespaces"] == ["kube-system"]


def test_several_sweeps_make_every_combination() -> None:
    opts = _options(
        "--sweep", "threshold=0.02,0.1", "--sweep", "max-evictions-per-pass=1,5", "--sweep", "window=600"
    )
    names = [p.name for p in opts.policies]  # type: ignore[attr-defined]
    assert names == [
        "threshold=0.02 max-evictions-per-pass=1 window=600",
        "threshold=0.02 max-evictions-per-pass=5 window=600",
        "threshold=0.1 max-evictions-per-pass=1 window=600",
        "threshold=0.1 max-evictions-per-pass=5 window=600",
    ]
    last = opts.policies[-1]  # type: ignore[attr-defined]
    assert last.config.default_gpu_idle_threshold == 0.1 and last.config.max_evictions_per_pass == 5
    assert last.config.default_gpu_idle_seconds == 600
    assert last.settings["default-gpu-idle-seconds"] == 600
    hourly = _options("--sweep", "max-evictions-per-hour=0,10").policies  # type: ignore[attr-defined]
    assert [p.max_evictions_per_hour for p in hourly] == [0, 10]


def test_a_notice_sweep_replays_with_and_without_notice() -> None:
    without, with_notice = _options("--sweep", "notice-seconds=0,600").policies  # type: ignore[attr-defined]
    assert (without.name, with_notice.name) == ("notice-seconds=0", "notice-seconds=600")
    assert without.config.notice_seconds == 0 and "notice-seconds" not in without.settings
    assert with_notice.settings["notice-seconds"] == 600 and with_notice.settings["max-notices"] == 40


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--from", "1780003600"], "--to"),  # --to not after --from
        (["--step", "0"], "--step"),
        (["--to", "now+1h"], "--to"),
        (["--to", "4102444800"], "--to"),  # 2100: in the future
        (["--step", "2d"], "--step"),
        (["--step", "1", "--to", "1790000000"], "--step"),  # too many steps
        (["--lookahead", "soon"], "--lookahead"),
        (["--sweep", "colour=1,2"], "--sweep"),
        (["--sweep", "threshold"], "--sweep"),
        (["--sweep", "threshold=0.1,,0.2"], "--sweep"),
        (["--sweep", "threshold=0.1,0.1"], "--sweep"),
        (["--sweep", "threshold=0.1", "--sweep", "default-gpu-idle-threshold=0.2"], "--sweep"),
        (["--sweep", "threshold=0.1,2"], "--sweep threshold=2: --default-gpu-idle-threshold"),
        (
            ["--sweep", "window=1,2,3,4,5,6,7,8", "--sweep", "threshold=0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8"],
            "--sweep",
        ),
        (["--default-gpu-idle-threshold", "5"], "--default-gpu-idle-threshold"),
        (["--max-evictions-per-hour", "-1"], "--max-evictions-per-hour"),
        (["--rule-interval", "0"], "--rule-interval"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    extra: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*BASE, *extra]) == 2  # (a flag given twice: the last one counts)
    assert capsys.readouterr().err.startswith(f"gpu-automator: error: {flag}")


def test_unknown_flag_and_output_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for extra in (["--colour"], ["--output", "csv"]):
        with pytest.raises(SystemExit) as exc:
            cli.main([*BASE, *extra])
        assert exc.value.code == 2
    assert "--output" in capsys.readouterr().err


def test_an_unreadable_prometheus_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["backtest", "--prometheus", f"http://127.0.0.1:{free_port()}", "--from", "now-1h", "--to", "now"]
    assert cli.main([*argv, "--prometheus-timeout", "2"]) == 1
    assert capsys.readouterr().err.startswith("gpu-automator: error: Prometheus: ")


def test_a_bad_priority_classes_file_exits_2(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*BASE, "--priority-classes", "/nonexistent/classes.yaml"]) == 2
    assert capsys.readouterr().err.startswith("gpu-automator: error: --priority-classes: ")


def test_the_progress_bar() -> None:
    import io

    from automator.backtest.run import _progress

    stream = io.StringIO()
    show = _progress(stream)
    show(1, 4)
    show(4, 4)
    assert stream.getvalue() == (
        "\rbacktest [#######.......................] 1/4 steps"
        "\rbacktest [##############################] 4/4 steps\n"
    )
