"""The firewall chain in front of dev containers' ports (``engine/firewall.py``), as text."""

from __future__ import annotations

import pytest

from jupyter_gpudev.engine.firewall import CHAIN, chain_rules


def test_the_chain_lets_replies_root_the_server_and_each_owner_through_and_refuses_the_rest() -> (
    None
):
    rules = chain_rules({0, 1000}, {"172.18.0.5": {1001}, "172.18.0.3": {1002, 1001}}).splitlines()
    assert rules[:3] == [
        "*filter",
        f":{CHAIN} - [0:0]",
        f"-A {CHAIN} -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN",
    ]
    assert rules[3:5] == [
        f"-A {CHAIN} -m owner --uid-owner 0 -j RETURN",
        f"-A {CHAIN} -m owner --uid-owner 1000 -j RETURN",
    ]
    assert rules[5:8] == [
        f"-A {CHAIN} -d 172.18.0.3/32 -m owner --uid-owner 1001 -j RETURN",
        f"-A {CHAIN} -d 172.18.0.3/32 -m owner --uid-owner 1002 -j RETURN",
        f"-A {CHAIN} -d 172.18.0.5/32 -m owner --uid-owner 1001 -j RETURN",
    ]
    assert rules[-3:] == [
        f"-A {CHAIN} -p tcp -j REJECT --reject-with tcp-reset",
        f"-A {CHAIN} -j REJECT",
        "COMMIT",
    ]


@pytest.mark.parametrize("address", ["172.18.0.5 -j ACCEPT", "", "host.example", "1.2.3.4/8"])
def test_only_an_address_gets_into_the_chain(address: str) -> None:
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        chain_rules({0}, {address: {1001}})
