"""RUNTIME=pyxis: every srun line of a dry run's job (and its environment definition file) checked
against the written specification of pyxis's options (tests/support/pyxis_spec.py), for the example
profiles of a DGX SuperPOD-style site and of CSCS Alps; its refusals before launch; its provenance.
enroot and pyxis cannot be installed here: tests/integration/test_pyxis_slurm.py runs the same job on
the tests' real SLURM with the container options stripped."""

import os
import re
import shlex
from pathlib import Path

import pytest
from support import pyxis_spec

from suite import cli
from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster, load_cluster
from suite.execution.plan import StackRequest
from suite.runtimes import pyxis
from suite.stacks import images
from suite.stacks.recipes import load_stack

STACK = load_stack("pytorch-horovod")
PACKAGES = {"torch": "2.7.0", "horovod": "0.28.1", "numpy": "2.1.0", "pillow": "11.0.0"}


def fake_image(folder: Path, stack=STACK, flavour="cpu", lock_sha256=None, name=None) -> Path:
    """A squashfs file (its bytes do not matter here) and the metadata `pyxis import` writes beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    image = folder / (name or f"{stack.name}-{flavour}.sqsh")
    image.write_bytes(b"hsqs not really")
    fl = images.load_flavour(stack, flavour)
    meta = images.write_image_meta(Path(f"{image}.json"), fl, str(image), "5e" * 32, "enroot", {"horovod_mpi": False},
                                   PACKAGES, {"kind": "pinned"})
    if lock_sha256:
        import json
        Path(f"{image}.json").write_text(json.dumps({**meta, "lock_sha256": lock_sha256}))
    return image


@pytest.fixture
def site(tmp_path, monkeypatch):
    """Profiles read from tmp_path, images in tmp_path/images, an srun whose help shows pyxis's options."""
    monkeypatch.setattr(paths, "HOSTFILES", tmp_path)
    monkeypatch.setenv("SUITE_IMAGE_DIR", str(tmp_path / "images"))
    for name in ("SUITE_IMAGE", "SLURM_JOB_ID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(f"#!/bin/sh\ncat <<'EOF'\nUsage: srun [OPTIONS...] executable\n{pyxis_spec.PYXIS_HELP}\nEOF\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


def dry_run(capsys, *args: str, runs: str = "/tmp/hpcdl-no-runs") -> tuple[str, str]:
    code = cli.main(["run", *args, "--dry-run", "--runs-dir", runs, "--results-dir", "/tmp/hpcdl-none"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out, err


def srun_lines(out: str) -> list[list[str]]:
    """Each process's step inside the job, as argv."""
    steps = out.split("inside the job, its runner starts each process as a job step")[1]
    return [shlex.split(line.split(": ", 1)[1]) for line in steps.splitlines() if re.match(r"  [\w-]+: srun ", line)]


def test_the_specification_rejects_what_pyxis_would():
    ok = ["srun", "--overlap", "--container-image=/i/x.sqsh", "--container-mounts=/a:/a,/b:/c:ro+rprivate",
          "--container-env=PYTHONPATH,NCCL_DEBUG", "--no-container-mount-home", "python", "x.py"]
    assert pyxis_spec.check_srun(ok) == []
    assert pyxis_spec.stripped(ok) == ["srun", "--overlap", "python", "x.py"]
    for bad, said in ((["--container-mounts=/a"], "not SRC:DST"), (["--container-mounts=/a b:/a"], "not SRC:DST"),
                      (["--container-mounts=/a:/a:sticky"], "flag 'sticky'"), (["--container-imag=x"], "not an option"),
                      (["--container-env=A-B"], "not NAME"), (["--container-writable=yes"], "takes no value"),
                      (["--container-mount-home", "--no-container-mount-home"], "together"),
                      (["--environment=/e.toml"], "together")):
        problems = pyxis_spec.check_srun(["srun", "--container-image=nvcr.io#nvidia/pytorch:24.01-py3", *bad, "python"])
        assert any(said in p for p in problems), (bad, problems)
    assert pyxis_spec.check_srun(["srun", "--container-image=nvcr.io#nvidia/pytorch:24.01-py3"]) == \
        ["no program after the container options"]


@pytest.mark.parametrize("profile", ["pyxis-site", "alps-edf"])
def test_every_srun_line_of_an_example_profile_meets_the_specification(profile, capsys, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    out, err = dry_run(capsys, "--cluster", profile, "--nodes", "2")
    lines = srun_lines(out)
    assert len(lines) >= 2 and all(line[0] == "srun" for line in lines)
    for line in lines:
        assert pyxis_spec.check_srun(line) == [], line
        options, program = pyxis_spec.container_options(line[1:])
        assert line[program + 1].startswith(images.PREFIX + "/bin/")  # the stack's program, inside the image
        if profile == "alps-edf":
            assert list(options) == ["--environment"] and options["--environment"].endswith(".toml")
        else:
            assert options["--container-image"].endswith("/pytorch-horovod-cpu.sqsh")
            assert re.fullmatch(r"hpcdl-pytorch-horovod-cpu-[0-9a-f]{12}", options["--container-name"])
            mounts = options["--container-mounts"].split(",")
            assert f"{paths.ROOT}:{paths.ROOT}" in mounts and "/lustre/fsw/YOUR_ACCOUNT/cache:/cache" in mounts
            assert "PYTHONPATH" in options["--container-env"].split(",")
    # What cannot be checked here (the site's folders and image) is said, and the dry run goes on.
    assert "warning: on this machine:" in out and "does not exist on this host" in out
    if profile == "alps-edf":  # the EDF the real run writes, shown, meets the EDF specification
        text = out.split("(a real run writes it):\n")[1].split("\nsuite: ")[0]
        edf = Path("/tmp") / f"hpcdl-edf-{os.getpid()}.toml"
        edf.write_text(text)
        try:
            assert pyxis_spec.check_edf(edf) == []
        finally:
            edf.unlink()
        assert 'annotations]' in text and '"com.hooks.aws_ofi_nccl.enabled" = "true"' in text


def test_a_built_image_gives_every_step_its_options_and_the_record_its_digest(site, capsys):
    fake_image(site / "images")
    (site / "site.toml").write_text('scheduler = "slurm"\nruntime = "pyxis"\n[pyxis]\nwritable = true\n')
    (site / "runs").mkdir()
    out, err = dry_run(capsys, "--cluster", "site", "--nodes", "2", "--gpus-per-node", "2", runs=str(site / "runs"))
    assert "warning" not in out, out[:2000]
    lines = srun_lines(out)
    assert [line[line.index("--quiet") + 1].split("=")[0] for line in lines] == ["--container-image"] * len(lines)
    for line in lines:
        assert pyxis_spec.check_srun(line, must_exist=True) == [], line
        assert "--container-writable" in line
    env = pyxis.prepare(StackRequest(STACK, "cpu", binds=(str(site),), scheduler="slurm", install=True),
                        lambda m: None)
    assert env.provenance["image_sha256"] == "5e" * 32 and env.provenance["runtime"] == "pyxis"
    assert env.provenance["stack_packages"] == PACKAGES and env.argv("python")[-1] == "/opt/stack/bin/python"


def test_the_edf_variant_writes_a_file_that_meets_the_specification(site):
    fake_image(site / "images")
    cluster = Cluster("alps", site / "alps.toml", scheduler="slurm", runtime="pyxis",
                      plugins={"pyxis": {"edf": True, "mounts": [f"{site}:/scratch:ro"]}})
    env = pyxis.prepare(StackRequest(STACK, "cpu", binds=(str(site / "runs"),), profile=cluster, scheduler="slurm"),
                        lambda m: None)
    [option] = env.prefix
    edf = Path(option.removeprefix("--environment="))
    assert edf.is_file() and edf.parent == (site / "runs" / "edf").resolve()
    assert pyxis_spec.check_edf(edf, must_exist=True) == []
    assert f'"{site}:/scratch:ro"' in edf.read_text() and 'PYTHONPATH = "' in edf.read_text()
    assert pyxis_spec.check_srun(["srun", "--quiet", *env.argv("python", "x.py")], must_exist=True) == []


def test_pyxis_without_slurm_is_refused_in_one_line(site, capsys):
    fake_image(site / "images")
    (site / "localhost").write_text((paths.ROOT / "hostfiles" / "localhost").read_text())
    code = cli.main(["run", "--runtime", "pyxis", "--runs-dir", str(site / "runs"), "--results-dir", str(site / "r")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "RUNTIME=pyxis needs SCHEDULER=slurm" in err and "scheduler here: local" in err
    assert not (site / "r").exists()


def test_a_mount_of_a_missing_folder_is_refused_in_one_line(site, capsys):
    fake_image(site / "images")
    (site / "site.toml").write_text('scheduler = "slurm"\nruntime = "pyxis"\n'
                                    '[pyxis]\nmounts = ["/no/such/folder:/data"]\n')
    code = cli.main(["run", "--cluster", "site", "--runs-dir", str(site / "runs"), "--results-dir", str(site / "r")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "/no/such/folder does not exist on this host" in err
    assert not (site / "r").exists()


@pytest.mark.parametrize("dry", [True, False])
def test_an_unknown_placeholder_in_a_template_is_refused_in_one_line_before_anything(site, capsys, dry):
    fake_image(site / "images")
    (site / "site.toml").write_text('scheduler = "slurm"\nruntime = "pyxis"\n'
                                    '[pyxis]\nimage = "/images/{stack}-{nosuchfield}.sqsh"\n')
    code = cli.main(["run", "--cluster", "site", *(["--dry-run"] if dry else []), "--runs-dir", str(site / "runs"),
                     "--results-dir", str(site / "r")])
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "srun" not in out, err
    assert "[pyxis] image = '/images/{stack}-{nosuchfield}.sqsh': unknown placeholder {nosuchfield} " \
           "(known: {stack}, {flavour}, {image_dir})" in err
    assert not (site / "r").exists() and not (site / "runs").exists()


@pytest.mark.parametrize("template, said", [
    ("/images/{stack!r}.sqsh", "unknown placeholder {stack!r}"), ("/images/{}.sqsh", "unknown placeholder {}"),
    ("/images/{stack.upper}.sqsh", "unknown placeholder {stack.upper}"),
    ("/images/{stack", "expected '}' before end of string"),
])
def test_a_placeholder_is_a_known_name_alone(site, template, said):
    (site / "site.toml").write_text(f'scheduler = "slurm"\nruntime = "pyxis"\n[pyxis]\nmetadata = "{template}"\n')
    with pytest.raises(UsageError, match=re.escape(said)):
        load_cluster("site")


@pytest.mark.parametrize("mounts, said", [
    (["/tmp"], "is not SRC:DST"), (["/tmp:data"], "must be an absolute path"), (["/tmp:/d:Ro"], "flags of"),
])
def test_malformed_mounts_are_refused(site, mounts, said):
    cluster = Cluster("c", site / "c.toml", plugins={"pyxis": {"mounts": mounts}})
    with pytest.raises(UsageError, match=said):
        pyxis.prepare(StackRequest(STACK, "cpu", profile=cluster, scheduler="slurm"), lambda m: None)


def test_a_folder_pyxis_cannot_mount_is_refused(site):
    odd = site / "a,b"
    odd.mkdir()
    fake_image(site / "images")
    with pytest.raises(UsageError, match="pyxis cannot mount .*no comma, colon or whitespace"):
        pyxis.prepare(StackRequest(STACK, "cpu", binds=(str(odd),), scheduler="slurm"), lambda m: None)


def test_images_of_another_stack_or_lock_are_refused(site, monkeypatch):
    want = StackRequest(STACK, "cpu", scheduler="slurm")
    fake_image(site / "images", lock_sha256="0" * 64)
    with pytest.raises(UsageError, match="built from another lock than the checkout's"):
        pyxis.prepare(want, lambda m: None)
    other = fake_image(site / "other", stack=load_stack("tensorflow"), name="tf.sqsh")
    monkeypatch.setenv("SUITE_IMAGE", str(other))
    with pytest.raises(UsageError, match="holds stack 'tensorflow', not pytorch-horovod"):
        pyxis.prepare(want, lambda m: None)
    monkeypatch.setenv("SUITE_IMAGE", str(site / "missing.sqsh"))
    with pytest.raises(UsageError, match="no cpu image of stack pytorch-horovod at .*missing.sqsh: make containers"):
        pyxis.prepare(want, lambda m: None)


def test_an_srun_without_pyxis_is_refused_naming_the_plugin(site, monkeypatch):
    fake_image(site / "images")
    (site / "bin" / "srun").write_text("#!/bin/sh\necho 'Usage: srun [OPTIONS...]'\n")
    with pytest.raises(UsageError, match="srun --help shows no --container-image: the pyxis plugin is not loaded"):
        pyxis.prepare(StackRequest(STACK, "cpu", scheduler="slurm"), lambda m: None)
    slurm_site = Cluster("site", site / "site.toml", scheduler="slurm", runtime="pyxis")
    lines = pyxis.doctor_lines(slurm_site, ["pytorch-horovod"], "cpu")
    assert lines[0].startswith("missing: pyxis (srun --container-image): srun --help shows no --container-image")
    assert lines[1].startswith("ok: image ") and lines[1].endswith("pytorch-horovod-cpu.sqsh and its metadata")


def test_a_registry_image_takes_the_docker_builds_metadata(site):
    fl = images.load_flavour(STACK, "cpu")
    (site / "images").mkdir()
    images.write_image_meta(site / "images" / "pytorch-horovod-cpu.docker.json", fl, "hpc-dl-bench-x:cpu", "7a" * 32,
                            "docker", {}, PACKAGES, {"kind": "debian"})
    cluster = Cluster("c", site / "c.toml", plugins={"pyxis": {"image": "nvcr.io#site/hpc-dl-bench-{stack}:{flavour}"}})
    env = pyxis.prepare(StackRequest(STACK, "cpu", profile=cluster, scheduler="slurm"), lambda m: None)
    assert env.prefix[0] == "--container-image=nvcr.io#site/hpc-dl-bench-pytorch-horovod:cpu"
    assert env.provenance["image_sha256"] == "7a" * 32
    bad = Cluster("c", site / "c.toml", plugins={"pyxis": {"image": "not an image"}})
    with pytest.raises(UsageError, match="neither a squashfs file nor an enroot image reference"):
        pyxis.prepare(StackRequest(STACK, "cpu", profile=bad, scheduler="slurm"), lambda m: None)


def test_check_site_says_why_pyxis_is_not_available_here():
    from suite.execution import site_paths

    said = site_paths.runtime_problem("pyxis", None, "pytorch", "cpu")
    assert said.startswith("SCHEDULER=slurm for runtime pyxis")
