"""/proc/<pid>/cgroup -> (pod UID, container id): fixtures for every runtime, driver and cgroup version."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.attribution.cgroup import CgroupOwner, classify_cgroup, parse_cgroup, read_cgroup

FIXTURES = Path(__file__).parent / "fixtures" / "cgroup"

U1 = "0b3f5c2e-8d1a-4f6b-9c7e-1a2b3c4d5e6f"
U2 = "7e9d1c3b-5a2f-4e8d-b6c4-0f1e2d3c4b5a"
U3 = "c1d2e3f4-a5b6-4c7d-8e9f-a0b1c2d3e4f5"
C1 = "4f2a9c1e7b3d5f608a1c2e3d4b5a69788f7e6d5c4b3a29180f1e2d3c4b5a6978"
C2 = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9"
C3 = "1234abcd5678ef901234abcd5678ef901234abcd5678ef901234abcd5678ef90"

CONTAINERS = {
    "v2_systemd_containerd_burstable": (U1, C1),
    "v2_systemd_containerd_guaranteed": (U2, C2),
    "v2_systemd_crio_besteffort": (U3, C3),
    "v2_systemd_docker_burstable": (U2, C1),
    "v2_cgroupns_relative": (U1, C2),
    "v2_kind_nested": (U3, C1),
    "v2_cgroupfs_containerd_burstable": (U2, C3),
    "v2_systemd_nested_subcgroup": (U1, C3),
    "v2_systemd_static_pod": ("0123456789abcdef0123456789abcdef", C2),
    "v1_cgroupfs_containerd_burstable": (U1, C1),
    "v1_systemd_containerd_guaranteed": (U2, C2),
    "v1_cgroupfs_crio_besteffort": (U3, C3),
    "v1_cgroupfs_docker_guaranteed": (U2, C1),
    "hybrid_systemd_containerd": (U3, C2),
}
# In Kubernetes, but not in a container cgroup that can be named.
POD_ONLY = {"v2_systemd_crio_conmon": U3, "v2_systemd_pod_level": U1}
HOST = ["v2_host_service", "v2_host_session", "v2_docker_outside_kubernetes", "v1_host_service"]


def test_every_fixture_is_covered() -> None:
    assert {p.name for p in FIXTURES.iterdir()} == set(CONTAINERS) | set(POD_ONLY) | set(HOST)


@pytest.mark.parametrize(("fixture", "expected"), sorted(CONTAINERS.items()))
def test_container_cgroups(fixture: str, expected: tuple[str, str]) -> None:
    text = (FIXTURES / fixture).read_text()
    assert parse_cgroup(text) == expected
    assert classify_cgroup(text) == CgroupOwner(True, *expected)


@pytest.mark.parametrize(("fixture", "uid"), sorted(POD_ONLY.items()))
def test_pod_level_and_conmon_are_kubernetes_but_no_container(fixture: str, uid: str) -> None:
    text = (FIXTURES / fixture).read_text()
    assert parse_cgroup(text) is None
    assert classify_cgroup(text) == CgroupOwner(kubepods=True, pod_uid=uid, container_id=None)


def test_conmon_is_not_taken_for_the_container_on_cgroupfs() -> None:
    text = f"0::/kubepods/besteffort/pod{U3}/crio-conmon-{C3}\n"
    assert classify_cgroup(text) == CgroupOwner(True, U3, None)


@pytest.mark.parametrize("fixture", HOST)
def test_host_processes(fixture: str) -> None:
    text = (FIXTURES / fixture).read_text()
    assert parse_cgroup(text) is None
    assert classify_cgroup(text) == CgroupOwner(kubepods=False)


def test_v1_container_line_wins_over_other_lines_in_any_order() -> None:
    pod_level = f"5:pids:/kubepods/burstable/pod{U1}\n"
    container = f"4:memory:/kubepods/burstable/pod{U1}/{C2}\n"
    root = "0::/\n"
    for text in (pod_level + container + root, root + container + pod_level):
        assert parse_cgroup(text) == (U1, C2)


def test_pod_segment_outside_kubepods_is_not_a_pod() -> None:
    assert parse_cgroup(f"0::/system.slice/pod{U1}/{C1}\n") is None
    assert not classify_cgroup(f"0::/system.slice/pod{U1}/{C1}\n").kubepods


def test_kubepods_without_pod_is_kubernetes_unnamed() -> None:
    assert classify_cgroup("0::/kubepods.slice/kubepods-burstable.slice\n") == CgroupOwner(kubepods=True)


@pytest.mark.parametrize("text", ["", "garbage\n", "0::\n", "::::\n"])
def test_garbage_is_not_a_container(text: str) -> None:
    assert parse_cgroup(text) is None
    assert classify_cgroup(text) == CgroupOwner(kubepods=False)


def test_read_cgroup_from_a_fake_proc_root(tmp_path: Path) -> None:
    (tmp_path / "4242").mkdir()
    text = (FIXTURES / "v2_systemd_crio_besteffort").read_text()
    (tmp_path / "4242" / "cgroup").write_text(text)
    assert read_cgroup(str(tmp_path), 4242) == text
    assert read_cgroup(str(tmp_path), 4243) is None  # vanished
    assert read_cgroup(str(tmp_path), 0) is None
    assert read_cgroup(str(tmp_path / "nowhere"), 4242) is None


def test_read_cgroup_unreadable_is_none(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cgroup").mkdir()  # reading a directory fails with an OSError like EACCES would
    assert read_cgroup(str(tmp_path), 7) is None
