"""robots.txt by RFC 9309, compiled once per host: Protego's answers (Scrapy's parser, which reads the file), at a
cost that does not grow with the number of rules."""

from hypothesis import given, settings
from hypothesis import strategies as st
from protego import Protego

from textmill.pipeline.robots import RobotRules

AGENT = "textmill/0.2 (corpus builder)"


def robots_text(groups: list[tuple[str, list[tuple[bool, str]]]]) -> str:
    lines = []
    for agent, rules in groups:
        lines.append(f"User-agent: {agent}")
        lines += [f"{'Allow' if allowed else 'Disallow'}: {path}" for allowed, path in rules]
        lines.append("")
    return "\n".join(lines)


def test_the_rfcs_longest_match_allow_on_a_tie_and_wildcards():
    """The issue's robots.txt: urllib.robotparser (the first rule in file order decides, `*` and `$` literal) got
    all four wrong; RFC 9309 gives these."""
    rules = RobotRules("User-agent: *\nDisallow: /search\nAllow: /search/about\nDisallow: /*?sort=\nDisallow: /*.pdf$\n",
                       AGENT)
    assert rules.can_fetch("https://example.com/search/about")  # the longer Allow beats the shorter Disallow
    assert not rules.can_fetch("https://example.com/search?q=x")
    assert not rules.can_fetch("https://example.com/products?sort=price")  # `*` is a wildcard
    assert not rules.can_fetch("https://example.com/docs/a.pdf")  # `$` ends the path
    assert rules.can_fetch("https://example.com/docs/a.pdf.html") and rules.can_fetch("https://example.com/products")
    tie = RobotRules("User-agent: *\nDisallow: /page\nAllow: /page\n", AGENT)
    assert tie.can_fetch("http://h/page")  # equally long: Allow
    assert RobotRules("User-agent: *\nDisallow: /\n", AGENT).can_fetch("http://h/robots.txt")


def test_the_group_for_the_agents_product_token_applies_and_the_others_do_not():
    text = "User-agent: otherbot\nDisallow: /\n\nUser-agent: TextMill\nDisallow: /private\n\nUser-agent: *\nDisallow: /x\n"
    rules = RobotRules(text, AGENT)
    assert not rules.can_fetch("http://h/private/a") and rules.can_fetch("http://h/x") and rules.can_fetch("http://h/")
    assert RobotRules("", AGENT).can_fetch("http://h/anything")


PATHS = ["", "/", "/a", "/a/", "/a/b", "/ab", "/~user", "/%7Euser", "*", "/a?x", "/*.pdf$", "/*?s=", "/a*b", "/a$",
         "/a/index.html", "/$", "/*", "/a%2Fb", "/é", "/*/b$", "/a?x$"]
URLS = ["http://h/", "http://h/a", "http://h/a/b/c", "http://h/ab", "http://h/b", "http://h/~user/x", "http://h/%7Euser/x",
        "http://h/a?x=1", "http://h", "http://h/a%2Fb", "http://h/é", "http://h/x.pdf", "http://h/x.pdf?y", "http://h/a?s=1",
        "http://h/axb", "http://h/a/", "http://h/a?x", "http://h/q/b", "http://h/robots.txt", "http://h/a$"]


@settings(max_examples=400, deadline=None)
@given(groups=st.lists(st.tuples(st.sampled_from(["*", "textmill", "otherbot"]),
                                 st.lists(st.tuples(st.booleans(), st.sampled_from(PATHS)), max_size=6)), max_size=3),
       urls=st.lists(st.sampled_from(URLS), min_size=1, max_size=5))
def test_the_compiled_rules_answer_as_protego_does(groups, urls):
    text = robots_text(groups)
    reference = Protego.parse(text)
    compiled = RobotRules(text, AGENT)
    for url in urls:
        assert compiled.can_fetch(url) == reference.can_fetch(url, AGENT), (text, url)


def test_a_robots_txt_of_many_rules_is_matched_without_trying_each():
    """300,000 rules: Protego tries them one by one for every URL; the compiled rules look up the prefixes of the
    path, so the answer is the longest matching rule's all the same."""
    rules = [f"Disallow: /private/{i}/" for i in range(300_000)] + ["Disallow: /blocked", "Allow: /", "Disallow: /*.pdf$"]
    compiled = RobotRules("User-agent: *\n" + "\n".join(rules), AGENT)
    assert not compiled.can_fetch("http://h/private/299999/page") and not compiled.can_fetch("http://h/blocked/x")
    assert compiled.can_fetch("http://h/public/page") and compiled.can_fetch("http://h/private/300000/")
    assert not compiled.can_fetch("http://h/public/a.pdf")
    assert len(compiled.lengths) < 30  # lookups a URL costs at most, not 300,000 comparisons


def test_the_private_parts_of_protego_it_reads_are_there():
    """pipeline/robots.py indexes what Protego parsed through its private attributes: a Protego that renamed one
    fails here, by name, before any scrape (pyproject.toml bounds the version)."""
    parsed = Protego.parse("User-agent: *\nDisallow: /a*b$\nAllow: /c$\nDisallow: /d\n")
    rule_set = parsed._get_matching_rule_set(AGENT)
    patterns = [rule.value for rule in rule_set._rules]
    assert {rule.field for rule in rule_set._rules} == {"allow", "disallow"}
    assert all(isinstance(p.priority, int) and isinstance(p._pattern, str) for p in patterns)
    assert [p._pattern_before_asterisk for p in patterns if p._contains_asterisk] == ["/a", "/a"]
    assert {p._pattern_before_dollar for p in patterns if p._contains_dollar and not p._contains_asterisk} == {"/c"}
    from protego._utils import _quote_path

    assert _quote_path("http://h/a b?x") == "/a%20b%3Fx"  # the query too, as the patterns are quoted
