"""The same training under each data-parallel strategy (suite/analysis/same_work.py, parallel_rows): only
records of the same model, context, global batch, dtype and data on as many devices of one cluster are
set side by side, the latest of each case and strategy, and only where more than one ran: PyTorch's ddp and fsdp
beside JAX's dp and fsdp."""

from suite.analysis.same_work import PARALLEL_COLUMNS, format_parallel_table, parallel_rows, reported
from suite.records.read import Point

MIB = 2**20


def point(parallel: str, finished: str, devices: int = 2, global_batch: int = 16, tokens_s: float = 4000.0,
          cluster: str = "jsc", peaks: tuple = (900 * MIB, 1000 * MIB), case: str = "pytorch-gpt") -> Point:
    facts = {"parallel": parallel, "model_name": "gpt2-small", "context": 1024, "global_batch": global_batch,
             "dtype": "amp-bfloat16", "data": "synthetic"}
    record = {"case": case, "run_id": f"{finished}-{case}-{parallel}", "finished_at": finished,
              "execution": {"stack": "pytorch"}, "world": {"cluster": cluster, "devices": devices, "nodes": 1},
              "config": {"reported_by_case": facts},
              "metrics": {"throughput": {"mean": tokens_s, "per_device": tokens_s / devices},
                          "utilisation": {"mfu_datasheet": 0.25, "datasheet_part": "H100 SXM", "precision": "bf16"},
                          "results": [{"peak_memory_bytes": list(peaks)}]}}
    return Point(record, record["run_id"])


def test_each_strategy_s_latest_record_of_the_same_work_side_by_side():
    points = [point("ddp", "2026-11-01T10:00:00Z", tokens_s=1.0), point("ddp", "2026-11-02T10:00:00Z"),
              point("fsdp", "2026-11-01T11:00:00Z", tokens_s=3600.0, peaks=(600 * MIB, 700 * MIB)),
              point("ddp", "2026-11-01T12:00:00Z", global_batch=32),  # other work: no fsdp beside it
              point("fsdp", "2026-11-01T13:00:00Z", devices=4),  # other device count: no ddp beside it
              point("ddp", "2026-11-01T14:00:00Z", cluster="lumi")]  # other cluster
    rows = parallel_rows(points)
    assert [(reported(p)["parallel"], p.finished_at) for p in rows] == [("ddp", "2026-11-02T10:00:00Z"),
                                                                       ("fsdp", "2026-11-01T11:00:00Z")]
    header, ddp, fsdp = format_parallel_table(rows).splitlines()
    assert header.split() == " ".join(PARALLEL_COLUMNS).split()
    assert "16 x 1024 tokens" in ddp and " ddp " in ddp and "4,000" in ddp and "2,000" in ddp
    assert "25.0% of H100 SXM bf16" in ddp and ddp.endswith("1,000 MiB")
    assert " fsdp " in fsdp and "3,600" in fsdp and "1,800" in fsdp and fsdp.endswith("700 MiB")


def test_a_strategy_alone_makes_no_rows():
    assert parallel_rows([point("ddp", "2026-11-01T10:00:00Z"), point("ddp", "2026-11-02T10:00:00Z")]) == []


def test_the_frameworks_strategies_of_the_same_work_side_by_side():
    jax = {"case": "jax-gpt"}
    points = [point("ddp", "2026-11-01T10:00:00Z"), point("fsdp", "2026-11-01T11:00:00Z"),
              point("dp", "2026-11-01T12:00:00Z", **jax), point("fsdp", "2026-11-01T13:00:00Z", **jax),
              point("dp", "2026-11-01T14:00:00Z", global_batch=32, **jax)]  # other work: alone
    rows = parallel_rows(points)
    assert [(p.case, reported(p)["parallel"]) for p in rows] == [
        ("jax-gpt", "dp"), ("jax-gpt", "fsdp"), ("pytorch-gpt", "ddp"), ("pytorch-gpt", "fsdp")]
    one_each = parallel_rows([point("ddp", "2026-11-01T10:00:00Z"), point("dp", "2026-11-01T12:00:00Z", **jax)])
    assert [p.case for p in one_each] == ["jax-gpt", "pytorch-gpt"]  # one strategy of each framework: a pair too


def test_a_records_frameworks_are_named_with_their_versions_in_one_order():
    from suite.analysis.references import record_framework
    from suite.analysis.same_work import Row
    from suite.records.read import record_frameworks

    horovod = {"provenance": {"versions": {"horovod": "0.28.1", "torch": "2.13.0", "numpy": "2.1"}},
               "execution": {"launcher": "horovod"}}
    jax = {"provenance": {"versions": {"jax": "0.10.2", "jaxlib": "0.10.2", "flax": "0.12.8"}},
           "execution": {"launcher": "jaxdist"}}
    assert record_frameworks(horovod) == [("PyTorch", "2.13.0"), ("Horovod", "0.28.1")]
    assert record_framework(jax) == "JAX" and record_framework({"provenance": {}}) is None
    assert Row(Point(jax, "a.json"), None, "").framework == "JAX 0.10.2 (jaxdist)"
    assert Row(Point(horovod, "b.json"), None, "").framework == "PyTorch 2.13.0 + Horovod 0.28.1 (horovod)"
