"""Personal data out (pipeline/pii.py): e-mail and public IP addresses replaced by placeholders that reach no one,
the same placeholder for the same address anywhere; what is not personal, or not an address, left as it is."""

import pytest

from textmill.pipeline.pii import EMAILS, IPV4S, IPV6S, remove_pii


@pytest.mark.parametrize("text, emails", [
    ("Write to John.Doe@Example.COM today.", ["John.Doe@Example.COM"]),
    ("jane+news@sub.example.co.uk, bob_o'neil@corp.io.", ["jane+news@sub.example.co.uk", "bob_o'neil@corp.io"]),
    ("<a href=\"mailto:ana@uni.edu?subject=hi\">", ["ana@uni.edu"]),
    ("https://user:secret@host.example.com/path", ["secret@host.example.com"]),  # the URL's credentials go too
    ("müller@example.de", ["müller@example.de"]),
])
def test_email_addresses_are_replaced_in_any_case_in_links_and_urls(text, emails):
    replaced, counts = remove_pii(text)
    assert counts == {"emails": len(emails), "ips": 0}
    assert not any(e in replaced for e in emails) and sum(replaced.count(p) for p in EMAILS) == len(emails), replaced


@pytest.mark.parametrize("text", ["jane at example dot com", "jane[at]example[dot]com", "a@b", "root@localhost",
                                  "@handle on a social site", "price: 3 @ 4.99"])
def test_what_is_no_email_address_is_left_alone(text):
    assert remove_pii(text) == (text, {"emails": 0, "ips": 0})


@pytest.mark.parametrize("text, replaced", [
    ("the resolver 8.8.8.8 answered", 1), ("from 2606:4700:4700::1111 and 2a00:1450:4001:81b::200e", 2),
    ("8.8.8.8,1.1.1.1;9.9.9.9.", 3), ("full 2001:0470:0000:0000:0000:0000:0000:0001 form", 1),
])
def test_public_ip_addresses_are_replaced(text, replaced):
    out, counts = remove_pii(text)
    assert counts == {"emails": 0, "ips": replaced}
    assert sum(out.count(p) for p in IPV4S + IPV6S) == replaced


@pytest.mark.parametrize("text", [
    "router 192.168.1.1, host 10.0.0.7, loopback 127.0.0.1, 172.16.5.4",  # private and loopback: no one's
    "documentation 192.0.2.5 and 2001:db8::7, link-local fe80::1 and ::1",
    "version 1.2.3.4, v2.0.0.1, Release 4.3.2.1, build: 10.20.30.40",  # versions, as a changelog writes them
    "1.2.3.4.5 and 999.1.1.1 and 01.02.03",  # not an address
    "at 12:30:45, MAC 00:1a:2b:3c:4d:5e, ratio 3:4:5",
])
def test_what_is_not_a_public_address_is_left_alone(text):
    assert remove_pii(text) == (text, {"emails": 0, "ips": 0})


def test_the_same_address_gets_the_same_placeholder_whatever_came_before():
    alone = remove_pii("mail a.person@example.net, host 8.8.4.4")[0]
    after = remove_pii("first x@y.org and 1.1.1.1, then mail a.person@example.net, host 8.8.4.4")[0]
    assert after.endswith(alone.removeprefix("mail ").join(["mail ", ""]))
