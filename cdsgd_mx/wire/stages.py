"""Where a server's rounds go, stage by stage: wall and CPU seconds per stage of a compressed
round (proof check, decode + global update, the aim, the pull's encode, the round count), summed
over the job, and the server's CPU seconds while it served (every thread, every kind of round;
a waiting server takes none). Off unless CDSGD_SERVER_STATS is set (python -m cdsgd_mx.bench.comm
and bench.overlap set it); on, it costs two clock reads per stage.

    stages = Stages.from_env()
    t = stages.start()
    ... the stage ...
    t = stages.lap("decode + update", t)   # the next stage starts here
"""
import json
import os
import time

ENV = "CDSGD_SERVER_STATS"
LINE = "SERVER_STAGES "  # the line a server prints at its end: LINE + json


class Stages:
    def __init__(self, on):
        self.on = on
        self.wall, self.cpu = {}, {}
        self.serving_since = None

    def serving(self):
        """The server starts serving: its CPU from here on is the job's (not its start's)."""
        if self.on:
            self.serving_since = time.process_time()

    @classmethod
    def from_env(cls):
        return cls(bool(os.environ.get(ENV)))

    def start(self):
        return (time.perf_counter(), time.thread_time()) if self.on else None

    def lap(self, name, since):
        """Add the time since `since` to stage `name`; the new start."""
        if not self.on:
            return None
        now = (time.perf_counter(), time.thread_time())
        self.wall[name] = self.wall.get(name, 0.0) + now[0] - since[0]
        self.cpu[name] = self.cpu.get(name, 0.0) + now[1] - since[1]
        return now

    def report(self):
        """The line to print at the end, or None when off."""
        if not self.on:
            return None
        serving = time.process_time() - self.serving_since if self.serving_since is not None else None
        return LINE + json.dumps({"wall": self.wall, "cpu": self.cpu, "serving_cpu": serving})


def reports(output):
    """Every server's report in a job's output (lines prefixed by the launcher), as dicts."""
    return [json.loads(line.split(LINE, 1)[1]) for line in output.splitlines() if LINE in line]
