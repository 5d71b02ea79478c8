"""Environment Modules (the Tcl one, Debian's `environment-modules`) beside Lmod: the two Debian
packages conflict, so the Tcl one is unpacked from its package into a folder of its own (no dpkg
install), its absolute paths moved there. Its init file then works as on a site that uses it."""

import subprocess
from pathlib import Path

PACKAGE = "environment-modules"
MOVED = ("/usr/share/modules", "/usr/lib/modulecmd.tcl", "/etc/environment-modules")


def download(folder: Path) -> Path:
    """The package file, fetched with apt (apt-get update once if the lists do not know it)."""
    for attempt in range(2):
        done = subprocess.run(["apt-get", "download", PACKAGE], cwd=folder, capture_output=True, text=True)
        found = sorted(folder.glob(f"{PACKAGE}_*.deb"))
        if found:
            return found[-1]
        if attempt == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True)
    raise RuntimeError(f"apt-get download {PACKAGE} failed: {done.stderr.strip()[-300:]}")


def unpack(folder: Path) -> Path:
    """Environment Modules unpacked under `folder` (once); returns its bash init file."""
    root = folder / "root"
    init = root / "usr/share/modules/init/bash"
    if init.exists():
        return init
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(download(folder)), str(root)], check=True)
    arch_libs = [f"/usr/lib/{p.parent.name}" for p in root.glob("usr/lib/*/modulecmd.tcl")]  # e.g. x86_64-linux-gnu
    moved = [*MOVED, *arch_libs]
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            text = path.read_bytes()
            if b"\0" in text:
                continue
            new = text
            for prefix in moved:
                new = new.replace(prefix.encode(), f"{root}{prefix}".encode())
            if new != text:
                path.write_bytes(new)
    return init
