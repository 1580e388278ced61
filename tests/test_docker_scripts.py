"""docker/base-image.sh and docker/build.sh touch only images they made (issue 29): what they
build carries the label epochlog.made-by, and every removal or prune filters by it. Before, the
base script removed every `epochlog-base:*` image and build.sh pruned every dangling image of
the engine, other projects' included.

The scripts run for real, from a copy of docker/, against a stand-in `docker` on PATH that keeps
a small table of images (with labels), answers `image ls` with docker's filters, and records
every command; debootstrap, chroot, id and docker-compose are stand-ins too, so no engine,
network or root is needed. The real engine's side is the compose suite's (tests/docker/).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABEL = "epochlog.made-by"
WAIT_S = 60

# A stand-in for the docker CLI: images from $FAKE_IMAGES (JSON: [{"ref": "repo:tag", "labels":
# {...}}]), each command appended to $FAKE_LOG as a JSON list.
FAKE_DOCKER = r'''#!PYTHON
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
images = json.load(open(os.environ["FAKE_IMAGES"]))
if args[:2] == ["compose", "version"]:
    sys.exit(1)  # no Compose v2: build.sh takes docker-compose
if args[:2] == ["image", "inspect"]:
    sys.exit(0 if any(i["ref"] == args[-1] for i in images) else 1)
if args[:1] == ["import"]:
    sys.stdin.buffer.read()
    sys.exit(0)
if args[:2] == ["image", "ls"]:
    rest, wanted, repo = args[2:], [], None
    while rest:
        word = rest.pop(0)
        if word == "--filter":
            wanted.append(rest.pop(0))
        elif word == "--format":
            rest.pop(0)
        else:
            repo = word
    for image in images:
        if repo is not None and image["ref"].split(":")[0] != repo:
            continue
        labels = image["labels"]
        if all(f.startswith("label=") and labels.get(f[6:].split("=", 1)[0]) ==
               f[6:].split("=", 1)[1] for f in wanted):
            print(image["ref"])
sys.exit(0)
'''


def _stand_ins(bin_dir: Path) -> None:
    bin_dir.mkdir()
    scripts = {
        "docker": FAKE_DOCKER.replace("PYTHON", sys.executable),
        "docker-compose": '#!/bin/sh\necho "[\\"docker-compose\\"]" >> "$FAKE_LOG"\n',
        "debootstrap": "#!/bin/sh\nexit 0\n",
        "chroot": "#!/bin/sh\nexit 0\n",
        "id": "#!/bin/sh\necho 0\n",
    }
    for name, text in scripts.items():
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(tmp_path: Path, script: str, images: list[dict[str, object]]
         ) -> tuple[subprocess.CompletedProcess[str], list[list[str]]]:
    """Run a copy of docker/<script> (beside the other scripts, wheelhouse.sh a stand-in) with
    the stand-ins first on PATH; its result and the docker commands it ran."""
    tree = tmp_path / "tree"
    (tree / "docker").mkdir(parents=True)
    for name in ("base-image.sh", "build.sh"):
        shutil.copy2(ROOT / "docker" / name, tree / "docker" / name)
    wheelhouse = tree / "docker" / "wheelhouse.sh"
    wheelhouse.write_text("#!/bin/sh\necho docker/wheels\n")
    wheelhouse.chmod(0o755)
    _stand_ins(tmp_path / "bin")
    log, table = tmp_path / "docker.log", tmp_path / "images.json"
    log.write_text("")
    table.write_text(json.dumps(images))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "FAKE_LOG": str(log), "FAKE_IMAGES": str(table)}
    out = subprocess.run(["bash", str(tree / "docker" / script)], capture_output=True,
                         text=True, timeout=WAIT_S, env=env, cwd=tmp_path)
    return out, [json.loads(line) for line in log.read_text().splitlines()]


def _base_tag() -> str:
    digest = subprocess.run(["sha256sum", str(ROOT / "docker" / "base-image.sh")],
                            capture_output=True, text=True, check=True).stdout[:12]
    return f"epochlog-base:py3.11-{digest}"


def test_base_image_labels_what_it_builds_and_removes_only_its_own_older_images(
        tmp_path: Path) -> None:
    images = [
        {"ref": "epochlog-base:py3.11-older", "labels": {LABEL: "docker/base-image.sh"}},
        {"ref": "epochlog-base:someone-elses", "labels": {}},  # same repository, not ours
        {"ref": "epochlog-base:handmade", "labels": {LABEL: "Dockerfile"}},
        {"ref": "postgres:16", "labels": {}},
    ]
    out, commands = _run(tmp_path, "base-image.sh", images)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == _base_tag()
    (imported,) = [c for c in commands if c[:1] == ["import"]]
    assert f"LABEL {LABEL}=docker/base-image.sh" in imported, imported
    removed = [ref for c in commands if c[:2] == ["image", "rm"] for ref in c[2:]]
    assert removed == ["epochlog-base:py3.11-older"], commands


def test_build_prunes_only_dangling_images_the_dockerfile_made(tmp_path: Path) -> None:
    images = [{"ref": _base_tag(), "labels": {LABEL: "docker/base-image.sh"}}]
    out, commands = _run(tmp_path, "build.sh", images)
    assert out.returncode == 0, out.stderr
    assert f"EPOCHLOG_BASE_IMAGE={_base_tag()}" in out.stdout
    prunes = [c for c in commands if "prune" in c]
    assert prunes, commands
    for command in prunes:
        assert command[:2] == ["image", "prune"] and "--all" not in command and "-a" not in \
            command, command
        filters = [command[i + 1] for i, word in enumerate(command) if word == "--filter"]
        assert f"label={LABEL}=Dockerfile" in filters, command
    removals = [c for c in commands if c[:2] in (["image", "rm"], ["rmi"], ["container", "rm"],
                                                   ["rm"], ["system", "prune"])]
    assert removals == [], removals


def test_every_stage_of_the_dockerfile_is_labelled() -> None:
    """An image inherits its base's labels; each stage states its own, so the prune's filter
    finds the build stage build.sh leaves behind, and never the base."""
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    stages = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    assert len(stages) == 2, stages
    for start in stages:
        assert lines[start + 1] == f"LABEL {LABEL}=Dockerfile", lines[start:start + 2]
