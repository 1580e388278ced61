"""ssl.principal.mapping.rules (broker/principal.py) as Kafka's documentation describes them:
the rules of its example, in its order, map its two DNs to "serviceuser" and "adminuser@admin";
the first matching rule wins; DEFAULT keeps the DN; a DN no rule matches has no principal."""

from __future__ import annotations

import pytest

from epochlog.broker.principal import NoMatchingRule, map_dn, parse_rules

# Kafka's documentation, ssl.principal.mapping.rules (one rule a line there too).
KAFKA_EXAMPLE = r"""RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,
RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,
RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,
DEFAULT"""


def test_kafkas_documented_example() -> None:
    rules = parse_rules(KAFKA_EXAMPLE)
    assert len(rules) == 4
    assert map_dn(rules, "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,"
                         "C=Unknown") == "serviceuser"
    assert map_dn(rules, "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,"
                         "C=Unknown") == "adminuser@admin"
    assert map_dn(rules, "OU=x,CN=Some.Host,O=y") == "some.host"  # the third rule


def test_default_keeps_the_dn_and_upper_case_flag() -> None:
    assert map_dn(parse_rules("DEFAULT"), "CN=a,O=b") == "CN=a,O=b"
    assert map_dn(parse_rules(""), "CN=a,O=b") == "CN=a,O=b"  # empty: DEFAULT
    assert map_dn(parse_rules("RULE:^CN=([a-z]+),.*$/$1/U"), "CN=abc,O=x") == "ABC"


def test_no_matching_rule_refuses_the_dn() -> None:
    with pytest.raises(NoMatchingRule):
        map_dn(parse_rules("RULE:^CN=admin,.*$/admin/"), "CN=someone,O=x")


@pytest.mark.parametrize("bad", ["RULE:abc", "RULE:^x$/y", "NOT_A_RULE", "RULE:(/x/"])
def test_bad_rules_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="ssl_principal_mapping_rules"):
        parse_rules(bad)
