"""robots.txt compiled once per host gives urllib.robotparser's answers, at a cost that does not grow with the
number of rules."""

from urllib.robotparser import RobotFileParser

from hypothesis import given, settings
from hypothesis import strategies as st

from textmill.pipeline.robots import RobotRules

AGENT = "textmill/0.2 (corpus builder)"


def robots_text(groups: list[tuple[str, list[tuple[bool, str]]]]) -> str:
    lines = []
    for agent, rules in groups:
        lines.append(f"User-agent: {agent}")
        lines += [f"{'Allow' if allowed else 'Disallow'}: {path}" for allowed, path in rules]
        lines.append("")
    return "\n".join(lines)


@settings(max_examples=300, deadline=None)
@given(groups=st.lists(st.tuples(st.sampled_from(["*", "textmill", "otherbot"]),
                                 st.lists(st.tuples(st.booleans(), st.sampled_from(["", "/", "/a", "/a/", "/a/b", "/ab",
                                                                                     "/~user", "/%7Euser", "*", "/a?x"])),
                                          max_size=6)), max_size=3),
       urls=st.lists(st.sampled_from(["http://h/", "http://h/a", "http://h/a/b/c", "http://h/ab", "http://h/b",
                                      "http://h/~user/x", "http://h/%7Euser/x", "http://h/a?x=1", "http://h",
                                      "http://h/a%2Fb", "http://h/é"]), min_size=1, max_size=5))
def test_the_compiled_rules_answer_as_urllib_robotparser_does(groups, urls):
    text = robots_text(groups)
    reference = RobotFileParser()
    reference.parse(text.splitlines())
    compiled = RobotRules(text, AGENT)
    for url in urls:
        assert compiled.can_fetch(url) == reference.can_fetch(AGENT, url), (text, url)


def test_a_robots_txt_of_many_rules_is_matched_without_trying_each():
    """300,000 rules: urllib.robotparser tries them one by one for every URL; the compiled rules look up the
    prefixes of the path, so the answer comes from the first matching rule all the same."""
    rules = [f"Disallow: /private/{i}/" for i in range(300_000)] + ["Disallow: /blocked", "Allow: /"]
    compiled = RobotRules("User-agent: *\n" + "\n".join(rules), AGENT)
    assert not compiled.can_fetch("http://h/private/299999/page") and not compiled.can_fetch("http://h/blocked/x")
    assert compiled.can_fetch("http://h/public/page") and compiled.can_fetch("http://h/private/300000/")
    assert len(compiled.lengths) < 30  # lookups a URL costs at most, not 300,000 comparisons
