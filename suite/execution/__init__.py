"""A run request -> a plan of processes -> hosts -> a record: request, run, rerun, plan, the plugins'
contracts and their loading by name (the runtimes, launchers and schedulers sit above this folder), the
interconnect check, telemetry samplers, stray processes, and the site check's paths and runs."""
