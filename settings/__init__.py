"""Settings for every server: defaults, then a TOML file, then `EPOCHLOG_*` variables, then flags.

Broker and controller both load their settings here, so this package sits below them and imports
nothing else of ours.

Each server declares its settings as one msgspec Struct (fields with defaults, `Meta` bounds,
a `__post_init__` for checks across fields). `load_settings` merges the sources, later ones winning,
and converts the result once with msgspec, so every source gets the same validation. A bad value
is refused with `SettingsError`, whose message names the setting, the source it came from and the
reason; servers print it and exit non-zero before they open any port or file.

Rules: an unknown key in the TOML file or among the flags is refused (a typo must not pass
silently). Unknown `EPOCHLOG_*` variables are ignored, because the broker and the controller share
the prefix and read different settings.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tomllib
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

__all__ = ["SettingsError", "load_settings"]

T = TypeVar("T", bound=msgspec.Struct)
_PATH = re.compile(r"at `\$\.([A-Za-z0-9_]+)")
_MISSING = re.compile(r"missing required field `([A-Za-z0-9_]+)`")


class SettingsError(ValueError):
    """A setting that cannot be used; the message names it and says why."""


def load_settings(struct_type: type[T], cli_overrides: Mapping[str, Any], *,
                  env_prefix: str = "EPOCHLOG_", toml_path: str | None = None,
                  environ: Mapping[str, str] | None = None) -> T:
    """Build a `struct_type` from (lowest to highest precedence) its defaults, the TOML file, the
    environment and `cli_overrides` (None values are ignored: a flag that was not given)."""
    fields = set(struct_type.__struct_fields__)
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    if toml_path is not None:
        for key, value in _read_toml(toml_path).items():
            _check_known(key, fields, f"TOML file {toml_path}")
            merged[key], source[key] = value, f"TOML file {toml_path}"
    env = os.environ if environ is None else environ
    for key in fields:
        name = env_prefix + key.upper()
        if name in env:
            merged[key], source[key] = env[name], f"environment variable {name}"
    for key, value in cli_overrides.items():
        if value is None:
            continue
        _check_known(key, fields, "command line")
        merged[key], source[key] = value, "command line"
    try:
        # strict=False lets strings from the environment and flags become ints and booleans.
        return msgspec.convert(merged, struct_type, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(_describe(exc, source)) from None


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"settings file {path} is not valid TOML: {exc}") from None


def _check_known(key: str, fields: set[str], where: str) -> None:
    if key not in fields:
        known = ", ".join(sorted(fields))
        raise SettingsError(f"unknown setting {key!r} in {where} (known: {known})")


def _describe(exc: msgspec.ValidationError, source: Mapping[str, str]) -> str:
    text = str(exc)
    missing = _MISSING.search(text)
    if missing is not None:
        name = missing.group(1)
        return f"setting {name} is required (a flag, EPOCHLOG_{name.upper()} or a TOML key)"
    found = _PATH.search(text)
    if found is None:  # a check in __post_init__ names its setting itself: "name: reason"
        name = text.split(":", 1)[0]
        where = source.get(name)
        return f"setting {text}" + (f" (from {where})" if where else "")
    name = found.group(1)
    reason = text[:found.start()].rstrip(" -")
    return f"setting {name} (from {source.get(name, 'default')}): {reason}"


def add_settings_arguments(parser: Any, example: str) -> None:
    """The flags every server command shares: a TOML file, NAME=VALUE overrides, log level."""
    parser.add_argument("--config", metavar="FILE", help="TOML file of settings")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help=f"any other setting, e.g. --set {example}")
    parser.add_argument("--log-level", default="INFO")


def setup_logging(level: str) -> None:
    """One line per event on stderr, as every server logs."""
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def load_from_args(struct_type: type[T], flags: Mapping[str, Any], args: Any) -> T:
    """Settings from a command's own flags plus its --set items and --config file."""
    overrides = dict(flags)
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise SettingsError(f"--set {item!r}: expected NAME=VALUE")
        overrides[name.strip()] = value
    return load_settings(struct_type, overrides, toml_path=args.config)
