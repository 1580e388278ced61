"""Fixtures of the real-engine compose tests: the engine (a missing one fails, never skips) and
the images, built once per session by docker/build.sh (cached: seconds when nothing changed)."""

from __future__ import annotations

import time

import pytest

from epochlog.testing.compose_project import build_images, engine_version

from .compose import ROOT


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """{EPOCHLOG_BASE_IMAGE, EPOCHLOG_IMAGE} for `compose up`, built from this checkout."""
    version = engine_version()
    started = time.monotonic()
    built = build_images(ROOT / "docker" / "build.sh")
    assert set(built) == {"EPOCHLOG_BASE_IMAGE", "EPOCHLOG_IMAGE"}, built
    print(f"\nDocker Engine {version}; docker/build.sh took {time.monotonic() - started:.1f} s:"
          f" {built}")
    return built
