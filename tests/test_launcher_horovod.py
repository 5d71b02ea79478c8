from suite.hostfile import Host, World
from suite.launchers import horovod
from suite.plan import Launch, StackEnv


def test_plan_runs_one_horovodrun_over_all_hosts(tmp_path):
    world = World((Host("node1", 2), Host("node2", 2)), "hf")
    env = StackEnv(runtime="local", bin_dir="/stack/bin", env={"PYTHONPATH": "/suite"})
    plan = horovod.plan(Launch("/cases/x/train.py", ["--batch-size", "8"], world, env, str(tmp_path), "/data"))
    [process] = plan.processes
    assert process.argv == ["/stack/bin/horovodrun", "-np", "4", "-H", "node1:2,node2:2", "--gloo",
                            "/stack/bin/python", "/cases/x/train.py", "--batch-size", "8"]
    assert process.env == {"PYTHONPATH": "/suite", "SUITE_RUN_DIR": str(tmp_path), "SUITE_DATA_DIR": "/data",
                           "SUITE_NODES": "2", "SUITE_DEVICES": "4"}
    assert plan.details == {"launcher": "horovod", "controller": "gloo"}


def test_container_runs_horovodrun_and_its_workers_inside_the_image():
    world = World((Host("localhost", 1),), "hf")
    env = StackEnv(runtime="apptainer", bin_dir="/opt/stack/bin", prefix=("apptainer", "exec", "img.sif"))
    argv = horovod.plan(Launch("train.py", [], world, env, "/run", "/data")).processes[0].argv
    assert argv[:4] == ["apptainer", "exec", "img.sif", "/opt/stack/bin/horovodrun"]
    assert argv[-2:] == ["/opt/stack/bin/python", "train.py"] and argv.count("apptainer") == 1
