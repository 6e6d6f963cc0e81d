"""Pure parts of tenant safety: the outbound guard's IPv6 forms, the request id rule, the failed-auth
throttle."""

from __future__ import annotations

import ipaddress

import pytest

from nexus.auth.urlguard import check_url, forbidden
from nexus.errors import UnsafeUrlError


@pytest.mark.parametrize(
    "url",
    [
        "http://[::127.0.0.1]/h",
        "http://[::7f00:1]/h",
        "http://[::10.0.0.1]:8080/h",
        "http://[fec0::1]/h",
        "http://[64:ff9b:1::7f00:1]/h",
        "http://[64:ff9b:1::808:808]/h",
        "http://[64:ff9b::7f00:1]/h",
    ],
)
def test_ipv6_forms_that_reach_inside_are_refused(url: str) -> None:
    """IPv4-compatible, site-local and NAT64 local-use IPv6 hosts are refused as internal addresses."""
    with pytest.raises(UnsafeUrlError):
        check_url(url)


@pytest.mark.parametrize("address", ["::127.0.0.1", "::7f00:1", "fec0::1", "feff::1", "64:ff9b:1::7f00:1"])
def test_connect_time_check_refuses_the_same_ipv6_forms(address: str) -> None:
    """The address actually connected to is refused in the same forms (DNS may answer them)."""
    assert forbidden(ipaddress.ip_address(address))


def test_global_ipv6_and_nat64_of_a_public_address_stay_allowed() -> None:
    """A global IPv6 address and the well-known NAT64 form of a public IPv4 address are still allowed."""
    assert not forbidden(ipaddress.ip_address("2606:4700::1"))
    assert not forbidden(ipaddress.ip_address("64:ff9b::808:808"))
