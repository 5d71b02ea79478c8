"""The run's summary line says what trained, never `None`."""

from pathlib import Path

from suite.execution.console import configuration, peak_memory_line, print_summary, settings_line, time_line


def test_the_summary_names_what_the_case_reported():
    cfg = {"model": "resnet50-v1.5", "batch_per_device": 32, "image_size": 224, "dtype": "float32", "data": "synthetic"}
    assert configuration(cfg) == "resnet50-v1.5, batch 32/device, 224 px, float32, synthetic data"


def test_a_value_nobody_reported_is_left_out_not_printed_as_none():
    line = configuration({"model": "resnet50-v1.5", "batch_per_device": None, "image_size": None, "dtype": None,
                          "data": "synthetic"})
    assert "None" not in line and line == "resnet50-v1.5, synthetic data"
    assert configuration({}) == "nothing reported by the case"


def test_the_peak_memory_line_gives_the_largest_and_smallest_rank_and_what_was_measured():
    results = {"peak_memory_bytes": [300 * 2**20, 512 * 2**20], "peak_memory_basis": "torch.cuda.max_memory_allocated"}
    line = peak_memory_line({"metrics": {"results": [results]}})
    assert line == ("peak memory per device: 512.0 MiB at most, 300.0 MiB at least, over 2 device(s): "
                    "torch.cuda.max_memory_allocated")
    assert peak_memory_line({"metrics": {"results": [{"first_step_loss": 5.5}]}}) is None
    assert peak_memory_line({"metrics": {}}) is None


def test_the_summary_names_the_settings_that_change_the_speed_and_the_cases_notes(capsys):
    """In the words of the report's hover (suite/analysis/what_ran.py): what the case reported, else the
    options asked, else the case's default; a case without such settings gets no line."""
    reported = {"parallel": "fsdp", "compile": True, "compile_mode": "max-autotune", "preset": "h100",
                "optimizer": "AdamW", "optimizer_impl": "fused", "notes": ["world size 1: sharding saves nothing"]}
    gpt = {"case": "pytorch-gpt", "config": {"reported_by_case": reported}}
    assert settings_line(gpt, Path("r.json")) == ("settings: fsdp, compiled (mode max-autotune), preset h100, "
                                                  "optimizer fused, context 1024 tokens, no activation checkpointing")
    ddp = {"case": "pytorch-ddp", "config": {"options": {"preset": "dle", "compile": True, "channels-last": True}}}
    assert settings_line(ddp, Path("r.json")) == ("settings: compiled (mode default), preset dle, optimizer auto, "
                                                  "channels-last")
    assert settings_line({"case": "tf-cifar", "config": {}}, Path("r.json")) is None
    record = {**gpt, "status": "ok", "config": {"model": "gpt", "reported_by_case": reported},
              "world": {"nodes": 1, "devices": 1, "hosts": ["gpu01"]}, "metrics": {"throughput": {"mean": None}}}
    print_summary(record, Path("r.json"))
    out = capsys.readouterr().out
    assert "   settings: fsdp, compiled (mode max-autotune), preset h100" in out
    assert "   note: world size 1: sharding saves nothing" in out


def test_the_time_line_says_where_the_first_launchs_wall_time_went():
    took = {"to_start_line_s": 2.84, "to_warmup_s": 3.59, "warmup_s": 0.75, "window_s": 2.07, "after_window_s": 0.0,
            "to_exit_s": 0.44, "total_s": 9.68, "compile_s": 2.51, "matmul_peak_s": 1.04}
    assert time_line({"repetitions": [{"timeline": took}]}) == (
        "time: 9.7 s from launch to exit: to the start line 2.8, to the warmup 3.6 (compile 2.5, matmul peak 1.0), "
        "warmup 0.8, timed window 2.1, after it 0.0, to the exit 0.4")
    two = time_line({"repetitions": [{"timeline": {"total_s": 1.5}}, {"timeline": took}]})
    assert two == "time: 1.5 s from launch to exit (repetition 1 of 2)"
    assert time_line({"repetitions": [{"run_dir": "r"}]}) is None and time_line({"repetitions": []}) is None
