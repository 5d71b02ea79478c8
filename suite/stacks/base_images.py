"""The base image a stack's image is built on.

Two routes to a base (`make containers BASE=...`):
- pinned: the upstream image named by digest in container.toml (python:3.11-slim-bookworm@sha256:...),
  pulled by the engine from its registry;
- debian: a Debian root filesystem made here from Debian's own packages (mmdebstrap, or debootstrap),
  imported into the engine and tagged by the sha256 of its tarball. No registry is needed: the route
  for build hosts that reach a Debian mirror and a package index but no container registry.

Either way pip inside the build installs from a wheel folder (suite/stacks/wheelhouse.py) filled on the host
with the host's own pip settings and served to the build over HTTP on the loopback address: nothing
of the host's settings ends up in a layer, the lock's hashes are checked as in the local stack, and an
air-gapped builder needs only that folder."""

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from suite.base import paths
from suite.base.errors import UsageError
from suite.base.jsonfile import write_json_atomic
from suite.instack.file_digest import file_digest

DEBIAN_SUITE = "bookworm"
# Python 3.11 with venv and its headers (Horovod's build and torch.compile need Python.h), as in
# python:3.11-slim; ca-certificates for pip and apt inside.
DEBIAN_PACKAGES = ("python3", "python3-venv", "python3-dev", "ca-certificates")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
BASE_LABEL = "org.hpc-dl-bench.base"
BASE_REPOSITORY = "hpc-dl-bench-base"
RELEASE_DATE_FILE = "/etc/hpc-dl-bench-debian-release-date"
# dpkg's list of installed packages as name=version lines: written into every image, read back here
DPKG_LIST = "dpkg-query -W -f '${Package}=${Version}\\n'"


def parse_dpkg_list(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def check_debian(flavour: str) -> None:
    """Refuses, before anything starts, an image that cannot be built on a Debian base made here."""
    if flavour != "cpu":
        raise UsageError("BASE=debian makes cpu images only (the cuda images start from NVIDIA's CUDA base)")
    if not bootstrap_tool():
        raise UsageError("BASE=debian needs mmdebstrap or debootstrap on PATH (Debian: apt-get install mmdebstrap)")


def bootstrap_tool() -> str | None:
    return shutil.which("mmdebstrap") or shutil.which("debootstrap")


def spec_sha256() -> str:
    """What the Debian base is made of; an image made from the same spec is reused."""
    spec = f"{DEBIAN_SUITE} {DEBIAN_MIRROR} minbase {' '.join(DEBIAN_PACKAGES)}"
    return hashlib.sha256(spec.encode()).hexdigest()


def debian_base(client, log=print, refresh: bool = False) -> dict:
    """The Debian base image in the engine (made when missing): its tag, ID and provenance."""
    spec = spec_sha256()
    if not refresh:
        # by name too: the stacks' images inherit the base's labels
        made = client.images.list(name=BASE_REPOSITORY, filters={"label": f"{BASE_LABEL}.spec={spec}"})
        if made:
            image = max(made, key=lambda i: i.attrs.get("Created", ""))
            log(f"containers: Debian base {image.tags[0] if image.tags else image.id} "
                "(made before; BASE_REFRESH=1 remakes it)")
            return base_provenance(client, image)
    started = time.monotonic()
    tarball, release_date, digest = debian_tarball(log, refresh)
    tag = f"{BASE_REPOSITORY}:debian-{DEBIAN_SUITE}-{digest[:12]}"
    labels = {f"{BASE_LABEL}.kind": "debian", f"{BASE_LABEL}.suite": DEBIAN_SUITE,
              f"{BASE_LABEL}.mirror": DEBIAN_MIRROR, f"{BASE_LABEL}.release_date": release_date,
              f"{BASE_LABEL}.tar_sha256": digest, f"{BASE_LABEL}.spec": spec}
    repository, _, version = tag.partition(":")
    client.api.import_image_from_file(str(tarball), repository=repository, tag=version,
                                      changes=[f'LABEL {k}="{v}"' for k, v in labels.items()])
    image = client.images.get(tag)
    log(f"containers: Debian base {tag} ({image.id[:19]}, {image.attrs['Size'] / 1e6:.0f} MB), Release of "
        f"{release_date}, made in {time.monotonic() - started:.0f} s")
    return base_provenance(client, image)


def debian_tarball(log=print, refresh: bool = False) -> tuple[Path, str, str]:
    """The Debian base's root filesystem tarball, its Release date and sha256: made once per spec into the
    cache (bases/), where every image tool's base is made from (the Docker engine's and Apptainer's), and
    remade with refresh (BASE_REFRESH=1)."""
    folder = paths.cache_home() / "bases"
    tarball = folder / f"debian-{DEBIAN_SUITE}-{spec_sha256()[:12]}.tar"
    about = tarball.with_suffix(".json")
    if not refresh and tarball.exists() and about.exists():
        made = json.loads(about.read_text())
        log(f"containers: Debian root filesystem {tarball} (made before; BASE_REFRESH=1 remakes it)")
        return tarball, made["release_date"], made["tar_sha256"]
    folder.mkdir(parents=True, exist_ok=True)
    log(f"containers: making a Debian {DEBIAN_SUITE} base with {Path(bootstrap_tool()).name} "
        f"({', '.join(DEBIAN_PACKAGES)}) from {DEBIAN_MIRROR}")
    with tempfile.TemporaryDirectory(prefix="debian-base-", dir=folder) as tmp:
        partial = Path(tmp) / "base.tar"
        release_date = bootstrap(Path(tmp), partial)
        digest = file_digest(partial)
        partial.chmod(0o644)  # an unprivileged builder reads it
        os.replace(partial, tarball)
    write_json_atomic(about, {"release_date": release_date, "tar_sha256": digest, "spec": spec_sha256()})
    return tarball, release_date, digest


def bootstrap(workdir: Path, tarball: Path) -> str:
    """Writes the root filesystem tarball; returns the Date of the Release file it was made from."""
    tool = bootstrap_tool()
    include = f"--include={','.join(DEBIAN_PACKAGES)}"
    env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "0")}
    if Path(tool).name == "mmdebstrap":
        # The hook runs before mmdebstrap empties the package lists: keep the release date in the image.
        hook = (f'sed -n "s/^Date: //p" "$1"/var/lib/apt/lists/*_InRelease | head -n 1 > "$1"{RELEASE_DATE_FILE}')
        run([tool, "--quiet", "--variant=minbase", include, f"--customize-hook={hook}", DEBIAN_SUITE,
             str(tarball), DEBIAN_MIRROR], env)
        root_file = subprocess.run(["tar", "-xOf", str(tarball), f".{RELEASE_DATE_FILE}"],
                                   capture_output=True, text=True)
        return root_file.stdout.strip() or "unknown"
    root = workdir / "root"
    run([tool, "--variant=minbase", include, DEBIAN_SUITE, str(root), DEBIAN_MIRROR], env)
    release = next(iter(sorted((root / "var/lib/apt/lists").glob("*_Release"))), None)
    date = (next((line[6:] for line in release.read_text().splitlines() if line.startswith("Date: ")), "unknown")
            if release else "unknown")
    (root / RELEASE_DATE_FILE.lstrip("/")).write_text(date + "\n")
    run(["tar", "--sort=name", "--numeric-owner", "-C", str(root), "-cf", str(tarball), "."], env)
    return date


def run(argv: list[str], env: dict) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"{Path(argv[0]).name} failed with exit {done.returncode}: {' | '.join(tail)}")


def base_provenance(client, image) -> dict:
    labels = image.labels or {}
    packages = parse_dpkg_list(client.containers.run(image.id, ["sh", "-c", DPKG_LIST], remove=True).decode())
    return {"kind": "debian", "ref": image.tags[0] if image.tags else image.id,
            "image_sha256": image.id.removeprefix("sha256:"),
            "suite": labels.get(f"{BASE_LABEL}.suite"), "mirror": labels.get(f"{BASE_LABEL}.mirror"),
            "release_date": labels.get(f"{BASE_LABEL}.release_date"),
            "tar_sha256": labels.get(f"{BASE_LABEL}.tar_sha256"), "packages": packages}


def pinned_base(base: str) -> dict:
    return {"kind": "pinned", "ref": base.removeprefix("docker://")}

