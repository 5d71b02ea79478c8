"""jax-gpt: real runs of the JAX/Flax GPT on this machine's CPUs through the suite's CLI. Two processes joined by
jax.distributed (Gloo between them), one mesh of both devices: data-parallel and sharded (fsdp) start from the same
weights and data, so from the same loss, and train alike; both count tokens/s, and XLA's FLOP count of the compiled
step stands beside the formula, attention written out (--attention einsum, the default). One process alone trains on
pytorch-gpt's token file, written in the jax stack, with --attention cudnn, which on a CPU runs
jax.nn.dot_product_attention in XLA. A run asked on GPUs where JAX finds only the CPU fails."""

import os
import socket
import subprocess
import sys

import pytest
from conftest import ROOT, installed_stack, records_in, tiny
from support.cluster_fixtures import free_port
from support.gpus import fake_nvidia_smi

from suite.analysis.same_work import format_parallel_table, parallel_rows
from suite.records.measure import read_rank_events
from suite.records.read import Point
from suite.records.schema import validate

CASE = ("--case", "jax-gpt")
# Width and context 64, not the [tiny] 32: XLA counts every operation of the step, the formula only the
# products; norms, softmax, GELU and AdamW's update add 6-10% at width 32, 2.7-3.2% at 64 (jax 0.10.2 and
# 0.6.2), 0.4% at GPT-2 small.
TINY = tiny("jax-gpt", width=64, context=64)
XLA_OVER_FORMULA = 0.05


@pytest.fixture(scope="module")
def jax_stack():
    """The real jax stack (jax[cpu], flax, optax), installed once."""
    return installed_stack("jax")


def test_dp_and_fsdp_over_two_processes_train_alike_and_count_tokens(suite_cli, jax_stack):
    """Two micro-batches a step (unrolled in the jitted step, so XLA counts both); dp after the interconnect
    check (--precheck: an all-reduce sweep in the jax stack)."""
    losses = {}
    for parallel, precheck in (("dp", ("--precheck",)), ("fsdp", ())):
        result = suite_cli("run", *CASE, "--gpus-per-node", "2", *precheck,
                           case_args=(*TINY, "--parallel", parallel, "--grad-accum", "2"))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        record = records_in(suite_cli.results)[-1]
        validate(record)
        assert record["status"] == "ok" and record["reason"] is None
        reported, [results] = record["config"]["reported_by_case"], record["metrics"]["results"]
        assert record["execution"]["launcher"] == "jaxdist" and record["execution"]["processes"] == 2
        assert (reported["processes"], reported["devices"], reported["parallel"]) == (2, 2, parallel)
        assert (reported["attention"], reported["attention_asked"]) == ("einsum", "einsum")
        assert reported["global_batch"] == 16 and reported["global_tokens_per_step"] == 16 * 64
        shards = reported[parallel]
        assert shards["sharded_parameters"] == (shards["parameter_arrays"] if parallel == "fsdp" else 0)
        tp = record["metrics"]["throughput"]
        assert tp["unit"] == "tokens/s" and tp["n"] == 3 and all(s > 0 for s in tp["samples"])
        assert "tokens/s total" in result.stdout and "MFU " in result.stdout
        assert results["steps"] == 7 and results["last_step_loss"] < results["first_step_loss"]
        assert results["compile_seconds"] > 0 and len(results["peak_memory_bytes"]) == 2
        assert "reset after the matmul peak" in results["peak_memory_basis"]
        counted, formula = results["counted_flops_per_token"], results["formula_flops_per_token"]
        assert formula < counted < formula * (1 + XLA_OVER_FORMULA)
        assert record["metrics"]["utilisation"]["flops_per_sample"] == results["formula_flops_per_token"]
        assert record["metrics"]["utilisation"]["precision"] == "fp32"
        if precheck:  # the interconnect check a run over several nodes makes first, with JAX's own all-reduce
            checked = record["metrics"]["interconnect"]
            assert checked["ranks"] == 2 and checked["implementation"].startswith("jax ")
            assert "Gloo" in checked["implementation"] and all(s["busbw_gb_s"] > 0 for s in checked["sizes"])
        losses[parallel] = results["first_losses"]
    assert losses["fsdp"][0] == pytest.approx(losses["dp"][0], rel=1e-5)
    assert losses["fsdp"][-1] == pytest.approx(losses["dp"][-1], rel=1e-3)
    # the two side by side, as pytorch-gpt's ddp and fsdp are (and beside them where they did the same work)
    rows = parallel_rows([Point(r, r["run_id"]) for r in records_in(suite_cli.results)])
    assert [(p.case, p.record["config"]["reported_by_case"]["parallel"]) for p in rows] == [
        ("jax-gpt", "dp"), ("jax-gpt", "fsdp")]
    assert all("16 x 64 tokens" in line for line in format_parallel_table(rows).splitlines()[1:])


def test_one_process_trains_on_the_token_file_its_data_script_writes_in_the_jax_stack(suite_cli, jax_stack, tmp_path):
    """pytorch-gpt's data script run in the jax stack (`make data CASE=jax-gpt SYNTHETIC=1`: no Pillow there), then
    one process alone (no coordination service) on windows of the file, cuDNN's attention asked where there is
    none (XLA's dot_product_attention runs, the record says so): the loss falls."""
    data = tmp_path / "data"
    done = subprocess.run([sys.executable, "-m", "suite", "data", *CASE, "--synthetic", "--data-dir", str(data)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = suite_cli("run", *CASE, "--gpus-per-node", "1", "--data-dir", str(data),
                       case_args=(*tiny("jax-gpt"), "--data", "tokens", "--parallel", "fsdp", "--attention", "cudnn"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    [record] = records_in(suite_cli.results)
    reported, [results] = record["config"]["reported_by_case"], record["metrics"]["results"]
    assert record["status"] == "ok" and reported["data"] == "tokens-synthetic" and reported["processes"] == 1
    assert reported["data_path"] == str((data / "tokens" / "train.bin").resolve()) and reported["tokenizer"] == "bytes"
    assert results["last_step_loss"] < results["first_step_loss"]
    assert (reported["attention"], reported["attention_asked"]) == ("xla", "cudnn")  # no cuDNN on a CPU
    assert results["counted_flops_source"] == results["counted_flops_source"].split(";")[0]  # XLA counts it all
    assert "gpu_pass_s" not in results  # CPUs: no device time per step


def test_a_run_asked_on_gpus_where_jax_finds_only_the_cpu_fails(suite_cli, jax_stack, tmp_path, monkeypatch):
    """A GPU listed (a stand-in nvidia-smi) and the cpu flavour: JAX finds no GPU, the process says which device it
    found, and the record fails."""
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path / 'fake', 1)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    done = suite_cli("run", *CASE, "--gpus-per-node", "1", "--flavour", "cpu", "--telemetry-interval", "0",
                     case_args=tiny("jax-gpt"))
    assert done.returncode == 1, done.stdout + done.stderr
    [record] = records_in(suite_cli.results)
    assert record["status"] == "failed" and record["reason"] == (
        f"asked to train on cuda (GPUs are present and were asked for) but rank 0 on {socket.gethostname()} "
        "trained on cpu")


# Imported first by every process of the test below (PYTHONPATH): process 1 has its train step LATE_S after
# compiling it, as a process that compiles the step while the other finds it in JAX's persistent compilation cache.
LATE_S = 45
LATE_COMPILER = f"""
import os, time
if os.environ.get("JAX_PROCESS_ID") == "1":
    import jax.stages
    compile_alone = jax.stages.Lowered.compile
    def compile_then_wait(self, *args, **kwargs):
        compiled = compile_alone(self, *args, **kwargs)
        time.sleep({LATE_S})
        return compiled
    jax.stages.Lowered.compile = compile_then_wait
"""


def test_a_process_with_its_step_long_after_the_other_still_trains_with_it(jax_stack, tmp_path):
    """Gloo gives a peer 30 s to join a collective: process 0 waits for process 1 (45 s later) before the first
    step, at a barrier of JAX's coordination service, and says how long; both train. Two processes started by
    hand, as a bare srun starts them."""
    late = tmp_path / "late"
    late.mkdir()
    (late / "sitecustomize.py").write_text(LATE_COMPILER)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{free_port()}",
           "JAX_NUM_PROCESSES": "2", "LOCAL_WORLD_SIZE": "2", "SUITE_RUN_DIR": str(tmp_path / "run"),
           "PYTHONPATH": f"{late}{os.pathsep}{ROOT}"}
    train = [str(jax_stack.python), str(ROOT / "cases" / "jax-gpt" / "train.py"), *tiny("jax-gpt")]
    processes = [subprocess.Popen(train, env={**env, "JAX_PROCESS_ID": str(rank), "LOCAL_RANK": str(rank)},
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for rank in (0, 1)]
    try:
        said = [p.communicate(timeout=600)[0] for p in processes]
    finally:
        for p in processes:
            p.kill()
    assert [p.returncode for p in processes] == [0, 0], said[0][-3000:] + said[1][-3000:]
    waited = {}
    for rank, lines in read_rank_events(tmp_path / "run").items():
        [waited[rank]] = [line["metrics"]["waited_for_the_others_s"] for line in lines
                          if "waited_for_the_others_s" in line.get("metrics", {})]
        assert any(line["event"] == "end" for line in lines)
    assert set(waited) == {0, 1} and waited[0] > waited[1] >= 0, waited


PRODUCTS = """
import sys
import jax, jax.numpy as jnp
from gpt import GPT
from cases._shared.gpt_config import GPTConfig
model = GPT(GPTConfig(layers=1, heads=2, width=32, context=16, vocab=64), getattr(jnp, sys.argv[1]))
tokens = jnp.zeros((2, 16), jnp.int32)
text = jax.jit(model.apply).lower(model.init(jax.random.PRNGKey(0), tokens), tokens).as_text()
for line in text.splitlines():
    if "dot_general" in line:
        print(line.rsplit(":", 1)[-1].strip())
"""


def test_every_product_of_the_model_the_tied_head_included_runs_in_the_asked_dtype(jax_stack):
    """bfloat16 products on GPUs, as pytorch-gpt's autocast: the tied head too (Flax's Embed.attend would
    promote it to the float32 table: a quarter of GPT-2 small's FLOPs). Read from the lowered program."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": f"{ROOT / 'cases' / 'jax-gpt'}{os.pathsep}{ROOT}"}
    for dtype, element in (("bfloat16", "bf16"), ("float32", "f32")):
        done = subprocess.run([str(jax_stack.python), "-c", PRODUCTS, dtype], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        products = done.stdout.splitlines()
        heads = [p for p in products if p.endswith("x64xf32>") or p.endswith("x64xbf16>")]  # (batch, length, vocab)
        assert len(products) >= 6 and len(heads) == 1, products
        inputs = [p.split("->")[0] for p in products]
        assert all(f"x{element}>" in i and ("f32>" not in i if element == "bf16" else "bf16" not in i)
                   for i in inputs), products


DEVICE_TIME = """
import json
import jax
from cases._shared.jax_loop import DEVICE_STEPS, device_step_seconds


class State:
    def __init__(self):
        self.total, self.batches = jax.numpy.zeros(()), []

    def advance(self, compiled, batch):
        self.batches.append(batch)
        self.total, loss = compiled(self.total, batch)
        return loss

    def arrays(self):
        return (self.total,)


state = State()
seconds = device_step_seconds(jax.jit(lambda total, batch: (total + batch, total * 2)), state, 1.0)
print(json.dumps({"seconds": seconds, "total": float(state.total), "batches": state.batches,
                  "steps": DEVICE_STEPS}))
"""


def test_the_device_time_per_step_runs_the_compiled_step_on_one_batch_back_to_back(jax_stack):
    """Both JAX cases' gpu_pass_s (cases/_shared/jax_loop.py; only GPUs record it): DEVICE_STEPS steps on the
    one batch it is given, the state trained on by each, wall seconds over their count."""
    import json

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(jax_stack.python), "-c", DEVICE_TIME], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["steps"] >= 2 and found["batches"] == [1.0] * found["steps"]
    assert found["total"] == found["steps"] and 0 < found["seconds"] < 60
