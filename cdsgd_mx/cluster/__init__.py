"""What starts and watches a job: our launcher, SLURM and MXNet's tools/launch.py entry points,
the node wrapper, the heartbeat, the watchdog and the job log. Never imports MXNet."""
