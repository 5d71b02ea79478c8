"""Bad input of every kind is refused before launch in one line: case options and the relations between
them, the format of a case's data files, module names, dates and folders of the commands that read records."""

import json
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, write

from suite.base import paths
from suite.base.errors import UsageError
from suite.execution.clusters import Cluster
from suite.execution.doctor import data_lines
from suite.inputs.cases import load_case
from suite.inputs.host_gpus import GpuProbeError, count_from_probe
from suite.runtimes.modules import Setup, probe_steps, read_probe


def test_a_module_name_with_braces_is_refused_in_one_line():
    setup = Setup(init="/etc/profile.d/lmod.sh", load=("site{torch}/2.{x}",))
    index = next(i for i, step in enumerate(probe_steps(setup, False)) if step.shell.startswith("module load"))
    output = f"@@step\nLmod has detected the following error: The following module(s) are unknown\n@@fail {index}\n"
    with pytest.raises(UsageError, match=r"^module site\{torch\}/2\.\{x\} does not load on gpu01: Lmod has"):
        read_probe(output, setup, "gpu01")


@pytest.mark.parametrize("case, case_args, message", [
    ("pytorch-gpt", ("--width", "100", "--heads", "3"), "case pytorch-gpt: --width must be a multiple of --heads"),
    ("mxnet-imagenet", ("--gpus", "0;1"), "argument --gpus: expected GPU ids like 0,1,2,3 (or nothing), got '0;1'"),
    ("mxnet-imagenet", ("--lr-step-epochs", "thirty"), "argument --lr-step-epochs: expected epochs like 30,60"),
    ("pytorch-gpt", ("--lr", "nan"), "argument --lr: expected a finite number, got 'nan'"),
])
def test_a_constraint_the_ranks_would_find_is_refused_before_launch(suite_cli, case, case_args, message):
    result = suite_cli("run", "--case", case, case_args=case_args)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert not suite_cli.runs.exists() and not suite_cli.results.exists()


def test_a_rule_over_the_run_point_is_checked_for_each_point_before_launch(suite_cli):
    result = suite_cli("run", "--case", "mxnet-imagenet", "--gpus-per-node", "1,2", "--dry-run",
                       case_args=("--benchmark", "--batch-size", "5"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: case mxnet-imagenet at 1 node(s), 2 device(s) on localhost: --batch-size "
                                    "(per node) must split evenly over the node's devices"), result.stderr


@pytest.mark.parametrize("spec, problem", [
    ({"type": "int", "maximum": 3}, "has unknown key(s) maximum"),
    ({"type": "int", "default": "8"}, "default '8' is not of its type int"),
    ({"type": "float", "default": True}, "default True is not of its type float"),
    ({"type": "bool"}, "type must be one of int, float, str, flag, got 'bool'"),
])
def test_a_case_toml_option_of_a_key_or_type_the_runner_cannot_check_is_named(spec, problem):
    from suite.inputs.cases import known_cases, option_spec_problem

    assert option_spec_problem(spec).startswith(problem)
    assert all(load_case(name) for name in known_cases())  # every case's own tables pass


def test_an_options_max_is_checked():
    case = {"name": "c", "options": {"n": {"type": "int", "default": 1, "min": 1, "max": 4}}}
    from suite.instack.case_options import OptionError, parse_options

    assert parse_options(case, ["--n", "4"]) == {"n": 4}
    with pytest.raises(OptionError, match="argument --n: must be at most 4, got 5"):
        parse_options(case, ["--n", "5"])


def cifar_batch(path, rows, labels):
    with open(path, "wb") as f:
        pickle.dump({b"data": rows, b"labels": labels}, f, protocol=2)


def cifar_folder(root, rows=None, labels=None):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"]:
        cifar_batch(folder / name, np.zeros((4, 3072), np.uint8) if rows is None else rows,
                    [0, 1, 2, 9] if labels is None else labels)
    return folder


def image_tree(root, first: bytes):
    for name in ("cat", "dog"):
        (root / "imagefolder" / "train" / name).mkdir(parents=True)
        (root / "imagefolder" / "train" / name / "0.jpg").write_bytes(first + b"\0" * 16)


def recordio(root, rec: bytes, idx: str):
    (root / "imagenet-rec").mkdir()
    (root / "imagenet-rec" / "train.rec").write_bytes(rec)
    write(root / "imagenet-rec" / "train.idx", idx)


RECORD = (0xCED7230A).to_bytes(4, "little") + (8).to_bytes(4, "little") + b"\0" * 8


@pytest.mark.parametrize("case, argv, make, message", [
    ("pytorch-gpt", ["--data", "tokens"], lambda d: (d / "tokens/train.bin").write_bytes(b"\1\0\2"),
     "train.bin holds 3 bytes, an odd number: not a file of uint16 token ids"),
    ("pytorch-gpt", ["--data", "tokens"], lambda d: (d / "tokens/train.bin").write_bytes(b""), "train.bin is empty"),
    ("pytorch-gpt", ["--data", "tokens", "--vocab-size", "256"],
     lambda d: np.array([1, 2, 300, 4], np.uint16).tofile(d / "tokens/train.bin"),
     "train.bin holds token id 300 (token 2), beyond --vocab-size 256"),
    ("tf-cifar", [], lambda d: cifar_folder(d, labels=[0, 1, 2, 10]), "data_batch_1 holds labels outside 0..9"),
    ("tf-cifar", [], lambda d: cifar_folder(d, rows=np.zeros((4, 100), np.uint8)),
     "data_batch_1 is not a CIFAR-10 python batch: (4, 100) pixel rows"),
    ("pytorch-ddp", ["--data", "imagefolder"], lambda d: image_tree(d, b"GIF89a"),
     "train holds cat/0.jpg, which is neither a JPEG nor a PNG (starts with '47494638')"),
    ("mxnet-imagenet", [], lambda d: recordio(d, RECORD[:12], "0\t0\n"), "its first record claims 8 bytes"),
    ("mxnet-imagenet", [], lambda d: recordio(d, RECORD, "0,0\n"), "train.idx is not a RecordIO index"),
])
def test_a_data_file_of_the_wrong_format_is_refused_before_launch(tmp_path, case, argv, make, message):
    (tmp_path / "tokens").mkdir()
    make(tmp_path)
    loaded = load_case(case)
    with pytest.raises(UsageError, match=f"^case {case}: .*{message.replace('(', '.').replace(')', '.')}"):
        loaded.check_data(loaded.parse_options(argv), tmp_path)


@pytest.mark.parametrize("case, argv, make", [
    ("pytorch-gpt", ["--data", "tokens", "--vocab-size", "256"],
     lambda d: np.array([1, 2, 255, 4], np.uint16).tofile(d / "tokens/train.bin")),
    ("tf-cifar", [], cifar_folder),
    ("pytorch-ddp", ["--data", "imagefolder"], lambda d: image_tree(d, b"\xff\xd8\xff\xe0")),
    ("mxnet-imagenet", [], lambda d: recordio(d, RECORD, "0\t0\n")),
])
def test_data_files_of_the_right_format_pass(tmp_path, case, argv, make):
    (tmp_path / "tokens").mkdir()
    make(tmp_path)
    loaded = load_case(case)
    loaded.check_data(loaded.parse_options(argv), tmp_path)


def test_a_token_file_beyond_the_scan_is_left_to_the_ranks(tmp_path, monkeypatch):
    (tmp_path / "tokens").mkdir()
    np.array([1, 2, 300, 4], np.uint16).tofile(tmp_path / "tokens/train.bin")
    monkeypatch.setenv("SUITE_DATA_SCAN_BYTES", "4")
    gpt = load_case("pytorch-gpt")
    gpt.check_data(gpt.parse_options(["--data", "tokens", "--vocab-size", "256"]), tmp_path)


@pytest.mark.parametrize("args, message", [
    (("query", "--since", "2026-02-30"), "since '2026-02-30': a UTC date YYYY-MM-DD or time"),
    (("query", "--until", "2026-11-01T25:00"), "until '2026-11-01T25:00': a UTC date"),
    (("query", "--results-dir", "README.md"), "--results-dir README.md is a file, not a folder"),
    (("report", "--results-dir", "README.md"), "--results-dir README.md is a file, not a folder"),
    (("report", "--results-dir", "reports/resutls"), "--results-dir reports/resutls: no such folder"),
    (("query", "--results-dir", "reports/resutls"), "--results-dir reports/resutls: no such folder"),
    (("validate", "README.md", "no-such.json"), "no such record file or folder: no-such.json"),
    (("validate", "containers"), "no record files (*.json) in containers"),
    (("report", "--out", "README.md"), f"--out README.md: nothing can be written there: {ROOT / 'README.md'} is not "
                                       "a folder"),
    (("report", "--out", "/proc/hpc-dl-bench"), "--out /proc/hpc-dl-bench: nothing can be written there: no file "
                                                "can be made in /proc: "),
    # check-site writes its table once every path ran, maybe an hour later
    (("check", "--runs-dir", "README.md"), "--runs-dir (Make: RUNS) README.md: nothing can be written there: "
                                           f"{ROOT / 'README.md'} is not a folder"),
    (("check", "--results-dir", "README.md/results"), "the table, beside --results-dir (Make: RESULTS), "
                                                      "README.md/site-checks: nothing can be written there: "
                                                      f"{ROOT / 'README.md'} is not a folder"),
])
def test_commands_refuse_dates_that_do_not_exist_and_files_for_folders(suite_cli, args, message):
    result = suite_cli(*args)
    assert result.returncode == 2 and result.stderr == f"error: {message}" + result.stderr.split(message, 1)[1]
    assert result.stderr.count("\n") == 1, result.stderr


@pytest.mark.parametrize("folders, dry_run, message", [
    (("--results-dir", "README.md"), True, f"--results-dir (Make: RESULTS) README.md: nothing can be written there: "
                                           f"{ROOT / 'README.md'} is not a folder"),
    (("--runs-dir", "README.md/runs"), True, f"--runs-dir (Make: RUNS) README.md/runs: nothing can be written "
                                             f"there: {ROOT / 'README.md'} is not a folder"),
    # what permissions cannot tell: a pseudo filesystem (a read-only one, a root-squashed share), found by making a
    # file where the folder would be made (not in a dry run), which leaves nothing
    (("--results-dir", "/proc/hpc-dl-bench/results"), False, "--results-dir (Make: RESULTS) /proc/hpc-dl-bench/"
                                                            "results: nothing can be written there: no file can be "
                                                            "made in /proc: "),
])
def test_a_run_whose_record_could_not_be_written_is_refused_before_launch(tmp_path, folders, dry_run, message):
    """Not found once the work is done, when its record cannot be written (a traceback and the record lost)."""
    asked = {"--results-dir": str(tmp_path / "results"), "--runs-dir": str(tmp_path / "runs")}
    asked[folders[0]] = folders[1]
    result = subprocess.run([sys.executable, "-m", "suite", "run", "--case", "pytorch-ddp", "--tiny",
                             *(["--dry-run"] if dry_run else []), *(x for pair in asked.items() for x in pair)],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {message}") and "suite: run" not in result.stdout, result.stderr
    assert not any((tmp_path / name).exists() for name in ("results", "runs"))


def test_a_sweep_s_table_must_be_writable_beside_its_records_folder(tmp_path):
    (tmp_path / "sweeps").write_text("a file where the sweep's tables go")
    result = subprocess.run([sys.executable, "-m", "suite", "run", "--case", "pytorch-ddp", "--tiny", "--dry-run",
                             "--gpus-per-node", "1,2", "--results-dir", str(tmp_path / "results"),
                             "--runs-dir", str(tmp_path / "runs")], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"the sweep's table, beside --results-dir (Make: RESULTS), {tmp_path / 'sweeps'}: nothing can be " \
           f"written there: {tmp_path / 'sweeps'} is not a folder" in result.stderr


@pytest.fixture
def open_folder():
    """A folder that any user may enter: under /tmp itself, since TMPDIR and pytest's folders may be private (the
    interpreter matrix gives each run a TMPDIR of its own, mode 700)."""
    folder = Path(tempfile.mkdtemp(prefix="hpc-dl-bench-folders-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    for inside in folder.iterdir():
        inside.chmod(0o755)  # what a test closed, opened for its removal
    shutil.rmtree(folder, ignore_errors=True)


def as_another_user(function, *args):
    """function(*args) as a user without root (root's permission checks pass everywhere): where the tests run as
    root, in a child process turned into `nobody`, which has every module it needs loaded already, so that it
    reads neither the checkout nor the interpreter (either may be in a folder only root may enter)."""
    if os.geteuid() != 0:
        return function(*args)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of pytest's runs here, it ends with os._exit
        status = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.write(write, json.dumps(function(*args)).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read) as said:
        answer = said.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, answer
    return json.loads(answer)


def test_a_folder_the_user_may_not_write_or_reach_is_named_before_anything_is_made(open_folder):
    shut, closed = open_folder / "shut", open_folder / "closed"
    shut.mkdir(mode=0o555)
    closed.mkdir(mode=0o000)  # not even its owner enters it (where the tests do not run as root)
    named, tried, unreached = as_another_user(lambda: [paths.unwritable(shut / "results", False),
                                                       paths.unwritable(shut / "results"),
                                                       paths.unwritable(closed / "results")])
    assert named == tried == f"{shut} may not be written by this user"
    assert unreached == f"{closed / 'results'} cannot be reached by this user (a folder above it may not be entered)"
    assert not (shut / "results").exists() and not (closed / "results").exists()
    assert paths.unwritable(open_folder / "a" / "b") is None  # a file tried where "a" would be made, and gone
    assert sorted(open_folder.iterdir()) == [closed, shut]


def failing_nvidia_smi(folder):
    folder.mkdir(parents=True, exist_ok=True)
    script = write(folder / "nvidia-smi", "#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate "
                   "with the NVIDIA driver.\"\nexit 9\n")
    script.chmod(0o755)
    return folder


def test_a_failed_gpu_probe_is_an_error_naming_the_host_never_no_gpu(tmp_path):
    env = {**os.environ, "PATH": f"{failing_nvidia_smi(tmp_path / 'bin')}:{os.environ['PATH']}"}
    result = subprocess.run([sys.executable, "-m", "suite", "run", "--case", "pytorch-synthetic", "--dry-run",
                             "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: the GPU probe on localhost failed: nvidia-smi -L exited 9: NVIDIA-SMI "
                                    "has failed because it couldn't communicate with the NVIDIA driver."), result.stderr


@pytest.mark.parametrize("probe, count, message", [
    ("GPU 0: NVIDIA H100\nnvidia-smi exit=0\nnvidia devices=1\nCUDA_VISIBLE_DEVICES=(unset)\n", 1, None),
    ("No devices were found\nnvidia-smi exit=6\nnvidia devices=0\nCUDA_VISIBLE_DEVICES=(unset)\n", 0, None),
    ("no nvidia-smi\nnvidia devices=0\nCUDA_VISIBLE_DEVICES=(unset)\n", 0, None),
    ("no nvidia-smi\nnvidia devices=4\nCUDA_VISIBLE_DEVICES=(unset)\n", None,
     "host gpu01 has 4 NVIDIA device(s) (/dev/nvidia*) but no nvidia-smi on its PATH"),
    ("Failed to initialize NVML: Driver/library version mismatch\nnvidia-smi exit=18\nnvidia devices=4\n", None,
     "the GPU probe on gpu01 failed: nvidia-smi -L exited 18: Failed to initialize NVML: Driver/library version"),
])
def test_gpu_probe_outputs(probe, count, message):
    if message is None:
        assert count_from_probe(probe, "gpu01") == count
    else:
        with pytest.raises(GpuProbeError, match=f"^{re.escape(message)}"):
            count_from_probe(probe, "gpu01")


def test_doctor_fails_only_on_the_data_a_default_run_needs(tmp_path, monkeypatch):
    monkeypatch.setenv("DATA_DIR", str(tmp_path))
    lines = data_lines(Cluster("localhost", paths.HOSTFILES / "localhost"),
                       [load_case(name) for name in ("pytorch-gpt", "pytorch-ddp", "mxnet-imagenet")])
    assert lines[0].startswith("optional: data of pytorch-gpt for --data tokens under "), lines
    assert lines[1].startswith("optional: data of pytorch-ddp for --data imagefolder under "), lines
    assert lines[2].startswith("missing: data of mxnet-imagenet under "), lines
    # each command whole: SYNTHETIC=1 is make data's, not make run's
    assert lines[2].endswith("('make data CASE=mxnet-imagenet SRC=<folder of class folders of JPEGs>', or "
                             "'make data CASE=mxnet-imagenet SYNTHETIC=1' for a small generated set)"), lines


@pytest.mark.parametrize("setting", ["DRY_RUN=maybe", "TINY=1 2", "SYNTHETIC=Y", "NO_PRECHECK=enable",
                                     "ALLOW_DRIFT=-1"])
def test_make_refuses_a_switch_that_is_neither_on_nor_off(setting):
    result = subprocess.run(["make", "-n", "run", setting], cwd=ROOT, capture_output=True, text=True, timeout=300)
    name, value = setting.split("=")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"*** {name}={value} is neither on nor off: use 1, yes, true or on; 0, no, false, off" in result.stderr


def test_make_run_refuses_synthetic_which_only_make_data_takes():
    """A run makes no data: SYNTHETIC=1 given to it was dropped unsaid, and the run refused for missing data."""
    result = subprocess.run(["make", "-n", "run", "CASE=tf-cifar", "SYNTHETIC=1"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert ("*** SYNTHETIC=1 is for make data, not make run: make data CASE=tf-cifar SYNTHETIC=1 makes the small "
            "generated set, which make run CASE=tf-cifar then reads.") in result.stderr
    assert "suite run" not in result.stdout


@pytest.mark.parametrize("setting, flag", [("DRY_RUN=yes", "--dry-run"), ("TINY=on", "--tiny"), ("TINY=0", None),
                                           ("PRECHECK=true", "--precheck"), ("NO_PRECHECK=", None)])
def test_make_switches_on_and_off(setting, flag):
    result = subprocess.run(["make", "-n", "run", setting], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (flag in result.stdout) if flag else ("--tiny" not in result.stdout and "--no-precheck" not in result.stdout)


def fake_python(path, version, prefix="/opt/python", implementation="cpython"):
    path.parent.mkdir(parents=True, exist_ok=True)
    write(path, f"#!/bin/sh\necho {version} {prefix} {implementation}\n").chmod(0o755)
    return path


@pytest.mark.parametrize("version, implementation", [("3.9.18", "cpython"), ("3.14.0", "cpython"),
                                                     ("3.11.7", "pypy")])
def test_an_unsupported_interpreter_is_refused_before_any_install(tmp_path, version, implementation):
    python = fake_python(tmp_path / "python", version, implementation=implementation)
    result = subprocess.run(["tools/check-python.sh", str(python)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr == (
        f"BOOTSTRAP_PYTHON={python} is {implementation} {version}; the suite supports CPython 3.10-3.13 "
        "(e.g. BOOTSTRAP_PYTHON=python3.11)\n")
    made = subprocess.run(["make", "-n", "run", f"BOOTSTRAP_PYTHON={python}"], cwd=ROOT, capture_output=True, text=True)
    assert made.returncode == 2 and "the suite supports CPython 3.10-3.13" in made.stderr


def test_a_venv_made_with_another_interpreter_is_named_with_how_to_remake_it(tmp_path):
    asked = fake_python(tmp_path / "python3.12", "3.12.3", "/usr")
    fake_python(tmp_path / "venv" / "bin" / "python", "3.11.7", "/opt/py311")
    result = subprocess.run(["tools/check-python.sh", str(asked), str(tmp_path / "venv")], cwd=ROOT,
                            capture_output=True, text=True)
    venv = tmp_path / "venv"
    assert result.returncode == 2 and result.stderr == (
        f"BOOTSTRAP_PYTHON={asked} is 3.12.3 (/usr) but {venv} was made with 3.11.7 (/opt/py311): to use "
        f"{asked}, rm -rf {venv} and make again; to keep {venv}, leave BOOTSTRAP_PYTHON out\n")
    same = fake_python(tmp_path / "python3.11", "3.11.7", "/opt/py311")
    assert subprocess.run(["tools/check-python.sh", str(same), str(tmp_path / "venv")], cwd=ROOT).returncode == 0


def test_make_test_aarch64_names_every_piece_it_cannot_install_at_once(tmp_path):
    """Without apt-get (or root) nothing can be installed: the packages and the binfmt handler, all in one line."""
    (tmp_path / "bin").mkdir()
    for tool in ("bash", "grep", "cat", "id", "env"):
        (tmp_path / "bin" / tool).symlink_to(shutil.which(tool))
    env = {"PATH": str(tmp_path / "bin"), "QEMU_AARCH64": str(tmp_path / "no-qemu"),
           "BINFMT_DIR": str(tmp_path / "binfmt")}
    result = subprocess.run([str(tmp_path / "bin" / "bash"), "tools/aarch64-deps.sh"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and result.stderr == (
        "aarch64-check: cannot set up the packages mmdebstrap arch-test qemu-user-static (no apt-get); the aarch64 "
        f"binfmt handler (it needs {tmp_path / 'no-qemu'}, from qemu-user-static)\n")
    assert subprocess.run(["bash", "-n", "tools/aarch64-check.sh"], cwd=ROOT).returncode == 0


def test_the_distribution_check_refuses_a_distribution_it_does_not_know_before_making_anything(tmp_path):
    """make test-debian13 and test-ubuntu2404 share tools/distro-check.sh: an unknown name is refused in one line."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    result = subprocess.run(["tools/distro-check.sh", "fedora41"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 2 and result.stderr == (
        "distro-check: unknown distribution 'fedora41': debian13 or ubuntu2404\n")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args", [("report", "--results-dir", ""), ("run", "--runs-dir", " ", "--dry-run"),
                                  ("query", "--results-dir", ""), ("wheels", "--dest", "", "--case", "pytorch-ddp"),
                                  ("validate", "")])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(args, capsys):
    """An empty --results-dir read as the current folder, and the report's pages went to the folder above it."""
    from suite import cli

    with pytest.raises(SystemExit) as stopped:
        cli.main(list(args))
    assert stopped.value.code == 2 and "an empty path (leave the option out for its default)" in capsys.readouterr().err


def test_an_interface_no_host_has_is_refused_before_launch_and_the_environment_wins_over_the_profile(tmp_path):
    """The profile's [env] names an interface this machine lacks: refused, naming where the value came from;
    the same variable set in the run's environment to one of this machine's interfaces is what runs."""
    profile = tmp_path / "site.toml"
    shutil.copy(paths.HOSTFILES / "localhost", tmp_path / "localhost")
    profile.write_text('hostfile = "localhost"\n[env]\nGLOO_SOCKET_IFNAME = "hpcdl-absent0"\n')
    here = sorted(name for _, name in socket.if_nameindex())
    argv = [sys.executable, "-m", "suite", "run", "--case", "pytorch-ddp", "--tiny", "--cluster", str(profile),
            "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    environ = {k: v for k, v in os.environ.items() if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}
    refused = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, env=environ)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert refused.stderr.startswith(f"error: GLOO_SOCKET_IFNAME=hpcdl-absent0 ([env] of cluster profile {profile}): "
                                     f"host localhost has no interface hpcdl-absent0 (its interfaces: "
                                     f"{', '.join(here)}), so"), refused.stderr
    assert not any((tmp_path / name).exists() for name in ("results", "runs"))
    passed = subprocess.run([*argv, "--dry-run"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**environ, "GLOO_SOCKET_IFNAME": here[0], "NCCL_SOCKET_IFNAME": f"^{here[0]}"})
    assert passed.returncode == 0 and f"GLOO_SOCKET_IFNAME={here[0]}" in passed.stdout, passed.stdout + passed.stderr


def test_a_libfabric_provider_whose_nic_this_machine_lacks_is_refused_before_launch(tmp_path):
    """FI_PROVIDER=cxi, a Slingshot site's, where this machine has no Slingshot NIC: refused in one line before
    anything is written (on a machine with one, it runs); tcp needs no device of its own."""
    slingshot = sorted(p.name for p in Path("/sys/class/cxi").glob("*"))
    argv = [sys.executable, "-m", "suite", "run", "--case", "pytorch-ddp", "--tiny", "--dry-run",
            "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "FI_PROVIDER": "cxi"})
    if slingshot:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        said = "error: FI_PROVIDER=cxi (the run's environment): host localhost has no "
        assert done.stderr.startswith(said), done.stderr
        assert "libfabric would offer none of them" in done.stderr
        assert not any((tmp_path / name).exists() for name in ("results", "runs"))
    passed = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "FI_PROVIDER": "tcp"})
    assert passed.returncode == 0 and "dry run: nothing was started" in passed.stdout, passed.stdout + passed.stderr


@pytest.mark.parametrize("target, given, message", [
    ("rerun", [], "make rerun needs RECORD=<a result record, e.g. reports/results/RUN_ID.json>"),
    ("resume", [], "make resume needs SWEEP=<a sweep id, as the sweep's table names it>"),
    ("compare", ["A=reports/results"], "make compare needs A=<records> and B=<records>"),
])
def test_make_names_the_variable_a_target_needs(target, given, message):
    """Without it the runner was handed '' and spoke of a folder '.' or of empty selections."""
    result = subprocess.run(["make", "-n", target, *given], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert "python -m suite" not in result.stdout


@pytest.mark.parametrize("case", ["pytorch-gpt", "tf-cifar"])
def test_a_data_scripts_bad_option_is_refused_in_one_line_that_says_how_to_list_them(case, tmp_path):
    """As `make data CASE=... ARGS=...` passes them to the case's data script (the image cases' scripts share
    cases/_shared/jpeg_tree.py's parser, made the same way; their stacks' Pillow is not here)."""
    result = subprocess.run([sys.executable, f"cases/{case}/data.py", "--data-dir", str(tmp_path), "--bogus"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2 and result.stderr == (
        f"error: make data CASE={case}: unrecognized arguments: --bogus ('make data CASE={case} ARGS=--help' lists "
        "the options)\n"), result.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("case", ["pytorch-gpt", "tf-cifar"])
def test_a_data_scripts_missing_source_is_refused_in_one_line_before_anything_is_written(case, tmp_path):
    """A --src that is not there is bad input (exit 2), not a failed preparation (exit 1); the image cases'
    check is in tests/integration/test_mxnet_imagenet.py (their stacks' Pillow is not here)."""
    data = tmp_path / "data"
    result = subprocess.run([sys.executable, f"cases/{case}/data.py", "--data-dir", str(data), "--src",
                             str(tmp_path / "nowhere")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    [line] = result.stderr.splitlines()
    assert result.returncode == 2 and line.startswith(f"error: make data CASE={case}: --src {tmp_path / 'nowhere'}")
    assert line.endswith(f"('make data CASE={case} ARGS=--help' lists the options)") and not data.exists()


@pytest.mark.parametrize("case", ["pytorch-gpt", "jax-gpt"])
def test_the_data_command_a_refusal_names_is_one_the_data_script_takes(case, tmp_path):
    """The token cases' script reads a source or generates one (it downloads nothing): without either it
    refuses, so the command the refusals name gives SRC, saying what it names (the image cases' scripts alike:
    tests/integration/test_mxnet_imagenet.py)."""
    spec = load_case(case).spec["data"]
    script = (load_case(case).dir / spec["script"]).resolve()
    bare = subprocess.run([sys.executable, str(script), "--data-dir", str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert bare.returncode == 2 and "give exactly one of --src" in bare.stderr
    assert load_case(case).make_data_commands.startswith(f"'make data CASE={case} SRC=<folder of text files or ")
