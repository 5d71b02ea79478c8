"""A run request -> a plan of processes -> hosts -> a record: request, run, rerun, plan, plugins (the
runtimes, launchers and schedulers beside this folder), the interconnect check, telemetry samplers,
stray processes."""
