"""Machines on one machine: network namespaces, each with its own address on a bridge the test makes (root and
iproute2's `ip netns`; UNAVAILABLE says why not where the machine does not allow it)."""

import contextlib
import os
import shutil
import subprocess

SUBNET = "10.213.0"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def netns_unavailable() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"textmill-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` is not allowed here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


UNAVAILABLE = netns_unavailable()


@contextlib.contextmanager
def hosts(*names: str):
    """A network namespace per name, each with one address on a shared bridge: {name: (namespace, address)}."""
    tag = os.getpid() % 10000
    hub = f"tm{tag}-hub"
    made = [hub]
    try:
        ip("netns", "add", hub)
        ip("-n", hub, "link", "add", "br0", "type", "bridge")
        ip("-n", hub, "link", "set", "br0", "up")
        found = {}
        for k, name in enumerate(names):
            ns, address = f"tm{tag}-{name}", f"{SUBNET}.{k + 2}"
            ip("netns", "add", ns)
            made.append(ns)
            ip("link", "add", f"tm{tag}h{k}", "netns", hub, "type", "veth", "peer", "name", "eth0", "netns", ns)
            ip("-n", hub, "link", "set", f"tm{tag}h{k}", "master", "br0", "up")
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            ip("-n", ns, "link", "set", "lo", "up")
            found[name] = (ns, address)
        yield found
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
