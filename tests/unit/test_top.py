"""``jupyter gpudev top``'s table, from the ``usage`` answer (whose names are users' and
containers': printed without their control characters)."""

from __future__ import annotations

from jupyter_gpudev.cli.top import format_usage

GPU = {
    "uuid": "GPU-1",
    "index": 0,
    "name": "A100",
    "memory_total_mib": 40960,
    "memory_used_mib": 6144,
    "utilization_percent": 71,
    "processes_listed": True,
}


def process(**values: object) -> dict[str, object]:
    base: dict[str, object] = {
        "kind": "gpudev",
        "container": "train",
        "owner": "alice",
        "pid": 4242,
        "uid": None,
        "memory_used_mib": 4096,
        "sm_percent": 70,
        "memory_percent": 12,
    }
    return {**base, **values}


def test_each_gpu_and_its_processes_by_container_and_owner() -> None:
    theirs = process(kind="another user", container=None, owner="another user", pid=None)
    other = process(kind="other", container=None, owner=None, pid=None, sm_percent=None)
    hosts = [
        {
            "host": "local",
            "reason": None,
            "gpus": [
                {
                    **GPU,
                    "processes": [
                        process(),
                        theirs,
                        other,
                    ],
                }
            ],
        }
    ]
    assert format_usage(hosts).splitlines() == [
        "local GPU 0 A100 GPU-1: 6.0 GiB of 40.0 GiB, 71% busy",
        "  train (alice) pid 4242: 4.0 GiB, SM 70%",
        "  another user's dev container: 4.0 GiB, SM 70%",
        "  not a dev container: 4.0 GiB, SM -",
    ]


def test_a_host_without_gpus_or_processes_says_why() -> None:
    hosts = [
        {"host": "far", "reason": "not reachable", "gpus": []},
        {"host": "k8s", "reason": "needs commands on the host", "gpus": [{**GPU, "processes": []}]},
    ]
    lines = format_usage(hosts).splitlines()
    assert lines[0] == "far: no GPU (not reachable)"
    assert lines[1] == "k8s: needs commands on the host"
    assert format_usage([]) == "No hosts."


def test_names_from_containers_and_users_cannot_drive_the_terminal() -> None:
    hosts = [{"host": "local", "gpus": [{**GPU, "processes": [process(container="x\x1b[2Jy")]}]}]
    assert "\x1b" not in format_usage(hosts)


def test_each_process_shows_its_kernel_short_id_its_idle_time_and_what_was_left_behind() -> None:
    kernel = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d"
    hosts = [
        {
            "host": "local",
            "reason": None,
            "gpus": [
                {
                    **GPU,
                    "processes": [
                        process(kernel=kernel),
                        process(pid=4343, orphan=True),
                        process(container="other-box", pid=4444),
                        process(kind="another user", container=None, pid=None, orphan=True),
                    ],
                }
            ],
            "kernels": [
                {"kernel": kernel, "container": "train", "owner": "alice", "idle_seconds": 1530},
                {"kernel": "ffff", "container": "other-box", "owner": "alice", "idle_seconds": 20},
            ],
        }
    ]
    assert format_usage(hosts).splitlines()[1:] == [
        "  train (alice) kernel 1a2b3c4d pid 4242: 4.0 GiB, SM 70%, idle 25 min",
        "  train (alice) left behind (no live kernel) pid 4343: 4.0 GiB, SM 70%, idle 25 min",
        "  other-box (alice) pid 4444: 4.0 GiB, SM 70%, idle 20 s",
        "  another user's dev container left behind (no live kernel): 4.0 GiB, SM 70%",
    ]


def test_a_kernel_id_from_the_server_cannot_drive_the_terminal() -> None:
    hosts = [{"host": "local", "gpus": [{**GPU, "processes": [process(kernel="\x1b[2Jab")]}]}]
    assert "\x1b" not in format_usage(hosts)


def test_a_name_cannot_forge_a_row_or_reorder_one() -> None:
    # Given an owner name (a Hub user name, its characters the authenticator's choice) with a
    # line break and a right-to-left override, which an administrator's `top` shows
    owner = "eve\n  local GPU 0 pid 1: 70.0 GiB\u202egnp.x"
    hosts = [{"host": "local", "gpus": [{**GPU, "processes": [process(owner=owner)]}]}]
    text = format_usage(hosts)
    # Then it stays on its own row, every character shown, none acted on
    assert len(text.splitlines()) == len(
        format_usage([{"host": "local", "gpus": [{**GPU, "processes": [process()]}]}]).splitlines()
    )
    assert "\u202e" not in text
    assert "\\n" in text
    assert "\\u202e" in text
