"""The outbound URL guard: which webhook targets the gateway may call. Pure (no I/O, no DNS).

Two checks, because a name can resolve anywhere and can change its answer (DNS rebinding):

* at creation, `check_url` parses strictly (http/https, a host, no userinfo, no whitespace or control
  characters) and refuses hosts that are internal addresses in any notation the resolver would accept:
  dotted, decimal (`2130706433`), octal (`0177.0.0.1`), hex, short (`127.1`) IPv4, IPv6 and
  IPv4-mapped IPv6 (`[::ffff:127.0.0.1]`), IPv4-compatible (`[::127.0.0.1]`, `[::7f00:1]`), site-local
  (`[fec0::1]`) and NAT64 (`[64:ff9b::7f00:1]`, local-use `[64:ff9b:1::7f00:1]`) IPv6, and `localhost` names;
* at connect time (`nexus.outbound.policy`), `forbidden` is asked about the address actually connected to.

Internal means not globally routable (loopback, private, link-local, CGNAT 100.64/10, reserved,
unspecified, documentation, ...) or multicast. `NEXUS_ALLOW_PRIVATE_URLS` opens everything (`true`) or a
list of networks, for local development and the tests' own receivers.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from urllib.parse import urlsplit

from nexus.errors import UnsafeUrlError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f-\x9f\\]")
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*\.?$")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# IPv6 ranges the standard library (3.11) still calls global although nothing global lives there: the
# deprecated IPv4-compatible form `::a.b.c.d` (a stack may route it to the IPv4 address, loopback
# included), site-local `fec0::/10` (deprecated, routed inside a site) and NAT64's local-use prefix
# `64:ff9b:1::/48` (RFC 8215: translated inside the operator's network).
_NOT_GLOBAL_V6 = tuple(ipaddress.ip_network(n) for n in ("::/96", "fec0::/10", "64:ff9b:1::/48"))


@dataclasses.dataclass(frozen=True, slots=True)
class PrivateAllowance:
    """What NEXUS_ALLOW_PRIVATE_URLS opens: everything, or some networks."""

    everything: bool = False
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

    @classmethod
    def parse(cls, setting: str | None) -> PrivateAllowance:
        if not setting or setting.strip().lower() in ("false", "0", "no"):
            return cls()
        if setting.strip().lower() in ("true", "1", "yes", "*"):
            return cls(everything=True)
        try:
            nets = tuple(ipaddress.ip_network(n.strip(), strict=False) for n in setting.split(",") if n.strip())
        except ValueError as exc:
            raise UnsafeUrlError(f"NEXUS_ALLOW_PRIVATE_URLS: {exc}") from exc
        return cls(networks=nets)

    def allows(self, ip: IPAddress) -> bool:
        return self.everything or any(ip in n for n in self.networks)


def parse_ipv4_any(text: str) -> ipaddress.IPv4Address | None:
    """IPv4 in every notation inet_aton accepts (1-4 parts, each decimal, octal `0..` or hex `0x..`);
    None if `text` is not one."""
    parts = text.split(".")
    if text.endswith("."):
        parts = parts[:-1]
    if not 1 <= len(parts) <= 4:
        return None
    values = []
    for part in parts:
        try:
            if re.fullmatch(r"0[xX][0-9a-fA-F]*", part):
                values.append(int(part[2:] or "0", 16))
            elif re.fullmatch(r"0[0-7]+", part):
                values.append(int(part, 8))
            elif re.fullmatch(r"[0-9]+", part):
                values.append(int(part, 10))
            else:
                return None
        except ValueError:
            return None
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    number = 0
    for v in head:
        number = number * 256 + v
    number = number * 256 ** (4 - len(head)) + last
    return ipaddress.IPv4Address(number)


def host_address(host: str) -> IPAddress | None:
    """The IP address a URL host denotes, in any notation; None if it is a name."""
    h = host.strip("[]")
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h.split("%", 1)[0])
        except ValueError:
            return None
    return parse_ipv4_any(h)


def forbidden(ip: IPAddress, allowance: PrivateAllowance = PrivateAllowance()) -> bool:
    """Whether connecting to `ip` would reach inside (and the allowance does not open it)."""
    if allowance.allows(ip):
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if mapped is None and ip in _NAT64:
            mapped = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if mapped is not None and forbidden(mapped, allowance):
            return True
        if any(ip in net for net in _NOT_GLOBAL_V6):
            return True
    return ip.is_multicast or not ip.is_global


def check_url(url: str, allowance: PrivateAllowance = PrivateAllowance()) -> str:
    """Return `url` if it is an acceptable outbound webhook target; raise UnsafeUrlError otherwise."""
    if _CONTROL_OR_SPACE.search(url):
        raise UnsafeUrlError("webhook url contains whitespace, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrlError(f"webhook url is malformed: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise UnsafeUrlError("webhook url must be http(s)")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise UnsafeUrlError("webhook url must not carry credentials (user:password@)")
    host = (parts.hostname or "").lower()
    if not host:
        raise UnsafeUrlError("webhook url needs a host")
    if port == 0:
        raise UnsafeUrlError("webhook url port 0 is not allowed")
    ip = host_address(host)
    if ip is None:
        if ":" in host or not _HOSTNAME.match(host):
            raise UnsafeUrlError("webhook url host is not a valid name or address")
        name = host.rstrip(".")
        if (name == "localhost" or name.endswith(".localhost")) and not allowance.everything:
            raise UnsafeUrlError("webhook url must not point at this machine")
        return url
    if forbidden(ip, allowance):
        raise UnsafeUrlError(f"webhook url points at an internal address ({ip})")
    return url


def redact(url: str) -> str:
    """A URL safe to log or list: no userinfo, and query values replaced by `***` (tokens live there)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        netloc = f"[{host}]" if ":" in host else host
        if parts.port is not None:
            netloc += f":{parts.port}"
    except ValueError:
        return "<malformed url>"
    query = "&".join(f"{p.split('=', 1)[0]}=***" for p in parts.query.split("&") if p) if parts.query else ""
    return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
