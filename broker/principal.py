"""Principals: who a connection is, as Kafka names it (`User:<name>`), and
`ssl.principal.mapping.rules`, which turn a client certificate's subject DN into that name.

Kafka's rules (SslPrincipalMapper), kept here in the same form: a comma-separated list of
`DEFAULT` and `RULE:pattern/replacement/` entries, each RULE optionally ending in `L` or `U`
(lower- or upper-case the result). The first rule whose pattern matches the whole DN wins; DEFAULT
matches every DN and keeps it as it is. A DN no rule matches has no principal: the connection is
refused (Kafka fails the authentication). Patterns are Java regular expressions; the ones people
write (groups, classes, `.*?`) read the same in Python's `re`; the replacement's `$1` is a group
reference, as in Java.

The DN is written as RFC 2253 writes it (Java's `X500Principal.getName()`): the most specific
attribute first, `CN=client,OU=eng,O=Acme,C=US`, no spaces after commas.

A connection without a certificate (plaintext, or TLS without a client certificate) is
`User:ANONYMOUS`, as in Kafka. Nothing checks a principal yet (ACLs come later); the request
context carries it for that work.

Sans-IO: strings in, strings out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANONYMOUS = "User:ANONYMOUS"
USER_TYPE = "User"
RULES_MAX = 100  # rules in one setting
# Kafka's own splitter and parser (SslPrincipalMapper.RULE_PATTERN), in Python's syntax.
_RULE = r"(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(?:,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(Exception):
    """No mapping rule applies to a DN: the connection gets no principal (Kafka refuses it)."""


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "L", "U" or ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        name = self.pattern.sub(self.replacement, dn)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def parse_rules(text: str) -> tuple[Rule, ...]:
    """ssl.principal.mapping.rules -> rules; ValueError naming the bad rule."""
    rules: list[Rule] = []
    text = text.strip() or "DEFAULT"
    for match in _SPLITTER.finditer(text):
        item = match.group(1)
        if not item and match.end() >= len(text):
            break
        parsed = _PARSER.fullmatch(item)
        if parsed is None or parsed.group(5) is not None and parsed.group(5) != "":
            raise ValueError(f"ssl_principal_mapping_rules: invalid rule {item!r} (expected "
                             f"DEFAULT or RULE:pattern/replacement/[L|U])")
        if parsed.group(1):
            rules.append(Rule(None))
            continue
        try:
            pattern = re.compile(parsed.group(2))
        except re.error as exc:
            raise ValueError(f"ssl_principal_mapping_rules: rule {item!r}: bad pattern: "
                             f"{exc}") from None
        rules.append(Rule(pattern, _python_replacement(parsed.group(3)), parsed.group(4)))
        if len(rules) > RULES_MAX:
            raise ValueError(f"ssl_principal_mapping_rules: at most {RULES_MAX} rules")
    if not rules:
        raise ValueError(f"ssl_principal_mapping_rules: no rule in {text!r}")
    return tuple(rules)


def map_dn(rules: tuple[Rule, ...], dn: str) -> str:
    """The short name of a DN (no `User:` prefix); NoMatchingRule if no rule applies."""
    for rule in rules:
        name = rule.apply(dn)
        if name is not None:
            return name
    raise NoMatchingRule(f"no ssl.principal.mapping.rules rule applies to {dn!r}")


def user(name: str) -> str:
    return f"{USER_TYPE}:{name}"


def _python_replacement(java: str) -> str:
    """Java's replacement syntax ($1 a group, \\x a literal x) in Python's (\\g<1>)."""
    out: list[str] = []
    i = 0
    while i < len(java):
        c = java[i]
        if c == "\\" and i + 1 < len(java):
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(java) and java[i + 1].isdigit():
            j = i + 1
            while j < len(java) and java[j].isdigit():
                j += 1
            out.append(f"\\g<{java[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)
