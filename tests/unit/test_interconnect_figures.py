"""The interconnect check's figures from its ranks' timings, for each exchange a stack has: a ring all-reduce
(torch, Horovod, JAX, TensorFlow) and a parameter server's push and pull (MXNet over ps-lite), and with fewer
processes than participants (TensorFlow: a process per node, its GPUs the replicas); then how the diagnosis
names what the check timed."""

import json

import pytest

from suite.analysis import diagnosis
from suite.execution import interconnect_check
from suite.inputs.hostfiles import Host, World

SIZES = interconnect_check.message_sizes(100 * 2**20)
BANDWIDTH, LATENCY = 10e9 / 8, 20e-6  # 10 Gbit/s, 20 us per hop


def write_ranks(folder, processes: int, participants: int, exchange: str, seconds) -> None:
    for rank in range(processes):
        timings = [{"bytes": size, "seconds": seconds(size) * (1.1 if rank == 1 else 1.0)} for size in SIZES]
        (folder / f"rank-{rank:05d}.json").write_text(json.dumps(
            {"rank": rank, "size": participants, "exchange": exchange, "implementation": "fake", "device": "cpu",
             "iters": 3, "timings": timings}))


def test_a_parameter_servers_push_and_pull_gives_the_link_figures_of_its_scaling_model(tmp_path):
    workers = 3  # each worker's link carries its push and its pull, 2 x bytes; a hop per worker to synchronise
    write_ranks(tmp_path, workers, workers, "parameter-server", lambda b: workers * LATENCY + 2 * b / BANDWIDTH)
    found = interconnect_check.summarize(tmp_path, World((Host("a", 1), Host("b", 1), Host("c", 1)), "t"), workers)
    assert found["status"] == "ok" and (found["exchange"], found["ranks"], found["nodes"]) == ("parameter-server", 3, 3)
    last = found["sizes"][-1]  # rank 1 is the slowest: its time counts
    assert last["latency_us"] == pytest.approx((workers * LATENCY + 2 * SIZES[-1] / BANDWIDTH) * 1.1e6, rel=1e-3)
    assert last["busbw_gb_s"] == pytest.approx(2 * last["algbw_gb_s"], rel=1e-3)
    assert found["network"]["bandwidth_gbit_s"] == pytest.approx(10 / 1.1, rel=0.01)
    assert found["network"]["latency_us"] == pytest.approx(20 * 1.1, rel=0.05)


def test_a_ring_of_more_replicas_than_processes_counts_the_replicas(tmp_path):
    """Two TensorFlow processes, one per node, each with two GPUs: four replicas in the ring."""
    replicas = 4
    write_ranks(tmp_path, 2, replicas, "ring",
                lambda b: 2 * (replicas - 1) * LATENCY + 2 * (replicas - 1) / replicas * b / BANDWIDTH)
    found = interconnect_check.summarize(tmp_path, World((Host("a", 2), Host("b", 2)), "t"), 2)
    assert found["status"] == "ok" and (found["exchange"], found["ranks"], found["nodes"]) == ("ring", 4, 2)
    assert found["sizes"][-1]["busbw_gb_s"] == pytest.approx(1.5 * found["sizes"][-1]["algbw_gb_s"], rel=1e-3)
    assert found["network"]["bandwidth_gbit_s"] == pytest.approx(10 / 1.1, rel=0.01)
    assert found["network"]["latency_us"] == pytest.approx(20 * 1.1, rel=0.05)


def test_a_process_that_wrote_nothing_fails_the_check_and_one_participant_has_nothing_to_measure(tmp_path):
    world = World((Host("a", 1), Host("b", 1)), "t")
    write_ranks(tmp_path, 1, 2, "ring", lambda b: b / BANDWIDTH)
    assert interconnect_check.summarize(tmp_path, world, 2) == {
        "status": "failed", "reason": "1 of 2 ranks wrote their timings"}
    alone = tmp_path / "alone"
    alone.mkdir()
    write_ranks(alone, 1, 1, "parameter-server", lambda b: b / BANDWIDTH)
    found = interconnect_check.summarize(alone, World((Host("a", 2),), "t"), 1)
    assert found["status"] == "not available" and "one participant in the parameter-server exchange" in found["reason"]


def test_the_older_rank_files_without_an_exchange_are_a_ring(tmp_path):
    write_ranks(tmp_path, 2, 2, "ring", lambda b: 2 * LATENCY + b / BANDWIDTH)
    for path in tmp_path.glob("rank-*.json"):
        written = json.loads(path.read_text())
        del written["exchange"]
        path.write_text(json.dumps(written))
    found = interconnect_check.summarize(tmp_path, World((Host("a", 1), Host("b", 1)), "t"), 2)
    assert found["exchange"] == "ring" and found["sizes"][-1]["busbw_gb_s"] == found["sizes"][-1]["algbw_gb_s"]


@pytest.mark.parametrize("exchange, words", [
    ("ring", "one all-reduce of the gradient takes 40%"),
    ("parameter-server", "one push and pull of the gradient through the parameter servers takes 40%")])
def test_the_diagnosis_names_what_the_check_timed(exchange, words):
    parameters = 25_000_000  # ten steps of 0.5 s; the gradient's exchange takes 0.2 s of each
    record = {"world": {"device_type": "cpu", "devices": 2}, "repetitions": [],
              "config": {"parameters": parameters, "global_batch": 64, "reported_by_case": {}},
              "metrics": {"throughput": {"unit": "img/s"}, "timed_images": 10 * 64, "timed_seconds": 5.0,
                          "interconnect": {"status": "ok", "exchange": exchange,
                                           "sizes": [{"bytes": parameters * 4, "latency_us": 0.2e6}]}}}
    found = diagnosis.diagnose(record)
    assert found["verdict"] == "communication" and found["figures"]["allreduce"] == pytest.approx(0.4)
    assert found["why"].startswith(words)
