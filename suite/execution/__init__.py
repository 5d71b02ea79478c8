"""A run request -> a plan of processes -> hosts -> a record: the request (request), the cluster profiles
(clusters), the run engine, its rerun and a sweep's resume (run, rerun, resume), what a run prints (console), the
plan's plain data (plan), the plugins' contracts and their loading by name (plugins; the runtimes, launchers and
schedulers sit above this folder), the interconnect check (interconnect_check), telemetry samplers (samplers), stray
processes (strays), the images' renders and builds (image_builds), the site check's paths and runs (site_paths,
site_runner), what a profile needs on this machine (doctor), the same-work runs of compare-frameworks
(same_work_runs) and a case's dataset made by its data script (datasets)."""
