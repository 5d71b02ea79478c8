"""BASE=docker: the SIF made from the stack's Docker image of the same lock (`docker save`, then `apptainer
build IMAGE.sif docker-archive:TAR`), the image's test commands run in it, described as a definition's
build is, with the Docker image it came from (built_from); kept while made from that very image."""

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from suite.base.errors import UsageError
from suite.runtimes.apptainer.definition import build_options, describe
from suite.runtimes.apptainer.sif import check_sif, found_program, meta_path
from suite.stacks import images


def docker_source(fl):
    """The newest tagged Docker image of the flavour's lock in the engine (`make containers TOOL=docker` built
    it, on either base; untagged ones are earlier builds whose tag has moved on); UsageError naming that make
    line where there is none."""
    import docker

    labels = {"stack": fl.stack.name, "flavour": fl.name, "lock_sha256": fl.lock_sha256}
    try:
        found = docker.from_env(timeout=60).images.list(
            filters={"label": [f"{images.LABEL}.{k}={v}" for k, v in labels.items()], "dangling": False})
    except Exception as exc:  # the SDK raises several kinds; all mean "no engine to ask"
        raise UsageError(f"BASE=docker makes the SIF from the Docker image, but no Docker engine answers: "
                         f"{str(exc).splitlines()[0][:160]}") from None
    found = [image for image in found if image.tags]
    if not found:
        raise UsageError(f"no Docker image of {fl.id} (lock {fl.lock_sha256[:12]}) in the engine to make the SIF "
                         f"from: build it with `make containers STACK={fl.stack.name} FLAVOUR={fl.name} TOOL=docker`"
                         + (" (BASE=debian where no registry answers)" if fl.name == "cpu" else ""))
    return max(found, key=lambda image: image.attrs["Created"])


def build_from_docker(fl, log=print) -> dict:
    """`apptainer build IMAGE.sif docker-archive:TAR` of the flavour's Docker image, saved into the image
    folder (the builder, perhaps an unprivileged user, reads it there); the image's test commands run in
    the SIF; its sha256 and metadata beside it as a definition's build writes them, with the Docker
    image it came from as built_from."""
    tool = found_program()
    source = docker_source(fl)
    ref = source.tags[0] if source.tags else source.id
    image = images.build_dir() / f"{fl.stack.name}-{fl.name}.sif"
    if (kept := made_before(image, source)) is not None:
        log(f"containers: {image} was made from the Docker image {ref} ({source.short_id}) before: kept")
        return kept
    image.parent.mkdir(parents=True, exist_ok=True)
    partial = image.with_suffix(".sif.partial")
    build_log = Path(f"{image}.build.log")
    log(f"containers: apptainer build {image} from the Docker image {ref} ({source.short_id})")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="docker-archive-", dir=image.parent) as tmp:
        os.chmod(tmp, 0o755)
        archive = Path(tmp) / "image.tar"
        save_image(source, archive)
        saved = time.monotonic()
        with open(build_log, "w") as keep:
            argv = [tool, "build", *build_options(), "--force", str(partial), f"docker-archive:{archive}"]
            code = subprocess.run(argv, stdout=keep, stderr=subprocess.STDOUT).returncode
    if code != 0:
        partial.unlink(missing_ok=True)
        raise UsageError(f"apptainer build of {image.name} from {ref} failed (exit {code}): "
                         f"{log_tail(build_log)}; the build's output: {build_log}")
    run_image_test(tool, partial, fl, build_log)
    os.replace(partial, image)
    Path(f"{image}.def").unlink(missing_ok=True)  # a definition's build wrote it: not this image's
    meta = describe(tool, image, fl, images.base_from_labels(source.labels),
                    {"built_from": {"docker_image": ref, "docker_image_sha256": source.id.removeprefix("sha256:")}})
    log(f"containers: {image} sha256:{meta['image_sha256']} ({image.stat().st_size / 1e6:.0f} MB, docker save "
        f"{saved - started:.0f} s, built in {time.monotonic() - started:.0f} s)")
    return meta


def made_before(image: Path, source) -> dict | None:
    """The metadata of the SIF at image where it is whole and was made from this very Docker image (the
    SIF is a function of it: nothing to make again), else None."""
    try:
        meta = json.loads(meta_path(image).read_text())
        check_sif(image, meta, "")
    except (OSError, ValueError, UsageError):
        return None
    made_from = (meta.get("built_from") or {}).get("docker_image_sha256")
    return meta if made_from == source.id.removeprefix("sha256:") else None


def save_image(source, archive: Path) -> None:
    """`docker save` of one image (named by its tag, so the archive holds one) into archive, readable by all."""
    with open(archive, "wb") as out:
        for chunk in source.save(chunk_size=1 << 20, named=bool(source.tags)):
            out.write(chunk)
    archive.chmod(0o644)


def run_image_test(tool: str, image: Path, fl, build_log: Path) -> None:
    """The image's test (a definition's %test, the Dockerfile's last RUN) run in the SIF, its output added
    to the build's; a failure removes the image and names the command."""
    script = "\n".join(["set -eux", *images.test_commands(fl)])
    with open(build_log, "a") as keep:
        keep.write("INFO:    Running the image's test\n")
        keep.flush()
        code = subprocess.run([tool, "exec", str(image), "sh", "-c", script], stdout=keep,
                              stderr=subprocess.STDOUT).returncode
    if code != 0:
        image.unlink(missing_ok=True)
        said = build_log.read_text().splitlines()
        failed = next((line[2:] for line in reversed(said) if line.startswith("+ ")), "?")
        raise UsageError(f"the test of {fl.id} failed in the SIF made from its Docker image: `{failed[:160]}` "
                         f"(exit {code}); the output: {build_log}")


def log_tail(build_log: Path) -> str:
    return " | ".join(build_log.read_text(errors="replace").strip().splitlines()[-3:])[:400]
