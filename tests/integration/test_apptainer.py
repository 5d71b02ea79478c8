"""RUNTIME=apptainer for real, unprivileged as at HPC centres: Apptainer itself (tests/support/
apptainer_fixtures.py: this machine's own, else a Debian tree's run as an unprivileged user), the pytorch
stack's cpu SIF built from its definition by `make containers TOOL=apptainer BASE=debian` (once per
session), a case's ranks run in it, and what is refused before anything starts."""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import records_in, tiny
from support.image_runs import check_site_then_rerun

from suite.instack.file_digest import file_digest
from suite.records.schema import validate
from suite.runtimes import apptainer
from suite.runtimes.apptainer import definition
from suite.stacks import images
from suite.stacks.images import Recipe
from suite.stacks.recipes import load_flavour, load_stack

ROOT = Path(__file__).resolve().parents[2]
FLAVOUR = load_flavour(load_stack("pytorch"), "cpu")


def run_ddp(here, *extra: str, env: dict | None = None, case_args=None):
    out = here.writable_folder("run")
    done = here.suite("run", "--case", "pytorch-ddp", "--runtime", "apptainer", "--flavour", "cpu",
                      "--gpus-per-node", "2", "--results-dir", str(out / "results"), "--runs-dir", str(out / "runs"),
                      *extra, "--", *(case_args or tiny("pytorch-ddp")), env=env)
    return done, out


def refused(done, out: Path) -> str:
    """The one line a refusal prints; nothing ran."""
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    [line] = done.stderr.strip().splitlines()
    assert not (out / "results").exists() and not any((out / "runs").glob("*/*"))
    return line


def test_apptainer_runs_unprivileged_with_the_host_folders_at_their_paths(apptainer_here):
    version = subprocess.run([apptainer_here.program, "--version"], capture_output=True, text=True, timeout=60)
    assert re.fullmatch(r"apptainer version \d+\.\d+\.\d+\S*", version.stdout.strip()), version
    if os.geteuid() == 0 and apptainer_here.program != shutil.which("apptainer"):
        # the test tree's command: Apptainer itself runs as its unprivileged user, never as root
        who = subprocess.run([apptainer_here.program, "help"], capture_output=True, text=True, timeout=60)
        assert who.returncode == 0
        marker = apptainer_here.writable_folder("whoami")
        script = (ROOT / "tools" / "apptainer-tree-enter.sh").read_text()
        assert "setpriv --reuid" in script
        tree = Path(apptainer_here.program).read_text().split('"')[3]
        enter = subprocess.run([str(apptainer_here.bin_dir / "apptainer-tree-enter.sh"), tree, "2751", "/",
                                "/bin/sh", "-c", f"id -u > {marker}/uid; test -d {ROOT}/suite && touch {marker}/seen"],
                               cwd=marker, env=apptainer_here.env(), capture_output=True, text=True, timeout=60)
        assert enter.returncode == 0, enter.stderr
        assert (marker / "uid").read_text().strip() == "2751" and (marker / "seen").exists()
        # the tree is made once: a second call finds it complete and only writes the command again
        again = subprocess.run([str(ROOT / "tools" / "apptainer-tree.sh")], capture_output=True, text=True,
                               timeout=60)
        assert again.returncode == 0 and again.stdout.strip() == str(apptainer_here.bin_dir), again.stderr
        assert "made in" not in again.stderr


def test_doctor_sees_apptainer_its_version_and_the_image(apptainer_here, pytorch_sif, monkeypatch):
    """What `make doctor` prints for a profile with runtime apptainer (and what `make check-site` asks)."""
    for name, value in apptainer_here.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SUITE_IMAGE", raising=False)
    apptainer.runtime_version.cache_clear()
    lines = apptainer.doctor_lines(None, ["pytorch", "tensorflow"], "cpu")
    assert lines[0] == f"ok: apptainer {pytorch_sif['tool_version']} ({apptainer_here.program})", lines
    assert lines[1] == f"ok: image {apptainer_here.images / 'pytorch-cpu.sif'}"
    assert lines[2] == (f"missing: image {apptainer_here.images / 'tensorflow-cpu.sif'} "
                        "(make containers STACK=tensorflow FLAVOUR=cpu)")


def test_check_site_runs_the_apptainer_path_in_the_sif_and_rerun_uses_the_same_sif(apptainer_here, pytorch_sif):
    """`make check-site`'s apptainer row runs (ok, two ranks) and writes a record; `suite rerun` of it runs in the
    same SIF, and refuses, naming both digests, before launch where the image folder holds a rebuilt SIF (another
    sha256)."""
    out = apptainer_here.writable_folder("check")
    rebuilt = apptainer_here.writable_folder("rebuilt")
    os.link(apptainer_here.images / "pytorch-cpu.sif", rebuilt / "pytorch-cpu.sif")
    (rebuilt / "pytorch-cpu.sif.json").write_text(json.dumps({**pytorch_sif, "image_sha256": "ab" * 32}))
    row, new = check_site_then_rerun(
        apptainer_here.env(), out, "apptainer", pytorch_sif["image_sha256"], apptainer_here.program,
        {"SUITE_IMAGE_DIR": str(rebuilt)},
        f"drift: image: sha256 {pytorch_sif['image_sha256'][:12]} in the record, abababababab here "
        f"({rebuilt / 'pytorch-cpu.sif'}, runtime apptainer)",
        run=lambda env, *args: apptainer_here.suite(*args, env=env))
    assert row["devices"] == 2, row
    provenance = json.loads(Path(row["record"]).read_text())["provenance"]
    assert (provenance["runtime"], provenance["runtime_version"]) == ("apptainer", pytorch_sif["tool_version"])
    assert all(p["argv"][:2] == [apptainer_here.program, "exec"] for p in new["repetitions"][0]["processes"])


def test_the_sif_is_built_from_its_definition_and_described_beside_it(apptainer_here, pytorch_sif):
    image = apptainer_here.images / "pytorch-cpu.sif"
    meta = pytorch_sif
    assert (meta["stack"], meta["flavour"], meta["tool"]) == ("pytorch", "cpu", "apptainer")
    assert meta["lock_sha256"] == FLAVOUR.lock_sha256 and meta["recipe_sha256"] == FLAVOUR.recipe_sha256
    assert meta["image_sha256"] == file_digest(image) and meta["image_bytes"] == image.stat().st_size
    assert (apptainer_here.images / "pytorch-cpu.sif.sha256").read_text().split()[0] == meta["image_sha256"]
    assert meta["packages"]["torch"].startswith("2.") and meta["system_packages"]["python3"].startswith("3.11")
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", meta["tool_version"])
    base = meta["base"]
    assert base["kind"] == "debian" and base["suite"] == "bookworm" and Path(base["ref"]).exists()
    assert re.fullmatch(r"[0-9a-f]{64}", base["tar_sha256"]) and "python3-venv" in base["packages"]
    # what was built is the rendered definition, with only the base and the wheel folder filled in
    built = Path(f"{image}.def").read_text()
    assert built.startswith(f"Bootstrap: localimage\nFrom: {base['ref']}\n")
    rendered = apptainer.recipe(FLAVOUR).text
    assert [line for line in built.splitlines()[2:] if "WHEELS=" not in line and line != "    set -x"] == \
        rendered.splitlines()[2:]
    log = Path(f"{image}.build.log").read_text()
    assert "Running post scriptlet" in log and "Running testscript" in log  # %test ran
    assert "torch 2." in log and "gloo True" in log  # the smoke test's own words
    # pip installed from the wheel folder served on the loopback address alone (WHEELS), no index
    downloads = [line for line in log.splitlines() if line.strip().startswith("Downloading ")]
    assert downloads and all(" http://127.0.0.1:" in line for line in downloads), downloads[:3]
    assert "Looking in links: http://127.0.0.1:" in log and "Looking in indexes" not in log


def test_building_again_from_the_same_inputs_keeps_the_sif(apptainer_here, pytorch_sif):
    """As the engine's layer cache does: nothing changed, nothing built; the SIF described again."""
    image = apptainer_here.images / "pytorch-cpu.sif"
    before = image.stat()
    again = apptainer_here.suite("containers", "build", "--tool", "apptainer", "--base", "debian", "--stack", "pytorch",
                                 "--flavour", "cpu", timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"containers: {image} was built from the same definition, stack folder, base and Apptainer before: kept" \
        in again.stdout, again.stdout
    assert "apptainer build" not in again.stdout
    assert (image.stat().st_ino, image.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    meta = json.loads(apptainer.meta_path(image).read_text())
    assert meta["built_from"] == pytorch_sif["built_from"] and meta["image_sha256"] == pytorch_sif["image_sha256"]
    assert meta["built_from"]["definition"] == "containers/pytorch/cpu.def"


def test_the_image_holds_exactly_the_versions_of_its_lock(apptainer_here, pytorch_sif):
    image = apptainer_here.images / "pytorch-cpu.sif"
    frozen = subprocess.run([apptainer_here.program, "exec", str(image), f"{images.PREFIX}/bin/python", "-m", "pip",
                             "freeze", "--all"], capture_output=True, text=True, timeout=120)
    assert frozen.returncode == 0, frozen.stderr
    installed = dict(line.split("==", 1) for line in frozen.stdout.splitlines() if "==" in line)
    assert installed["torch"] == pytorch_sif["packages"]["torch"]
    from suite.stacks.locks import lock_pins

    pins = {k.lower(): v for k, v in lock_pins(FLAVOUR.stack.dir / FLAVOUR.lock).items()}
    assert all(pins[name.lower()] == version for name, version in installed.items() if name.lower() in pins)


def test_a_failing_definition_names_its_section_and_line(apptainer_here, pytorch_sif, tmp_path, monkeypatch):
    base = pytorch_sif["base"]["ref"]
    text = (f"Bootstrap: localimage\nFrom: {base}\n\n%post\n    set -eu\n    echo one\n"
            "    test -e /no/such/file\n    echo never\n\n%test\n    true\n")
    rendered = Recipe(ROOT / "containers" / "pytorch" / "broken.def", text)
    folder = apptainer_here.writable_folder("broken")
    built = folder / "broken.def"
    built.write_text(definition.build_definition(text, None, ""))
    monkeypatch.setenv("PATH", f"{apptainer_here.bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(apptainer.UsageError) as refused_build:
        definition.run_build(apptainer_here.program, folder / "broken.sif.partial", built, rendered,
                             log=lambda m: None)
    said = str(refused_build.value)
    assert "\n" not in said
    assert said.startswith("apptainer build failed in %post of containers/pytorch/broken.def line 7: "
                           "`test -e /no/such/file`"), said
    assert not (folder / "broken.sif.partial").exists()


@pytest.fixture(scope="module")
def ddp_in_sif(apptainer_here, pytorch_sif):
    """pytorch-ddp's two ranks in the SIF, once for the module: the command's result and its folder."""
    return run_ddp(apptainer_here)


def test_ddp_ranks_train_in_the_sif_unprivileged(apptainer_here, pytorch_sif, ddp_in_sif):
    done, out = ddp_in_sif
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = records_in(out / "results")
    validate(record)
    assert record["status"] == "ok", record.get("reason")
    prov = record["provenance"]
    image = apptainer_here.images / "pytorch-cpu.sif"
    assert (prov["runtime"], prov["image"], prov["image_sha256"]) == ("apptainer", str(image),
                                                                       pytorch_sif["image_sha256"])
    assert prov["runtime_version"] == pytorch_sif["tool_version"]
    assert prov["stack_lock_sha256"] == FLAVOUR.lock_sha256 and prov["image_base"]["kind"] == "debian"
    assert record["world"]["devices"] == 2 and record["metrics"]["throughput"]["mean"] > 0
    for process in record["repetitions"][0]["processes"]:
        assert process["argv"][:2] == [apptainer_here.program, "exec"] and str(image) in process["argv"]
    # the ranks ran as the container's user where the test tree runs them: what they wrote is theirs
    if apptainer_here.program != shutil.which("apptainer") and os.geteuid() == 0:
        owners = {p.stat().st_uid for p in (out / "runs").rglob("*") if p.is_file()}
        assert 2751 in owners, owners


def test_no_image_is_refused_naming_the_make_containers_line(apptainer_here):
    empty = apptainer_here.writable_folder("no-images")
    done, out = run_ddp(apptainer_here, env=apptainer_here.env(SUITE_IMAGE_DIR=str(empty)))
    line = refused(done, out)
    assert line == (f"error: no cpu image of stack pytorch at {empty}/pytorch-cpu.sif: build it with "
                    "`make containers STACK=pytorch FLAVOUR=cpu` (or set SUITE_IMAGE)")


def copy_with_meta(here, pytorch_sif, name: str, data: bytes | None = None, **meta) -> Path:
    """An image beside its metadata in a folder of its own: a hard link of the built SIF (or data)."""
    folder = here.writable_folder(name)
    image = folder / "pytorch-cpu.sif"
    if data is None:
        os.link(here.images / "pytorch-cpu.sif", image)
    else:
        image.write_bytes(data)
    apptainer.meta_path(image).write_text(json.dumps({**pytorch_sif, **meta}))
    return image


def test_a_sif_of_another_stack_is_refused(apptainer_here, pytorch_sif):
    image = copy_with_meta(apptainer_here, pytorch_sif, "other-stack", stack="tensorflow")
    done, out = run_ddp(apptainer_here, env=apptainer_here.env(SUITE_IMAGE=str(image)))
    assert refused(done, out) == f"error: {image} holds stack 'tensorflow', not pytorch"


def test_a_sif_of_an_older_lock_is_refused(apptainer_here, pytorch_sif):
    image = copy_with_meta(apptainer_here, pytorch_sif, "older-lock", lock_sha256="0" * 64)
    done, out = run_ddp(apptainer_here, env=apptainer_here.env(SUITE_IMAGE=str(image)))
    line = refused(done, out)
    assert line.startswith("error: the cpu image of pytorch was built from another lock than the checkout's "
                           "(image 000000000000, checkout ") and "make containers STACK=pytorch FLAVOUR=cpu" in line


def test_a_truncated_sif_is_refused(apptainer_here, pytorch_sif):
    head = (apptainer_here.images / "pytorch-cpu.sif").open("rb").read(1 << 20)
    image = copy_with_meta(apptainer_here, pytorch_sif, "truncated", data=head)
    done, out = run_ddp(apptainer_here, env=apptainer_here.env(SUITE_IMAGE=str(image)))
    assert refused(done, out) == (f"error: {image} has {1 << 20} bytes, not the {pytorch_sif['image_bytes']} it was "
                                  "built with (cut short or replaced): rebuild it with "
                                  "`make containers STACK=pytorch FLAVOUR=cpu`")


def test_a_file_that_is_no_sif_is_refused(apptainer_here, pytorch_sif):
    image = copy_with_meta(apptainer_here, pytorch_sif, "not-sif", data=b"\0" * 4096, image_bytes=4096)
    done, out = run_ddp(apptainer_here, env=apptainer_here.env(SUITE_IMAGE=str(image)))
    assert refused(done, out) == (f"error: {image} is not a SIF image (no SIF header): rebuild it with "
                                  "`make containers STACK=pytorch FLAVOUR=cpu`")


def test_an_unreadable_sif_is_refused(apptainer_here, pytorch_sif):
    folder = apptainer_here.writable_folder("unreadable")
    image = folder / "pytorch-cpu.sif"
    image.mkdir()  # unreadable as a file whoever runs the suite, root included
    apptainer.meta_path(image).write_text(json.dumps(pytorch_sif))
    done, out = run_ddp(apptainer_here, env=apptainer_here.env(SUITE_IMAGE=str(image)))
    assert refused(done, out) == f"error: cannot read the image {image} (Is a directory)"


def test_a_bind_of_a_missing_folder_is_refused(apptainer_here, pytorch_sif):
    missing = apptainer_here.folder / "no-such-data"
    done, out = run_ddp(apptainer_here, "--data-dir", str(missing))
    assert refused(done, out) == f"error: cannot bind {missing} into the image: no such folder"


def test_gpt_trains_sharded_in_the_sif_unprivileged(apptainer_here, pytorch_sif):
    out = apptainer_here.writable_folder("gpt")
    done = apptainer_here.suite("run", "--case", "pytorch-gpt", "--runtime", "apptainer", "--flavour", "cpu",
                                "--gpus-per-node", "2", "--results-dir", str(out / "results"), "--runs-dir",
                                str(out / "runs"), "--", *tiny("pytorch-gpt", parallel="fsdp"))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = records_in(out / "results")
    validate(record)
    assert record["status"] == "ok", record.get("reason")
    assert (record["provenance"]["runtime"], record["provenance"]["image_sha256"]) == \
        ("apptainer", pytorch_sif["image_sha256"])
    assert record["world"]["devices"] == 2 and record["metrics"]["throughput"]["mean"] > 0


APPTAINER_COMMS = ("apptainer", "starter", "starter-suid", "squashfuse", "squashfuse_ll", "Apptainer runti")


def apptainer_processes() -> dict[int, str]:
    """Live processes of Apptainer (its command, its starter, squashfuse mounting a SIF): pid -> name."""
    found = {}
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            name = comm.read_text().strip()
        except OSError:
            continue
        if name in APPTAINER_COMMS:
            found[int(comm.parent.name)] = name
    return found


@pytest.mark.parametrize("stop", ["SIGINT"])  # SIGTERM takes the same path in the runner (test_faults.py)
def test_stopping_the_runner_ends_the_job_within_60_s_leaving_no_process(apptainer_here, pytorch_sif, monkeypatch,
                                                                         stop):
    """Ctrl-C to the runner mid-run: the job ends within 60 s with a failed record, and no process of
    the run is left: no rank, no apptainer, no squashfuse mounting the SIF."""
    import signal

    from support.faults import as_from_a_terminal, failed_record_after, kill_all, start_run, wait_for_ranks

    for name, value in apptainer_here.env().items():
        monkeypatch.setenv(name, value)
    out = apptainer_here.writable_folder("stop")

    def preexec():
        as_from_a_terminal()
        os.umask(0)

    runner = start_run(out, "--case", "pytorch-ddp", "--runtime", "apptainer", "--flavour", "cpu",
                       "--gpus-per-node", "2", case_args=tiny("pytorch-ddp", num_iters=1000), preexec=preexec)
    try:
        pids = wait_for_ranks(out, 2)
        assert all(Path(f"/proc/{pid}").exists() for pid in pids.values())  # positive control
        running = apptainer_processes()
        assert running, running  # positive control
        if apptainer_here.program != shutil.which("apptainer"):  # the test tree's: the SIF is mounted, not unpacked
            assert "squashfuse_ll" in running.values() or "squashfuse" in running.values(), running
        runner.send_signal(getattr(signal, stop))
        record = failed_record_after(runner, out, family=set(pids.values()) | set(running),
                                     leftovers=lambda: sorted(apptainer_processes()))
    finally:
        if runner.poll() is None:
            kill_all(runner, apptainer_processes())
    assert record["reason"].startswith(("interrupted", "terminated", "stopped")), record["reason"]
