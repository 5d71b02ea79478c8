"""pytorch-gpt: real runs of the GPT case on this machine's CPUs through the suite's CLI (2 ranks, Gloo):
DistributedDataParallel and FSDP2 start from the same loss, measured in tokens/s; at one rank the model
trains bare and FSDP2 says that it saves nothing; --preset h100 compiles the model with its loss under DDP,
in bf16 with fused AdamW; the data script tokenizes a folder of text by bytes, each rank reads its own
windows of it, and the loss falls on it; bad input is refused before launch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, installed_stack, path_without, records_in, tiny

from suite.analysis.report import write_report
from suite.analysis.same_work import format_parallel_table, parallel_rows
from suite.inputs.cases import load_case
from suite.instack.case_options import option_args
from suite.records.read import Point
from suite.records.schema import validate

CASE = ("--case", "pytorch-gpt")
TINY = tiny("pytorch-gpt")


@pytest.fixture(scope="module")
def torch_stack():
    """The real pytorch stack (torch's CPU wheel, numpy), installed once."""
    return installed_stack("pytorch")


@pytest.fixture(scope="module")
def text_data(tmp_path_factory, torch_stack) -> tuple[Path, bytes]:
    """`make data CASE=pytorch-gpt SRC=<folder>` over a folder of text (a binary and a hidden file
    beside it, left out): the data folder, and the bytes of the text files in path order."""
    src = tmp_path_factory.mktemp("text")
    (src / "b").mkdir()
    texts = {"a.txt": "The quick brown fox jumps over the lazy dog. " * 300,
             "b/c.md": "Every rank reads its own windows of the token file. " * 300}
    for name, text in texts.items():
        (src / name).write_text(text)
    (src / "image.bin").write_bytes(b"\x89PNG\0\0\0" * 10)
    (src / ".hidden").write_text("not read")
    folder = tmp_path_factory.mktemp("gpt-data")
    done = subprocess.run([sys.executable, "-m", "suite", "data", *CASE, "--src", str(src), "--data-dir", str(folder)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return folder, b"".join(texts[name].encode() for name in sorted(texts))


def checked_record(result, suite_cli) -> dict:
    """The record of the run just made (run ids begin with their start time: the last in name order)."""
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = records_in(suite_cli.results)[-1]
    validate(record)
    assert record["status"] == "ok" and record["reason"] is None
    return record


def results_of(record: dict) -> dict:
    [results] = record["metrics"]["results"]
    return results


def test_ddp_and_fsdp_start_from_the_same_loss_and_count_tokens(suite_cli, torch_stack, tmp_path):
    """Two micro-batches a step: the gradients kept local for the first (DDP's no_sync, FSDP2's
    set_requires_gradient_sync) must still be exchanged at the last, or the ranks drift apart and the
    two no longer train alike; ddp recomputes its blocks' activations, which changes no number, and, the
    first run on the tests' empty FLOP cache, counts its FLOPs without the recomputation."""
    losses, record_of = {}, {}
    for parallel, launcher, more in (("ddp", "ranks", ("--activation-checkpointing",)), ("fsdp", "torchrun", ())):
        result = suite_cli("run", *CASE, "--gpus-per-node", "2", case_args=(
            *TINY, "--parallel", parallel, "--launcher", launcher, "--grad-accum", "2", *more))
        record = checked_record(result, suite_cli)
        reported, results = record["config"]["reported_by_case"], results_of(record)
        record_of[parallel] = reported
        assert (reported["parallel"], reported["launcher"], reported["backend"]) == (parallel, launcher, "gloo")
        assert record["config"]["global_batch"] == 16 and reported["global_tokens_per_step"] == 16 * 32
        assert (reported["grad_accum"], reported["activation_checkpointing"]) == (2, bool(more))
        tp = record["metrics"]["throughput"]
        assert tp["unit"] == "tokens/s" and tp["n"] == 3 and all(s > 0 for s in tp["samples"])
        assert "tokens/s total" in result.stdout and "tokens/s per device" in result.stdout
        assert "peak memory per device: " in result.stdout and "over 2 device(s)" in result.stdout
        assert results["steps"] == 7 and len(results["peak_memory_bytes"]) == 2
        assert all(m > 0 for m in results["peak_memory_bytes"])
        # the formula's FLOPs per token beside PyTorch's count (layer norms and biases: 2.4% at this size)
        assert results["formula_flops_per_token"] == pytest.approx(results["counted_flops_per_token"], rel=0.05)
        used = record["metrics"]["utilisation"]
        assert used["flops_per_sample"] == results["formula_flops_per_token"] and used["valid"]
        assert used["flops_per_step"] == pytest.approx(results["formula_flops_per_token"] * 16 * 32)  # per token
        assert results["formula_parameters_convention"].startswith("nanoGPT's")
        assert "reset after the matmul peak" in results["peak_memory_basis"]
        assert "MFU " in result.stdout and "of the measured fp32 matmul peak" in result.stdout
        assert (reported["optimizer_impl"], reported["compile_mode"], reported["gc"]) == ("foreach", None,
                                                                                           {"automatic": True})
        assert "gpu_pass_s" not in results  # timed on GPUs only
        losses[parallel] = results["first_losses"]
    assert reported["fsdp"]["sharded_modules"] == 3 and reported["fsdp"]["reshard_after_forward"] is True
    assert "world_1_note" not in reported["fsdp"] and record_of["ddp"]["ddp"]["wrapped"] is True
    assert losses["fsdp"][0] == pytest.approx(losses["ddp"][0], rel=1e-5)
    assert losses["fsdp"][-1] == pytest.approx(losses["ddp"][-1], rel=1e-3)  # and they train alike
    # the two side by side: the same work (model, context, global batch), tokens/s, MFU, peak memory
    rows = parallel_rows([Point(r, r["run_id"]) for r in records_in(suite_cli.results)])
    assert [p.record["config"]["reported_by_case"]["parallel"] for p in rows] == ["ddp", "fsdp"]
    for row, line in zip(rows, format_parallel_table(rows).splitlines()[1:]):
        tp, used = row.throughput, row.record["metrics"]["utilisation"]
        assert tp["per_device"] == pytest.approx(tp["mean"] / 2) and f"{tp['per_device']:,.0f}" in line
        assert "16 x 32 tokens" in line and used["mfu_measured"] > 0 and "of measured matmul" in line
        assert line.endswith(" MiB")
    write_report(suite_cli.results, tmp_path / "report", warn=lambda message: None)
    page = (tmp_path / "report" / "frameworks.html").read_text()
    assert "under each data-parallel strategy" in page and page.count("<td>16 x 32 tokens</td>") == 2


def test_at_one_rank_the_model_trains_bare_and_fsdp_says_that_it_saves_nothing(suite_cli, torch_stack):
    """Two micro-batches a step at a world of one: DDP leaves the model unwrapped (gradient_sync has
    nothing to switch), FSDP2 keeps its one shard gathered from forward to backward; both train alike and
    their records say why."""
    reported, losses = {}, {}
    for parallel in ("ddp", "fsdp"):
        result = suite_cli("run", *CASE, "--gpus-per-node", "1", case_args=(
            *TINY, "--parallel", parallel, "--grad-accum", "2"))
        record = checked_record(result, suite_cli)
        reported[parallel] = record["config"]["reported_by_case"][parallel]
        losses[parallel] = results_of(record)["first_losses"]
    assert reported["ddp"]["wrapped"] is False and reported["ddp"]["why"].startswith("world size 1: nothing")
    assert reported["fsdp"]["reshard_after_forward"] is False and "saves no memory" in reported["fsdp"]["world_1_note"]
    assert losses["ddp"] == pytest.approx(losses["fsdp"], rel=1e-5) and len(losses["ddp"]) == 7


def test_the_h100_preset_compiles_the_model_with_its_loss_under_ddp_in_bf16_with_fused_adamw(suite_cli, torch_stack):
    """--preset h100 on two CPU ranks at the tiny sizes (their batch wins): the model with its loss compiled,
    then wrapped by DDP, bf16 autocast, fused AdamW, automatic garbage collection off; the record names each,
    and the compiled steps train."""
    result = suite_cli("run", *CASE, "--gpus-per-node", "2", case_args=("--preset", "h100", *TINY))
    record = checked_record(result, suite_cli)
    reported, results = record["config"]["reported_by_case"], results_of(record)
    assert (reported["preset"], reported["compile"], reported["compile_mode"]) == ("h100", True, "default")
    assert reported["compiled"] == "the model with its loss as one graph, then DistributedDataParallel"
    assert (reported["optimizer_impl"], reported["dtype"], reported["micro_batch"]) == ("fused", "amp-bfloat16", 4)
    assert reported["gc"]["automatic"] is False and reported["gc"]["collect_every_steps"] == 50
    assert reported["ddp"]["wrapped"] is True and results["compile_seconds"] > 0
    losses = results["first_losses"]
    assert len(losses) == 8 and losses[-1] < losses[0], losses  # the compiled step first, then 1 + 3 x 2


def test_at_one_rank_the_suites_compiled_step_is_the_bare_loops_program(suite_cli, torch_stack, tmp_path,
                                                                        monkeypatch):
    """`make gpu-check`'s pair at one GPU, on the CPU: the suite's run of --preset h100 and the bare loop with the
    preset's options compile one program, so the loop finds each of the run's graphs in Inductor's cache (nothing of
    the suite's own work, its matmul peak's TF32 switch included, leaves the step another program); a later side of
    the check then compiles in seconds."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    checked_record(suite_cli("run", *CASE, "--gpus-per-node", "1", case_args=("--preset", "h100", *TINY)), suite_cli)
    spec = load_case("pytorch-gpt").spec
    preset = {k: v for k, v in spec["presets"]["h100"].items() if k != "source"}
    options = option_args({**preset, **spec["tiny"], "min-seconds": 0})
    done = subprocess.run([str(torch_stack.python), "benchmarks/bare/pytorch_gpt.py", *options], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TORCH_LOGS": "torch._inductor.codecache,"
                                                          "torch._functorch._aot_autograd.autograd_cache"})
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "cache hit" in line or "cache miss" in line]
    assert said and not [line for line in said if "cache miss" in line], "\n".join(said)
    assert any("AOTAutograd cache hit" in line for line in said), "\n".join(said)
    assert json.loads(done.stdout.splitlines()[-1])["config"]["compile"] is True


def test_the_data_script_tokenizes_the_text_files_by_bytes(text_data):
    folder, text = text_data
    manifest = json.loads((folder / "tokens" / "manifest.json").read_text())
    tokens = np.fromfile(folder / "tokens" / "train.bin", dtype=np.uint16)
    assert (manifest["tokenizer"], manifest["vocab_size"], manifest["files"]) == ("bytes", 256, 2)
    assert manifest["binary_files_left_out"] == 1 and manifest["tokens"] == len(text) == len(tokens)
    assert bytes(tokens.astype(np.uint8)) == text


WINDOWS_CHECK = """
import json, sys
sys.path[:0] = [".", "cases/pytorch-gpt"]
from cases._shared.token_windows import TokenWindows
from train import torch_batches
shares = [TokenWindows(sys.argv[1], 32, rank, 2, seed=1).share(0).tolist() for rank in range(2)]
inputs, targets = next(torch_batches(TokenWindows(sys.argv[1], 32, 0, 2, seed=1), 4))
json.dump({"shares": shares, "shape": list(inputs.shape), "shifted": bool((inputs[:, 1:] == targets[:, :-1]).all())},
          sys.stdout)
"""


def test_each_rank_reads_its_own_windows(torch_stack, text_data):
    folder, text = text_data
    done = subprocess.run([str(torch_stack.python), "-c", WINDOWS_CHECK, str(folder / "tokens" / "train.bin")],
                          cwd=ROOT, capture_output=True, text=True, check=True, timeout=300)
    out = json.loads(done.stdout)
    first, second = out["shares"]
    windows = (len(text) - 1) // 32
    assert len(first) == len(second) == windows // 2 and not set(first) & set(second)
    assert set(first) | set(second) <= set(range(windows))
    assert out["shape"] == [4, 32] and out["shifted"]


def test_the_loss_falls_on_the_token_file(suite_cli, torch_stack, text_data):
    folder, text = text_data
    result = suite_cli("run", *CASE, "--gpus-per-node", "2", "--data-dir", str(folder),
                       case_args=(*tiny("pytorch-gpt", num_iters=4), "--data", "tokens"))
    record = checked_record(result, suite_cli)
    reported, losses = record["config"]["reported_by_case"], results_of(record)["first_losses"]
    assert record["config"]["data"] == "tokens" and reported["tokenizer"] == "bytes"
    assert reported["data_tokens"] == len(text) and reported["windows_per_rank"] == (len(text) - 1) // 32 // 2
    assert len(losses) == 9 and losses[-1] < losses[0] - 0.5, losses


@pytest.mark.parametrize("case_args, message", [
    (("--parallel", "zero3"), "argument --parallel: invalid choice: 'zero3'"),
    (("--data", "tokens"), "data missing"),
])
def test_bad_input_is_refused_before_launch(suite_cli, tmp_path, case_args, message):
    result = suite_cli("run", *CASE, "--data-dir", str(tmp_path), case_args=case_args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert not suite_cli.runs.exists()


def test_a_token_id_beyond_the_vocabulary_that_only_the_ranks_see_fails_the_run_with_their_own_line(
        suite_cli, torch_stack, tmp_path, monkeypatch):
    """A file too large to scan before launch (here: SUITE_DATA_SCAN_BYTES=0): the ranks check each batch,
    and the failed record's first error is the rank's own line, not torchrun's ChildFailedError."""
    (tmp_path / "tokens").mkdir()
    np.full(2000, 300, np.uint16).tofile(tmp_path / "tokens" / "train.bin")
    monkeypatch.setenv("SUITE_DATA_SCAN_BYTES", "0")
    result = suite_cli("run", *CASE, "--gpus-per-node", "2", "--data-dir", str(tmp_path),
                       case_args=(*TINY, "--data", "tokens"))
    assert result.returncode == 1, result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    assert record["status"] == "failed" and "ChildFailedError" not in record["reason"], record["reason"]
    said = record["reason"]
    assert f"first error: 'pytorch-gpt: {tmp_path / 'tokens' / 'train.bin'} holds token id 300 (token " in said, said
    assert "beyond the vocabulary of 256 (--vocab-size)'" in said, said


def test_a_compiled_run_on_a_host_without_compilers_is_refused_before_launch(torch_stack, tmp_path):
    """A compiled pytorch-gpt run whose PATH has everything of this host's but the C and C++ compilers: exit 2,
    one line naming them and the packages, before any rank starts (no run folder, no record)."""
    compilers = {"c++", "g++", "cc", "gcc", "clang", "clang++"}
    path = path_without(tmp_path / "bin", lambda name: name in compilers or name.endswith(("-g++", "-gcc")))
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX")}
    result = subprocess.run([sys.executable, "-m", "suite", "run", "--case", "pytorch-gpt", "--tiny",
                             "--results-dir", str(tmp_path / "results"), "--runs-dir", str(tmp_path / "runs"),
                             "--", "--compile"], cwd=ROOT, env={**env, "PATH": str(path)}, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    said = result.stderr
    assert said.startswith("error: case pytorch-gpt: --compile: torch.compile (Inductor, Triton) builds C and C++ "
                           "against Python's headers, and this host lacks a C++ compiler"), said
    assert "a C compiler" in result.stderr and "apt install g++ gcc" in result.stderr
    assert not (tmp_path / "results").exists() and not list((tmp_path / "runs").glob("*-pytorch-gpt-*"))
