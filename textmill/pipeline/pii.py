"""Personal data out of a document's text: e-mail addresses and public IP addresses replaced by placeholders, as
datatrove's PII formatter replaces them, with three differences, each for a document that must not depend on where
or after what it was cleaned:

- a placeholder is chosen by a hash of the address it replaces (datatrove takes the next of its list, in the order a
  process met the addresses): the same address gives the same placeholder on any machine, in any order;
- the placeholders cannot reach anyone: example.com and example.org addresses (RFC 2606), and IPv4 and IPv6
  addresses of the ranges kept for documentation (RFC 5737, RFC 3849);
- an address that is part of a longer token is left alone: `1.2.3.4.5`, `v1.2.3.4`, and a dotted quad after a word
  that names a version (`version 1.2.3.4`, `release`, `build`...), where datatrove replaces `1.2.3.4` whatever
  precedes it. IPv6 addresses are replaced too (datatrove matches IPv4 only).

An address that is not global (private, loopback, link-local, documentation, reserved ranges) is kept: it names no
one. E-mail addresses are matched in any case, in `mailto:` links and in a URL's `user@host` part alike; written-out
forms (`jane at example dot com`) are left as they are. Phone numbers are not touched.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re

EMAILS = ("email@example.com", "firstname.lastname@example.org")
IPV4S = ("192.0.2.1", "198.51.100.7", "203.0.113.42")  # RFC 5737's documentation ranges
IPV6S = ("2001:db8::1", "2001:db8::4:2")  # RFC 3849's documentation prefix

_EMAIL = re.compile(r"(?<![\w.!#$%&'*+/=?^`{|}~-])[\w!#$%&'*+/=?^`{|}~-]+(?:\.[\w!#$%&'*+/=?^`{|}~-]+)*"
                    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}(?![\w-])")
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w]|\.[0-9])")
_VERSION_BEFORE = re.compile(r"(?i)\b(?:v|ver|version|versions|release|releases|build|rev|revision|update)[\s:.#]*$")
_DIGIT_DOT_DIGIT = re.compile(r"[0-9]\.[0-9]")  # in every IPv4 address: a text without one is not searched for them
_IPV6 = re.compile(r"(?<![\w:.])(?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{1,4}|(?:[0-9]{1,3}\.){3}[0-9]{1,3})?(?![\w:])")


def _placeholder(found: str, choices: tuple[str, ...]) -> str:
    return choices[hashlib.blake2b(found.encode("utf-8", "surrogatepass"), digest_size=2).digest()[0] % len(choices)]


def _global(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_global
    except ValueError:
        return False


def remove_pii(text: str) -> tuple[str, dict[str, int]]:
    """`text` with its e-mail addresses and public IP addresses replaced, and how many of each."""
    counts = {"emails": 0, "ips": 0}

    def email(match: re.Match) -> str:
        counts["emails"] += 1
        return _placeholder(match[0].lower(), EMAILS)

    def ipv4(match: re.Match) -> str:
        if not _global(match[0]) or _VERSION_BEFORE.search(match.string, max(0, match.start() - 16), match.start()):
            return match[0]
        counts["ips"] += 1
        return _placeholder(match[0], IPV4S)

    def ipv6(match: re.Match) -> str:
        if match[0].count(":") < 2 or not _global(match[0]):
            return match[0]
        counts["ips"] += 1
        return _placeholder(match[0].lower(), IPV6S)

    if "@" in text:
        text = _EMAIL.sub(email, text)
    if _DIGIT_DOT_DIGIT.search(text):  # the address search tries every position; this scan is 5x cheaper
        text = _IPV4.sub(ipv4, text)
    if "::" in text or text.count(":") >= 7:
        text = _IPV6.sub(ipv6, text)
    return text, counts
