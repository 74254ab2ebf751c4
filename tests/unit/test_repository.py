"""A clone runs on its own: nothing outside the repository is read, and the reference notes the code cites exist."""

import re

from support.files import REPOSITORY


def test_the_repository_is_self_contained():
    """Tests and benchmarks read nothing outside the repository, and every reference note the code cites
    is in docs/REFERENCE.md."""
    root = REPOSITORY
    code = [p for d in ("tests", "benchmarks", "textmill") for p in (root / d).rglob("*.py")]
    # The steering folder beside a developer's checkout, by path or by name (spelt in two parts so that this
    # file does not match itself); a user's clone has no such folder.
    name = "sha" + "red"
    outside = ("../" + name, f'"{name}"', f"'{name}'")
    for path in code:
        assert not any(word in path.read_text() for word in outside), path
    headings = set(re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", (root / "docs" / "REFERENCE.md").read_text(), re.M))
    cited = {(p.name, n) for p in code for n in re.findall(r"REFERENCE\.md section (\d+(?:\.\d+)?)", p.read_text())}
    assert cited and all(n in headings for _, n in cited), sorted(cited)
