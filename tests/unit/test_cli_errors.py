"""Bad input is refused before anything is launched: one line, exit status 2, nothing written."""

import pytest
from conftest import write

CASES = [
    (["--case", "nope"], (), "unknown case 'nope' (known cases: "),
    (["--nodes", "0"], (), "NODES must be a positive integer, got '0'"),
    (["--nodes", "-2"], (), "NODES must be a positive integer, got '-2'"),
    (["--nodes", "two"], (), "NODES must be a positive integer, got 'two'"),
    (["--nodes", "2"], (), "NODES=2 but hostfile"),
    (["--nodes", "1,4"], (), "NODES=4 but hostfile"),
    (["--nodes", "1,,2"], (), "NODES must be a positive integer, got ''"),
    (["--nodes", "1,1"], (), "NODES lists a value twice: '1,1'"),
    (["--gpus-per-node", "1,x"], (), "GPUS_PER_NODE must be a positive integer, got 'x'"),
    (["--baseline", "nope.json"], (), "--baseline nope.json is not a successful result record"),
    (["--cluster", "nope"], (), "unknown cluster 'nope' (profiles in hostfiles/: "),
    (["--cluster", "cte-power", "--gpus-per-node", "8"], (),
     "GPUS_PER_NODE=8 but cluster cte-power has 4 device(s) per node"),
    (["--gpus-per-node", "0"], (), "GPUS_PER_NODE must be a positive integer, got '0'"),
    (["--repeat", "x"], (), "REPEAT must be a positive integer, got 'x'"),
    (["--repeat", "0"], (), "REPEAT must be a positive integer, got '0'"),
    (["--timeout", "0"], (), "TIMEOUT must be a positive integer, got '0'"),
    (["--stall", "-5"], (), "STALL must be a positive integer, got '-5'"),
    (["--case", "../pytorch-synthetic"], (), "unknown case '../pytorch-synthetic'"),
    ([], ("--num-iters", "0"), "argument --num-iters: must be at least 1, got 0"),
    ([], ("--image-size", "1.5"), "argument --image-size: expected int, got '1.5'"),
    (["--runtime", "shifter"], (), "unknown runtime 'shifter' (known: "),
    # the runner's own parser (argparse) refuses in one line too, not after its whole usage
    (["--cpu-bind", "socket"], (), "python -m suite run: argument --cpu-bind: invalid choice: 'socket' (choose from"),
    (["--flavour", "gpu"], (), "argument --flavour: invalid choice: 'gpu'"),
    (["--nodes"], (), "python -m suite run: argument --nodes: expected one argument"),
    (["--nodse", "2"], (), "python -m suite run: unrecognized arguments: --nodse 2 ('python -m suite run --help'"),
    (["--scheduler", "pbs"], (), "unknown scheduler 'pbs' (known: "),
    (["--hostfile", "hostfiles/missing"], (), "hostfile not found: hostfiles/missing"),
    ([], ("--image-size", "0"), "case pytorch-synthetic: argument --image-size: must be at least 1, got 0"),
    ([], ("--batch-size", "-8"), "case pytorch-synthetic: argument --batch-size: must be at least 1"),
    ([], ("--batch-size", "big"), "argument --batch-size: expected int, got 'big'"),
    ([], ("--no-such-option",), "case pytorch-synthetic: unrecognized arguments: --no-such-option"),
    ([], ("--model", "vgg16"), "argument --model: invalid choice: 'vgg16'"),
    # A launcher's constraint on a later point of a sweep, and a case's rule between options.
    (["--case", "mxnet-imagenet", "--nodes", "1,2", "--hostfile", "hostfiles/loopback"],
     ("--kv-store", "local", "--benchmark"), "kv-store local works inside one process; for 2 nodes use dist_sync"),
    (["--case", "mxnet-imagenet"], ("--benchmark", "--num-batches", "4"),
     "case mxnet-imagenet: --num-batches must leave one timed interval after the warmup"),
]


@pytest.mark.parametrize("args, case_args, message", CASES)
def test_refused_before_launch(suite_cli, args, case_args, message):
    result = suite_cli("run", *args, case_args=case_args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert not suite_cli.runs.exists() and not suite_cli.results.exists()


@pytest.mark.parametrize("content, message", [
    ("node1 slots=2\nnode2 slots=x\n", ":2: bad slot count 'x'"),
    ("# only a comment\n", "lists no hosts"),
    ("$(touch${IFS}pwned) slots=1\n", ":1: '$(touch${IFS}pwned)' is not a valid host name"),
    ("node1\nnode1\n", ":2: host 'node1' is listed again"),
])
def test_malformed_hostfile_refused(suite_cli, tmp_path, content, message):
    hostfile = write(tmp_path / "hosts", content)
    result = suite_cli("run", "--hostfile", str(hostfile))
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert not suite_cli.runs.exists()


def test_help_documents_run_options(suite_cli):
    result = suite_cli("run", "--help")
    for option in ["--case", "--nodes", "--gpus-per-node", "--hostfile", "--runtime", "--repeat", "--batch-size"]:
        assert option in result.stdout


def test_missing_data_is_refused_unless_the_case_option_needs_none(tmp_path):
    from suite.base.errors import UsageError
    from suite.inputs.cases import Case

    spec = {"name": "toy", "data": {"requires": ["set/a.bin", "set/b.bin"], "unless_option": "benchmark"}}
    case = Case("toy", tmp_path, spec)
    with pytest.raises(UsageError,
                       match=r"case toy: data missing under .*: set/a.bin and 1 more \(run 'make data CASE=toy', "
                             r"or 'make data CASE=toy SYNTHETIC=1' for a small generated set"):
        case.check_data({"benchmark": False}, tmp_path)
    case.check_data({"benchmark": True}, tmp_path)
    (tmp_path / "set").mkdir()
    for name in ("a.bin", "b.bin"):
        (tmp_path / "set" / name).write_bytes(b"\x0a\x23\xd7\xce rest")
    case.check_data({"benchmark": False}, tmp_path)
    spec["data"]["signatures"] = {"set/a.bin": "0a23d7ce", "set/b.bin": "8002"}
    with pytest.raises(UsageError,
                       match=r"set/b.bin is not in the expected format \(starts with '0a23', expected '8002'\)"):
        case.check_data({"benchmark": False}, tmp_path)


@pytest.mark.parametrize("case, files", [
    ("tf-cifar", ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch",
                  "batches.meta"]),
    ("mxnet-imagenet", ["train.rec", "train.idx"]),
])
def test_data_in_the_wrong_format_is_refused(suite_cli, tmp_path, case, files):
    folder = tmp_path / ("cifar-10-batches-py" if case == "tf-cifar" else "imagenet-rec")
    folder.mkdir()
    for name in files:
        (folder / name).write_text("not a dataset")
    result = suite_cli("run", "--case", case, "--data-dir", str(tmp_path))
    assert result.returncode == 2 and "is not in the expected format" in result.stderr
    assert result.stderr.count("\n") == 1 and not suite_cli.runs.exists()


def test_case_without_data_refuses_make_data(suite_cli):
    result = suite_cli("data", "--case", "pytorch-synthetic")
    assert result.returncode == 2 and result.stderr == "error: case pytorch-synthetic needs no data\n"


@pytest.mark.parametrize("argv, message", [
    ([], "python -m suite: the following arguments are required: command"),
    (["runn"], "python -m suite: argument command: invalid choice: 'runn'"),
    (["report", "--result-dir", "x"], "python -m suite report: unrecognized arguments: --result-dir x"),
    (["compare", "--since"], "python -m suite compare: "),
])
def test_every_command_refuses_its_command_line_in_one_line(suite_cli, argv, message):
    result = suite_cli(*argv)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1 and not result.stdout, result.stderr
