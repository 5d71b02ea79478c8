"""A record's system under MLPerf's system-description names, and what differs between two records' systems."""

from suite.records.system_description import system_description, system_differences


def record(versions: dict, **host) -> dict:
    return {"world": {"nodes": 1, "cluster": "site"},
            "provenance": {"versions": versions, "host_info": {"n1": {"cpu_model": "AMD EPYC 7763", **host}}}}


def test_frameworks_are_named_in_one_order_whatever_the_versions_order():
    one = system_description(record({"horovod": "0.28.1", "python": "3.12.3", "torch": "2.13.0"}))
    other = system_description(record({"torch": "2.13.0", "horovod": "0.28.1"}))
    assert one["framework"] == other["framework"] == "torch 2.13.0, horovod 0.28.1"
    assert system_description(record({"jax": "0.11.2", "numpy": "2.3"}))["framework"] == "jax 0.11.2"


def test_what_differs_between_two_systems_is_named_and_what_one_does_not_say_is_not():
    was = system_description(record({"torch": "2.12.0", "horovod": "0.28.1"}, memory_gib=503.5))
    now = system_description(record({"torch": "2.13.0"}, cpu_model="Intel Xeon 8480+"))  # no memory said
    assert system_differences(was, now) == ["host_processor_model_name: AMD EPYC 7763 -> Intel Xeon 8480+",
                                            "framework: torch 2.12.0, horovod 0.28.1 -> torch 2.13.0"]
    kept = {**was, "framework": "horovod 0.28.1, torch 2.12.0"}  # a record written before the order was fixed
    assert system_differences(kept, was) == [] and system_differences(was, was) == []


def test_a_gpu_runs_driver_cuda_cudnn_and_nccl_are_its_other_software_stack():
    gpus = [{"name": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "memory": "81559 MiB"}]
    versions = {"torch": "2.11.0+cu130", "cuda": "13.0", "hip": None, "cudnn": 91002, "nccl": "2.27.7"}
    was = system_description(record(versions, gpus=gpus))
    assert was["other_software_stack"] == "driver 580.159.04, CUDA 13.0, cuDNN 91002, NCCL 2.27.7"
    now = system_description(record(versions, gpus=[{**gpus[0], "driver": "590.44.01"}]))
    assert system_differences(was, now) == ["other_software_stack: driver 580.159.04, CUDA 13.0, cuDNN 91002, "
                                            "NCCL 2.27.7 -> driver 590.44.01, CUDA 13.0, cuDNN 91002, NCCL 2.27.7"]
    assert "other_software_stack" not in system_description(record({"torch": "2.13.0+cpu", "cuda": None}))
