"""The launcher's watchdog: ends a job that stalls, naming the node it waits on.

Every node beats once a second (cdsgd_mx.cluster.heartbeat). The watchdog keeps each node's last report
and decides, at every tick of the launcher:

- uneven steps: a worker is exiting after S steps while another has begun step S+1 or later.
  That step can never complete (MXNet's rounds need every worker's push): stop at once.
- a wait: some node has been blocked on the network for longer than the stall timeout (the
  start-up timeout while it is still starting). Warn at `warn_after`, stop at the timeout.
- silence: a running node has sent nothing for longer than the stall timeout (a stopped or hung
  process: its heartbeat thread stops with it). This also catches a stopped scheduler, which
  training does not need until the exit barrier.

The node named is the one held responsible: a silent node first, then a node never heard from,
then the workers behind the waiting ones (live but slow, or hung in their own code), else the
servers (every node answers, so one is stuck inside MXNet). A slow but live step shorter than
the timeout trips nothing.
"""
import time

from cdsgd_mx.cluster import heartbeat

SILENT_AFTER = 5.0  # seconds without a beat before a node counts as silent (beats come every 1 s)


class Watchdog:
    def __init__(self, secret, labels, stall_timeout=600.0, start_timeout=1800.0, warn_after=60.0, placed=None):
        """labels: the launcher's names of the job's processes ('scheduler', 'server 0', ...);
        placed: the host each was started on, where not here (named for a node never heard)."""
        self.secret = secret
        self.labels = list(labels)
        self.placed = dict(placed or {})
        self.stall_timeout = stall_timeout
        self.start_timeout = max(start_timeout, stall_timeout)
        self.warn_after = min(warn_after, stall_timeout / 2)
        self.last = {}     # label -> (report, time received)
        self.warned = set()
        self.stopped = set()  # labels the launcher saw stopped at the last check
        self.kind = None      # of the last verdict: 'stall', 'start' (the start timeout) or 'uneven'
        self.dropped = 0   # datagrams without the job's MAC

    def receive(self, packet, now=None):
        msg = heartbeat.decode(self.secret, packet)
        if msg is None or msg["node"] not in self.labels:
            self.dropped += 1
            return
        before = self.last.get(msg["node"])
        if before and before[0].get("pid") == msg.get("pid") and before[0].get("seq", 0) >= msg.get("seq", 0):
            return  # overtaken on the way by a newer beat of the same process
        self.last[msg["node"]] = (msg, time.monotonic() if now is None else now)

    # -- what the launcher asks every tick ---------------------------------------------------
    def check(self, running, now=None, stopped=()):
        """running: labels of the processes still alive; stopped: those the launcher sees
        stopped (a local process in state T). Returns (warnings, verdict): lines to print now,
        and the reason to stop the job (None: carry on)."""
        now = time.monotonic() if now is None else now
        running = [l for l in self.labels if l in running]
        self.stopped = set(stopped)
        uneven = self._uneven(running)
        self.kind = "uneven" if uneven else "stall"
        if uneven or not self.stall_timeout:  # uneven steps end the job whatever the stall timeout
            return [], uneven
        warnings = []
        # silence, in every phase: an exiting node falls silent when its interpreter shuts down,
        # but then ends within seconds; one still there after the timeout is stuck in MXNet's
        # exit barriers (stopped itself, or waiting for one that is)
        silent = self._silent(running, now, self.warn_after)
        for label in silent:
            if ("silent", label) not in self.warned:
                self.warned.add(("silent", label))
                warnings.append(self._silence(label, now))
        over = self._silent(running, now, self.stall_timeout)
        if over:
            others = [self._name(l) for l in over[1:]]
            return warnings, self._silence(over[0], now) + ("; silent too: %s" % ", ".join(others) if others else "")
        for label in running:
            wait = self._wait(label, now)
            if wait is None:
                continue
            what, waited = wait
            limit = self.start_timeout if self._phase(label) == "start" else self.stall_timeout
            if waited <= self.warn_after:
                continue
            line = "%s has waited %.0f s for %s; missing: %s" % (
                self._name(label), waited, what, self._suspects(label, running, now))
            if waited > limit:
                self.kind = "start" if self._phase(label) == "start" else "stall"
                return warnings, line
            if ("wait", label, what) not in self.warned:
                self.warned.add(("wait", label, what))
                warnings.append(line)
        return warnings, None

    def _uneven(self, running):
        workers = [l for l in self.labels if l.startswith("worker") and l in self.last]
        done = [l for l in workers if self._phase(l) == "exit"]  # sent at once: its final step count
        for d in done:
            steps = self.last[d][0]["step"]
            ahead = [l for l in workers if l in running and self.last[l][0]["step"] > steps]
            if ahead:
                return ("uneven steps: %s finished after %d steps while %s: every worker of a synchronous job must "
                        "take the same number of steps (give every rank the same number of batches)"
                        % (self._name(d), steps, ", ".join("%s is at step %d" % (self._name(l), self.last[l][0]["step"])
                                                           for l in ahead)))
        return None

    def _silent(self, running, now, longer_than):
        """Running nodes heard before and silent for longer than that: the ones the launcher
        sees stopped first, then those not exiting (an exiting one may be waiting on them)."""
        silent = [l for l in running if self._silent_for(l, now) is not None and self._silent_for(l, now) > longer_than]
        return sorted(silent, key=lambda l: (l not in self.stopped, self._phase(l) == "exit"))

    def _silence(self, label, now):
        return "%s: no heartbeat for %.0f s (%s)%s" % (
            self._name(label), self._silent_for(label, now),
            "stopped: its process is in state T" if label in self.stopped else "stopped or hung?", self._where(label))

    def _suspects(self, waiter, running, now):
        silent = self._silent(running, now, SILENT_AFTER)
        if silent:
            return ", ".join("%s (no heartbeat for %.0f s%s)" % (self._name(l), self._silent_for(l, now),
                                                                  ", stopped" if l in self.stopped else "")
                             for l in silent)
        never = [l for l in running if l not in self.last]
        if never:
            return ", ".join("%s (never reported: not started, or not using cdsgd_mx)" % self._name(l) for l in never)
        step = self.last[waiter][0]["step"]
        order = {"start": 0, "train": 1, "exit": 2}
        behind = [l for l in running if l.startswith("worker") and l != waiter and self._wait(l, now) is None
                  and order.get(self._phase(l), 0) <= order.get(self._phase(waiter), 0)
                  and self.last[l][0]["step"] <= step]
        if behind:
            return ", ".join("%s (at step %d, busy in its own code)" % (self._name(l), self.last[l][0]["step"])
                             for l in behind)
        servers = [l for l in running if l.startswith("server")]
        return "no node is silent; %s (stuck inside MXNet?)" % ", ".join(servers or ["the servers"])

    def steps_begun(self):
        """The most steps any worker reported having begun (0 before any)."""
        return max([m["step"] for l, (m, _) in self.last.items() if l.startswith("worker")] or [0])

    def resumed_at(self):
        """The step a restarted job resumed at (its checkpoint's; 0 without one), once a
        worker is training; None before."""
        steps = [m.get("resumed") or 0 for l, (m, _) in self.last.items()
                 if l.startswith("worker") and m.get("phase") in ("train", "exit")]
        return min(steps) if steps else None

    # -- one node's state ---------------------------------------------------------------------
    def _silent_for(self, label, now):
        return now - self.last[label][1] if label in self.last else None

    def _phase(self, label):
        return self.last[label][0].get("phase") if label in self.last else None

    def _wait(self, label, now):
        """(what, seconds) the node has been blocked on, None if it is not (or is silent)."""
        if label not in self.last:
            return None
        msg, at = self.last[label]
        if not msg.get("wait") or now - at > SILENT_AFTER:
            return None
        return msg["wait"], float(msg.get("waited", 0)) + (now - at)

    def _name(self, label):
        """'worker 1 (rank 0, host h)'; 'worker 1 (on h)' for one never heard, started on h."""
        if label not in self.last:
            return label + (" (on %s)" % self.placed[label] if label in self.placed else "")
        msg = self.last[label][0]
        extra = ([] if msg.get("rank") is None else ["rank %s" % msg["rank"]]) + ["host %s" % msg.get("host")]
        return "%s (%s)" % (label, ", ".join(extra))

    def _where(self, label):
        msg = self.last[label][0]
        if msg.get("phase") == "train" and label.startswith("worker"):
            return ", last heard at step %d" % msg["step"] + (
                " waiting for %s" % msg["wait"] if msg.get("wait") else "")
        return ", last in phase %s" % msg.get("phase")
