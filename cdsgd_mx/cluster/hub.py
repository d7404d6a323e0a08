"""The job's hub in our scheduler, where no launcher of ours watches the job (MXNet's
tools/launch.py, srun, anything that sets DMLC_* itself): every worker and server beats to it
(heartbeat.py) and it answers each beat with its verdict, so that a failed job ends by itself.

The job has failed when:
- a worker says so (its last beat, from the uncaught exception that ends it: phase 'failed');
- a node that has beaten falls silent for longer than the stall timeout outside its exit
  (killed, or its machine gone; a stopped worker's last beat says 'exit' when it ends well);
- fewer workers than DMLC_NUM_WORKER have beaten by the start-up timeout.
The last two wait BEHIND seconds longer than the timeouts, so that a worker's own stall watch,
which names the wait it gave up on, speaks first (as cdsgd_mx.launch's nodes run behind it).
Then the hub answers 'stop' to every beat for a few seconds (each node that hears it exits in one
line), and the scheduler exits with EXIT_FAILED, naming the cause. A job that ends well ends as
MXNet's do: the workers' exit stops the servers and the scheduler.

API: Hub(secret, workers, stall, start).receive(packet, now) -> answer / verdict(now); serve(...).
"""
import os
import socket
import sys
import threading
import time

from cdsgd_mx.cluster import heartbeat

EXIT_FAILED = 1
STOP_FOR = 3.0  # seconds the hub keeps answering 'stop' before the scheduler exits
BEHIND = 10.0   # seconds the hub's silence and start-up verdicts wait after the nodes' own timeouts


class Hub:
    def __init__(self, secret, workers, stall_timeout, start_timeout, now=None):
        self.secret, self.workers = secret, workers
        self.stall, self.start_limit = stall_timeout, start_timeout
        self.began = time.monotonic() if now is None else now
        self.last = {}       # (node, host, pid) -> (report, time received)
        self.why = None      # the failure, once there is one

    def receive(self, packet, now):
        """A beat: the answer to send back (bytes), or None for a packet without the job's MAC."""
        report = heartbeat.decode(self.secret, packet)
        if report is None:
            return None
        self.last[(report["node"], report.get("host"), report.get("pid"))] = (report, now)
        if report.get("phase") == "failed" and self.why is None:
            self.why = "%s failed (its output says why)" % _name(report)
        return self.answer()

    def answer(self):
        msg = {"node": "scheduler", "verdict": "stop" if self.why else "go"}
        if self.why:
            msg["why"] = self.why
        return heartbeat.encode(self.secret, msg)

    def verdict(self, now):
        """The failure, if the job has failed by `now` (silence and start-up are judged here)."""
        if self.why is None:
            for report, at in self.last.values():
                if report.get("phase") != "exit" and self.stall and now - at > self.stall:
                    self.why = "%s has been silent for %.0f s (killed, or its machine is gone)" % (_name(report), now - at)
                    break
        if self.why is None and self.start_limit and now - self.began > self.start_limit:
            seen = {key for key, (report, _) in self.last.items() if key[0].startswith("worker")}
            if len(seen) < self.workers:
                self.why = "only %d of %d workers started within %s=%g s" % (len(seen), self.workers,
                                                                           heartbeat.START_TIMEOUT, self.start_limit)
        return self.why


def _name(report):
    rank = report.get("rank")
    return "%s%s on %s" % (report["node"], "" if rank is None else " (rank %d)" % rank, report.get("host", "?"))


def serve(secret, port, workers):
    """Run the hub on UDP `port` in a daemon thread of the scheduler; on a failure it answers
    'stop' for STOP_FOR seconds, then ends the scheduler in one line."""
    stall, start_limit = heartbeat.timeouts()
    # after the nodes' own watch: a worker waiting on a hung one names the wait itself first
    hub = Hub(secret, workers, stall and stall + BEHIND, start_limit and start_limit + BEHIND)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("", int(port)))
    sock.settimeout(heartbeat.INTERVAL)

    def loop():
        failed_at = None
        while True:
            try:
                packet, sender = sock.recvfrom(65536)
                answer = hub.receive(packet, time.monotonic())
                if answer is not None:
                    sock.sendto(answer, sender)
            except OSError:
                pass
            now = time.monotonic()
            if hub.verdict(now) and failed_at is None:
                failed_at = now
            if failed_at is not None and now - failed_at > STOP_FOR:
                sys.stderr.write("cdsgd_mx scheduler: the job failed: %s; exiting\n" % hub.why)
                sys.stderr.flush()
                os._exit(EXIT_FAILED)

    threading.Thread(target=loop, name="cdsgd-hub", daemon=True).start()
    return hub
