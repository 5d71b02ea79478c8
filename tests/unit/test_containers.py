"""The container definitions: parsed with spython, they install exactly their stack's lock, carry its
hash, pin their base by digest, and regenerate identically; the Dockerfiles say the same."""

import os
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
from packaging.version import Version
from spython.main.parse.parsers import DockerParser, SingularityParser

from suite import __version__
from suite.base import paths
from suite.base.errors import UsageError
from suite.execution import image_builds, interconnect_check
from suite.instack import allreduce_sweep
from suite.runtimes import apptainer, docker
from suite.stacks import images, recipes
from suite.stacks.install import ensure_installed
from suite.stacks.locks import lock_pins
from suite.stacks.recipes import load_stack

FLAVOURS = recipes.described_flavours()
IDS = [fl.id for fl in FLAVOURS]
PIP_LOCK = re.compile(r"^/opt/stack/bin/python -m pip install --no-cache-dir --require-hashes --no-deps "
                      r"(?:--extra-index-url https://\S+ )?-r /opt/recipe/(\S+)$")
INSTALLERS = re.compile(r"\b(pip3?|easy_install|conda|mamba|uv)\b.*\binstall\b")
# Where a cuda lock may differ from the cpu lock, and why.
FRAMEWORK_NAMES = {"tensorflow-cpu": "tensorflow"}
ALLOWED_DIFFERENCES = {("mxnet", "pillow"): "the NGC MXNet image has CPython 3.10; pillow 13 needs 3.11"}


def definition(fl) -> "os.PathLike":
    return apptainer.recipe(fl).path


def dockerfile(fl) -> "os.PathLike":
    return docker.recipe(fl).path


def parsed(path):
    parser = SingularityParser if path.suffix == ".def" else DockerParser
    [recipe] = parser(str(path)).recipe.values()
    return recipe


def post_commands(fl) -> list[str]:
    """%post lines as spython reads them (it appends the %test script as echo lines: left out)."""
    return [line for line in parsed(definition(fl)).install if not line.startswith(("echo ", "chmod u+x /tests.sh"))]


def normalise(name: str) -> str:
    name = name.lower().replace("_", "-")
    return FRAMEWORK_NAMES.get(name, name)


def test_every_stack_has_both_flavours():
    stacks = {p.parent.name for p in paths.CONTAINERS.glob("*/requirements.lock")}
    assert {(fl.stack.name, fl.name) for fl in FLAVOURS} == {(s, f) for s in stacks for f in recipes.FLAVOURS}


@pytest.mark.parametrize("fl", FLAVOURS, ids=IDS)
def test_definition_installs_exactly_its_lock(fl):
    commands = post_commands(fl)
    pip = [c for c in commands if INSTALLERS.search(c)]
    assert len(pip) == 1, pip  # one package installation, and it is the lock's
    lock = PIP_LOCK.match(pip[0]).group(1)
    assert lock == fl.lock and lock_pins(fl.stack.dir / lock)  # every line name==version with hashes
    recipe = parsed(definition(fl))
    assert recipe.files == [f"containers/{fl.stack.name} /opt/recipe"]  # the lock the image reads is this file
    assert not [p for p in fl.apt if p.startswith("python3-") and p not in ("python3-venv", "python3-dev")]
    runs_post_install = [c for c in commands if c.endswith("bash /opt/recipe/post-install.sh")]
    assert len(runs_post_install) == (1 if fl.stack.post_install else 0)


@pytest.mark.parametrize("fl", [fl for fl in FLAVOURS if fl.name == "cpu"], ids=lambda fl: fl.id)
def test_cpu_image_installs_the_local_stacks_lock(fl):
    assert fl.lock_path == fl.stack.lock  # the same file `suite install` builds the local stack from


@pytest.mark.parametrize("fl", [fl for fl in FLAVOURS if fl.name == "cuda"], ids=lambda fl: fl.id)
def test_cuda_lock_keeps_the_cpu_locks_versions(fl):
    # the same release; the cpu flavour's torch is its CPU build (2.13.0+cpu), the cuda flavour's the public one
    cpu = {normalise(n): Version(v).public for n, v in lock_pins(fl.stack.lock).items()}
    cuda = {normalise(n): Version(v).public for n, v in lock_pins(fl.lock_path).items()}
    shared = sorted(set(cpu) & set(cuda))
    assert shared, "a cuda lock shares its stack's packages"
    differ = {n: (cpu[n], cuda[n]) for n in shared
              if cpu[n] != cuda[n] and (fl.stack.name, n) not in ALLOWED_DIFFERENCES}
    assert not differ


@pytest.mark.parametrize("fl", FLAVOURS, ids=IDS)
def test_labels_carry_lock_hash_and_suite_version(fl):
    labels = dict(line.split(None, 1) for line in parsed(definition(fl)).labels)
    assert labels["org.hpc-dl-bench.lock_sha256"] == fl.lock_sha256
    assert labels["org.hpc-dl-bench.stack"] == fl.stack.name and labels["org.hpc-dl-bench.flavour"] == fl.name
    assert labels["org.hpc-dl-bench.suite_version"] == __version__


@pytest.mark.parametrize("fl", FLAVOURS, ids=IDS)
def test_base_is_pinned_by_digest_or_marked_as_placeholder(fl):
    base = parsed(definition(fl)).fromHeader
    assert re.search(r"@sha256:([0-9a-f]{64}|placeholder)$", base), base
    if not fl.base_pinned:
        assert "PLACEHOLDER" in fl.base_source  # said where a reader looks


@pytest.mark.parametrize("fl", FLAVOURS, ids=IDS)
def test_test_section_smoke_imports_the_framework(fl):
    text = definition(fl).read_text()
    tests = text.split("%test", 1)[1].split("%help", 1)[0]
    framework = {"pytorch-horovod": "import torch", "pytorch": "import torch", "tensorflow": "import tensorflow",
                 "mxnet": "import mxnet", "jax": "import jax"}
    assert framework[fl.stack.name] in tests
    assert ("horovodrun --check-build" in tests) == (fl.stack.name == "pytorch-horovod")
    assert f"CASE={fl.example_case} RUNTIME=apptainer" in text.split("%help", 1)[1]


@pytest.mark.parametrize("fl", FLAVOURS, ids=IDS)
def test_dockerfile_says_what_the_definition_says(fl):
    defined, docked = parsed(definition(fl)), parsed(dockerfile(fl))
    assert f"ARG BASE={defined.fromHeader}\nFROM ${{BASE}}\n" in dockerfile(fl).read_text()  # the default base
    [folder] = defined.files  # the definition copies the stack folder; the Dockerfile what the build reads of it
    source, target = folder.split()
    read = [p.relative_to(fl.stack.dir).as_posix() for p in (fl.lock_path, *fl.stack.post_install_inputs())]
    assert sorted(f"{src} {dst}{src.rsplit('/', 1)[1]}" for src, dst in docked.files) == \
        sorted(f"{source}/{name} {target}/{name}" for name in read)
    assert [label.replace('="', " ").rstrip('"').replace("${BASE}", defined.fromHeader)
            for [label] in docked.labels] == defined.labels
    env = set(docked.environ)
    docker_commands = [c.removesuffix(" && \\") for c in docked.install if not c.startswith("#") and c.strip()
                       and c not in env and not c.startswith("BASE=")]  # spython's reading of the ARG
    tests = definition(fl).read_text().split("%test", 1)[1].split("%help", 1)[0].split("\n")
    def_tests = [line.strip() for line in tests if line.strip() and line.strip() != "set -eu"]
    assert docker_commands == post_commands(fl)[1:] + def_tests  # %post without its `set -eu`, then %test


def instructions(dockerfile_text: str) -> list[str]:
    """A Dockerfile's instructions, each with its continuation lines joined, comments left out."""
    found = []
    for line in dockerfile_text.splitlines():
        if line.startswith(" ") and found:
            found[-1] += " " + line.strip()
        elif line.strip() and not line.startswith("#"):
            found.append(line)
    return found


@pytest.mark.parametrize("fl", FLAVOURS, ids=IDS)
def test_dockerfile_copies_what_each_step_reads_just_before_it_and_labels_last(fl):
    """For Docker's layer cache: a changed post-install.sh builds again from its own step (not the packages), a
    change of the other flavour's files rebuilds nothing, and the labels, which change with every recipe
    change, come after every RUN."""
    found = instructions(dockerfile(fl).read_text())
    runs = [i for i, line in enumerate(found) if line.startswith("RUN ")]
    copied_before, copies = [], 0
    for i in runs:
        before = 0
        while found[i - 1 - before].startswith("COPY "):
            before += 1
        copies += before
        copied_before.append(sorted(src for line in found[i - before:i] for src in line.split()[1:-1]))
    wanted = [sorted(f"containers/{fl.stack.name}/{p.relative_to(fl.stack.dir).as_posix()}" for p in step.reads)
              for step in images.build_steps(fl)]
    assert copied_before == wanted + [[]]  # the image's test last, reading nothing new
    assert any(wanted) and copies == sum(line.startswith("COPY ") for line in found)  # no other COPY
    labels = [i for i, line in enumerate(found) if line.startswith("LABEL ")]
    assert labels and min(labels) > max(runs) and labels[-1] == len(found) - 1


def test_rendering_again_gives_the_same_files():
    assert image_builds.render(check=True) == []
    check = subprocess.run([sys.executable, "-m", "suite", "containers", "check"], cwd=paths.ROOT,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_changed_lock_makes_the_definition_stale(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CONTAINERS", tmp_path)
    shutil.copytree(paths.ROOT / "containers" / "mxnet", tmp_path / "mxnet")
    assert image_builds.render(check=True) == []
    with open(tmp_path / "mxnet" / "requirements.lock", "a") as lock:
        lock.write("# changed\n")
    stale = image_builds.render(check=True)  # cpu: its lock's hash; cuda: the recipe hash covers that lock too
    assert stale == [tmp_path / "mxnet" / f"{f}.{kind}" for f in ("cpu", "cuda") for kind in ("def", "Dockerfile")]
    image_builds.render()
    assert image_builds.render(check=True) == []


def test_a_changed_script_that_post_install_sources_makes_a_new_stack(tmp_path, monkeypatch):
    """Every script of the folder counts (post-install.sh sources gpu-build.sh); a rendered file does not."""
    monkeypatch.setattr(paths, "CONTAINERS", tmp_path)
    shutil.copytree(paths.ROOT / "containers" / "pytorch-horovod", tmp_path / "pytorch-horovod")
    before = {f: recipes.load_flavour(load_stack("pytorch-horovod"), f).recipe_sha256 for f in recipes.FLAVOURS}
    with open(tmp_path / "pytorch-horovod" / "cuda.def", "a") as rendered:
        rendered.write("# changed\n")
    assert {f: recipes.load_flavour(load_stack("pytorch-horovod"), f).recipe_sha256 for f in recipes.FLAVOURS} == before
    with open(tmp_path / "pytorch-horovod" / "gpu-build.sh", "a") as sourced:
        sourced.write("# changed\n")
    after = {f: recipes.load_flavour(load_stack("pytorch-horovod"), f).recipe_sha256 for f in recipes.FLAVOURS}
    assert all(after[f] != before[f] for f in recipes.FLAVOURS)


def test_description_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CONTAINERS", tmp_path)
    shutil.copytree(paths.ROOT / "containers" / "mxnet", tmp_path / "mxnet")
    description = tmp_path / "mxnet" / "container.toml"
    description.write_text(description.read_text().replace("@sha256:2e32", ":3.11-moving-tag#"))
    with pytest.raises(UsageError, match="must be pinned by digest"):
        images.load_flavour(load_stack("mxnet"), "cpu")
    with pytest.raises(UsageError, match="unknown flavour 'gpu'"):
        images.load_flavour(load_stack("mxnet"), "gpu")


@pytest.mark.parametrize("name", sorted(p.parent.name for p in paths.CONTAINERS.glob("*/container.toml")))
def test_every_stack_names_a_collective_that_the_interconnect_check_times(name):
    assert load_stack(name).collective in allreduce_sweep.APIS


def test_a_new_stack_s_collective_is_its_own_folder_s_word(tmp_path, monkeypatch):
    """A stack of a known framework is one folder: its container.toml names the collective the interconnect check
    times (no table elsewhere to edit); none named: the check is not available and says where to name it; a name
    the check does not know, or one in a flavour's table, is refused in one line before anything runs."""
    monkeypatch.setattr(paths, "CONTAINERS", tmp_path)
    shutil.copytree(paths.ROOT / "containers" / "pytorch", tmp_path / "torch-nightly")
    description = tmp_path / "torch-nightly" / "container.toml"
    text = description.read_text()
    assert load_stack("torch-nightly").collective == "torch"
    checked = SimpleNamespace(stack=None)

    description.write_text(text.replace('collective = "torch"', '# collective = "torch"'))
    checked.stack = load_stack("torch-nightly")
    found = interconnect_check.run_check(checked, None, tmp_path / "run", print, None)
    assert found["status"] == "not available" and str(description) in found["reason"], found
    description.write_text(text.replace('collective = "torch"', 'collective = "nccl"'))
    with pytest.raises(UsageError, match=r"collective 'nccl' is not one the interconnect check knows \(torch,"):
        load_stack("torch-nightly")
    description.write_text(text.replace("[cpu]\n", '[cpu]\ncollective = "horovod"\n'))
    with pytest.raises(UsageError, match=r"unknown keys \['collective'\]"):
        recipes.load_flavour(load_stack("torch-nightly"), "cpu")


def test_placeholder_base_is_refused_before_building():
    unpinned = [fl for fl in FLAVOURS if not fl.base_pinned]
    if not unpinned:
        pytest.skip("every base image is pinned")
    fl = unpinned[0]
    with pytest.raises(UsageError, match="not pinned to a verified digest"):
        image_builds.build(fl.stack.name, fl.name, "auto", log=lambda m: None)


def test_make_containers_says_what_is_missing():
    # What is missing depends on the machine: ask for a builder that is not here (auto when neither is).
    have_apptainer, engine_problem = shutil.which("apptainer"), docker.engine_problem()
    if have_apptainer and engine_problem is None:
        pytest.skip("apptainer and a Docker engine are both here: no builder is missing")
    tool = "docker" if have_apptainer else "apptainer" if engine_problem is None else "auto"
    result = subprocess.run([sys.executable, "-m", "suite", "containers", "build", "--stack", "tensorflow",
                             "--flavour", "cpu", "--tool", tool], cwd=paths.ROOT, capture_output=True, text=True)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    asked = {"auto": "apptainer or a Docker engine or Charliecloud's ch-convert with a Docker engine",
             "apptainer": "apptainer", "docker": "a Docker engine"}[tool]
    assert f"needs {asked};" in line
    assert f"apptainer: {'not asked for' if tool == 'docker' else 'not on PATH'}" in line
    assert f"docker: {'not asked for' if tool == 'apptainer' else engine_problem.split(' (')[0]}" in line


@pytest.mark.parametrize("name", sorted(p.parent.name for p in paths.CONTAINERS.glob("*/requirements.lock")))
def test_installed_local_stack_has_the_versions_of_its_lock(name):
    stack = load_stack(name)
    installed = ensure_installed(stack)  # the flavour that fits this host; the other tests need it too
    expected = {}
    for lock in stack.dir.glob("*.lock"):
        expected.update(lock_pins(lock))
    have = {normalise(n): v for n, v in installed.info["packages"].items()}
    wrong = {n: (v, have.get(normalise(n))) for n, v in expected.items() if have.get(normalise(n)) != v}
    assert not wrong


def test_an_images_folder_where_nothing_can_be_written_is_refused_before_any_build(monkeypatch):
    """The images and their metadata are written once a build is done, minutes later: the folder is checked once
    the tool is (a stand-in for the tool here: no engine is asked)."""
    monkeypatch.setenv("SUITE_IMAGE_DIR", "README.md/images")
    builds = []
    monkeypatch.setattr(image_builds, "builder", lambda tool, base, flavours: SimpleNamespace(
        build_image=lambda *args: builds.append(args)))
    with pytest.raises(UsageError, match=r"^the images' folder \(SUITE_IMAGE_DIR\) README.md/images: nothing can be "
                                         r"written there: .*README.md is not a folder$"):
        image_builds.build("pytorch", "cpu", "docker", wheels=paths.ROOT / "wheels-never-read")
    assert not builds


@pytest.mark.parametrize("args, path, message", [
    (("--base", "debian", "--stack", "pytorch"), "/nonexistent",
     "error: BASE=debian needs mmdebstrap or debootstrap on PATH (Debian: apt-get install mmdebstrap)"),
    (("--base", "debian", "--stack", "pytorch", "--flavour", "cuda"), None,
     "error: BASE=debian makes cpu images only (the cuda images start from NVIDIA's CUDA base)"),
    (("--base", "alpine", "--stack", "pytorch"), None,
     "error: BASE must be one of pinned, debian, docker, got 'alpine'"),
    (("--base", "docker", "--stack", "pytorch"), None,
     "error: BASE=docker builds with TOOL=apptainer, not TOOL=docker"),
    (("--stack", "pytorch"), None, "error: cannot build containers: needs a Docker engine; apptainer: "),
])
def test_build_refusals_are_one_line_before_anything_starts(tmp_path, args, path, message):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
           "SUITE_IMAGE_DIR": str(tmp_path / "images"), **({"PATH": path} if path else {})}
    result = subprocess.run([sys.executable, "-m", "suite", "containers", "build", "--tool", "docker", *args],
                            cwd=paths.ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(message)
    assert not (tmp_path / "images").exists()  # no wheel folder, no base, nothing built
