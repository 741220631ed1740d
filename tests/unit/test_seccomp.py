"""The dev containers' seccomp profile, without an engine (tests/integration/
test_boundary_container.py runs it on the real one)."""

from __future__ import annotations

import json
from typing import Any

from jupyter_gpudev.containers import seccomp


def rules_for(profile: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [rule for rule in profile["syscalls"] if name in rule["names"]]


def test_mode_setting_calls_are_allowed_only_without_setid_bits() -> None:
    # Given the profile
    profile = seccomp.profile()
    # Then every call that sets a file mode is allowed only when the mode has neither S_ISUID
    # nor S_ISGID (opens also when they create nothing), never unconditionally
    for name, index in seccomp._CHECKED.items():
        rules = rules_for(profile, name)
        assert rules, name
        assert all(rule.get("args") for rule in rules), name
        assert {"index": index, "value": 0o6000, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"} in [
            arg for rule in rules for arg in rule["args"]
        ]
    # And the calls whose arguments cannot be checked answer ENOSYS, so libraries fall back
    for name in ("openat2", "fchmodat2", "io_uring_setup"):
        (rule,) = rules_for(profile, name)
        assert (rule["action"], rule["errnoRet"]) == ("SCMP_ACT_ERRNO", 38)


def test_the_rest_is_dockers_default() -> None:
    profile = seccomp.profile()
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    # namespaces, mounts and kernel modules still need capabilities a dev container lacks
    (mount,) = rules_for(profile, "mount")
    assert mount["includes"] == {"caps": ["CAP_SYS_ADMIN"]}
    assert rules_for(profile, "read")[0]["action"] == "SCMP_ACT_ALLOW"
    # and the option is the JSON the engine takes
    option = seccomp.security_opt()
    assert option.startswith("seccomp={")
    assert json.loads(option.removeprefix("seccomp=")) == profile
