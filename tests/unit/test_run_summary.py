"""The run's summary line says what trained, never `None`."""

from suite.execution.run import configuration


def test_the_summary_names_what_the_case_reported():
    cfg = {"model": "resnet50-v1.5", "batch_per_device": 32, "image_size": 224, "dtype": "float32", "data": "synthetic"}
    assert configuration(cfg) == "resnet50-v1.5, batch 32/device, 224 px, float32, synthetic data"


def test_a_value_nobody_reported_is_left_out_not_printed_as_none():
    line = configuration({"model": "resnet50-v1.5", "batch_per_device": None, "image_size": None, "dtype": None,
                          "data": "synthetic"})
    assert "None" not in line and line == "resnet50-v1.5, synthetic data"
    assert configuration({}) == "nothing reported by the case"
