"""A host's robots.txt for one user agent, read by RFC 9309 (2022), as Google's, Bing's and Scrapy's crawlers read
it: of the rules whose pattern matches the URL's path, the longest decides, Allow on a tie; `*` matches any
characters, and a final `$` the end of the path.

Protego (Scrapy's parser) reads the file: its directives and their misspellings, the user-agent groups and which
one applies, the percent-encoding of patterns and paths. It then tries the rules one by one, longest first, for
every URL: 20-40 ms a URL for a robots.txt of 300,000 rules, every other fetch of the event loop stalled meanwhile.
So the rules Protego parsed are compiled here once per host: a URL looks up each prefix of its path whose length
some rule's literal start has (at most one lookup per character of the path, whatever the number of rules) and
tries only the wildcard rules whose literal start (before the first `*`) is among those prefixes; the answers are
Protego's own.
"""

from __future__ import annotations

from urllib.parse import urlparse

# Protego's parsed rules are private to it: the attributes read here are named by a unit test, and pyproject.toml
# bounds its version to the one they were checked with.
from protego import Protego
from protego._utils import _quote_path


class RobotRules:
    def __init__(self, text: str, user_agent: str):
        rule_set = Protego.parse(text)._get_matching_rule_set(user_agent)
        self.prefixes: dict[str, tuple[int, bool]] = {}  # a plain pattern -> (its length, allowed): matches a start
        self.whole: dict[str, tuple[int, bool]] = {}  # a pattern ending in `$`, without it -> matches a whole path
        self.wildcards: dict[str, list] = {}  # a pattern's text before its first `*` -> [(length, allowed, pattern)]
        for rule in rule_set._rules if rule_set else ():
            pattern, decides = rule.value, (rule.value.priority, rule.field == "allow")
            if pattern._contains_asterisk:
                self.wildcards.setdefault(pattern._pattern_before_asterisk, []).append((*decides, pattern))
            elif pattern._contains_dollar:
                self.whole[pattern._pattern_before_dollar] = max(self.whole.get(pattern._pattern_before_dollar, decides),
                                                                  decides)
            else:
                self.prefixes[pattern._pattern] = max(self.prefixes.get(pattern._pattern, decides), decides)
        self.lengths = sorted({len(start) for start in (*self.prefixes, *self.wildcards)})

    def can_fetch(self, url: str) -> bool:
        if "/robots.txt" in url and urlparse(url).path == "/robots.txt":
            return True
        path = _quote_path(url)
        best = self.whole.get(path)
        for length in self.lengths:
            if length > len(path):
                break
            start = path[:length]
            found = self.prefixes.get(start)
            if found is not None and (best is None or found > best):
                best = found
            for length_of_rule, allowed, pattern in self.wildcards.get(start, ()):
                if (best is None or (length_of_rule, allowed) > best) and pattern.match(path):
                    best = (length_of_rule, allowed)
        return best is None or best[1]
