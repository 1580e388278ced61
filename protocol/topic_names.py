"""Kafka's rule for topic names (its `Topic.validate`): 1-249 characters of ASCII letters,
digits, '.', '_' and '-', and neither "." nor "..". The controller refuses a creation that breaks
it (INVALID_TOPIC_EXCEPTION) and the broker never auto-creates or asks about such a name."""

from __future__ import annotations

TOPIC_NAME_CHARS_MAX = 249
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def valid_topic_name(name: str) -> bool:
    return (0 < len(name) <= TOPIC_NAME_CHARS_MAX and name not in (".", "..")
            and all(c in _TOPIC_CHARS for c in name))


def why_invalid(name: str) -> str | None:
    """None for a legal name, else the message that says what the rule is."""
    if valid_topic_name(name):
        return None
    return f"topic name {name!r} must be 1-{TOPIC_NAME_CHARS_MAX} of [a-zA-Z0-9._-], not . or .."
