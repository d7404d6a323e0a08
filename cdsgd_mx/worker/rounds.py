"""One round of a bucket set on the communication thread: push g(t) bucket by bucket (the
2-bit codes of g(t) + residual, or fp32: to the weight key in one pushpull request that brings
W(t+1) back, or with fp32_sum='rank' as this worker's row of the bucket's rows key) with this
worker's proof, issue the pulls of W(t+1)
(fp32, or with 2-bit pulls the codes of W(t+1) - V: pull_compression.py), then check that each
bucket's round was applied (sending it again if a server dropped it); what a 2-bit pull brings
is decoded into V and comm_buf by an engine operation issued behind it (pull_compression.py).
An fp32 round keeps at most a window of pushes in flight (PushWindow); a bucket with parts
(buckets.partition) goes part by part in an fp32 round, whole in a 2-bit one; or whole in an
fp32 round too, where the job measured whole buckets faster (part_choice.py).

API: RoundRunner(backend, schedule, threshold, tracer, names, window).push(bset, t, keep_residual)
-> check; .check(bset, t) -> follow-up; .parts_from_grad(bset, t); .went_in_parts(bset, t);
.bytes_of_step(sets, t);
bytes_pushed, bytes_by_step, resent.
"""
import time

from cdsgd_mx.wire import auth
from cdsgd_mx import codec
from cdsgd_mx.cluster import heartbeat
from cdsgd_mx.worker.backends import MAX_RESENDS, dropped
from cdsgd_mx.wire.pull_compression import PULL_2BIT, PULL_FP32

# Bytes of fp32 pushes a worker keeps in flight (pushed, W not yet back), as BytePS's credit: a
# bucket's push follows the W of the oldest ones. Unwindowed, the workers' TCP flows into a
# server's NIC do not share it evenly; the server can answer a bucket only once the slowest
# worker's push of it is in, so its pulls fall behind and the round ends in a tail of them.
# Chosen by measurement (docs/performance.md, "A window of pushes in flight"): ResNet-50's fp32
# round at 4 workers + 1 server on 1 Gbit/s NICs 3.9-4.1 s -> 3.6 s (the bound: 3.27 s).
PUSH_WINDOW = 2 << 20
# ... but never fewer buckets than this in flight: 2 of CD-SGD's 4 MiB buckets at a time took
# ResNet-50's round from 3.9 s to 6.2 s (one bucket's pull, then the next one's push)
MIN_IN_FLIGHT = 4


class PushWindow:
    """The fp32 pushes of step t's round in flight: behind(b, nbytes) returns the earlier
    buckets whose W bucket b's push must follow (none while the window has room; window 0:
    none ever) and counts b in flight."""

    def __init__(self, window):
        self.window = window
        self.flight, self.bytes = [], 0

    def behind(self, b, nbytes):
        earlier = []
        while self.window and len(self.flight) >= MIN_IN_FLIGHT and self.bytes >= self.window:
            oldest, size = self.flight.pop(0)
            earlier.append(oldest)
            self.bytes -= size
        self.flight.append((b, nbytes))
        self.bytes += nbytes
        return earlier


class RoundRunner:
    """Runs rounds for the step engine (step timing is not its business: it is told which step
    a round is, and the schedule says what that step pushes)."""

    def __init__(self, backend, schedule, threshold, tracer, names, window=PUSH_WINDOW):
        self.backend, self.schedule, self.threshold, self.tracer = backend, schedule, threshold, tracer
        self.window = window            # bytes of fp32 pushes in flight (PushWindow; 0: no limit)
        self.names = names              # names(keys) -> "p1, p2", for messages
        self.bytes_pushed = 0           # all pushes of this worker since creation
        self.bytes_by_step = {}         # step -> bytes pushed by this worker at that step
        self.resent = 0                 # rounds sent again after a server dropped them (a push from outside the job)
        # fp32 rounds go to the buckets' rows keys where they have one (fp32_sum='rank'); False:
        # to the weight keys (bench.comm's paired_sum times both sums in one job)
        self.fp32_rows = True
        # part_choice.PartChoice: whether the fp32 rounds of buckets with parts go whole (None: never)
        self.choice = None

    def push(self, bset, t, keep_residual=None, parts_from_grad=False):
        """Communication thread, push phase: push g(t) from comm_buf (codes or fp32) bucket by
        bucket, each with this worker's proof (auth.py), and issue the pulls of W(t+1).
        Returns the check of the servers' counts that come back with the pulls (run at the
        flush). keep_residual: puts back the residual of parameters skipped at this step.
        parts_from_grad: the parts take g(t) from grad_buf (see parts_from_grad)."""
        compressed = self.schedule.compressed(t)
        pull_down, tracked = self.schedule.pull_compressed(t), self._tracked(bset, t)
        keep = not compressed and self.schedule.delayed(t) and bset.region and not bset.device  # see _kept_gradient
        pushed, start, start_s = 0, self.tracer.now_us(), time.perf_counter()
        window = PushWindow(self.window)
        whole = not compressed and self._chooses(bset) and self.choice.whole(t)
        if not compressed:
            # every part's g(t) is taken first (buckets.partition): W comes back into its
            # bucket's comm_buf, and a copy there ahead of the next part's would hold that part's
            # push behind this part's pull
            for b in bset.buckets if not whole else ():
                for p in b.parts:
                    bset.fp32_to_comm(p, from_grad=parts_from_grad)
            for i, u in self.fp32_units(bset, whole):
                pushed += self._push_fp32(bset, u, i, t, window, tracked, keep)
                self._pull(bset, t, i, u, self._rows_key(u), start)  # (a rows push: its pull right behind it)
                if u.whole is not None:  # a part's W, once in, into its bucket's comm_buf
                    bset.part_to_comm(u)
            if self._chooses(bset) and self.choice.timing(t):
                self.choice.time_step(t, start_s, bset.comm_wires)  # (every W lands in comm_buf)
        for i, b in enumerate(bset.buckets if compressed else ()):  # a 2-bit round: each bucket's codes
            with self.tracer.span("quantize", bucket=i, step=t):
                codes, bad = bset.compressor.compress(i, bset.gradient(b, from_grad=not self.schedule.delayed(t)))
                if bad:
                    raise FloatingPointError("non-finite gradient in bucket %d (parameters %s) at step %d (%d values)"
                                             % (i, self.names(sorted({s.key for s in b.slots})), t, bad))
                codec.wire_encode(codes, self.backend.wire_row(b.payload_key))
                if bset.copy is not None:  # what this round pulls: the codes of W - V, or W
                    self.backend.set_pull(b.payload_key, PULL_2BIT if pull_down else PULL_FP32)
            with self.tracer.span("push codes", bucket=i, step=t):
                self.backend.seal(b)
                self.backend.push_payload(b.payload_key)
            pushed += self.payload_bytes(b, bset)
            self._pull(bset, t, i, b, b.payload_key, start, down=pull_down)  # right behind its push
        if keep_residual is not None:
            keep_residual()
        self.bytes_pushed += pushed
        self.bytes_by_step[t] = self.bytes_by_step.get(t, 0) + pushed
        # the span ends when the transfer does; recorded without holding up this thread
        self.tracer.watch("pull", bset.down_buf if pull_down else bset.comm_wires, start, step=t)
        return lambda: self.check(bset, t)

    @staticmethod
    def units(b, whole=False):
        """What an fp32 round of bucket b pushes: its parts, or itself (no parts, or whole)."""
        return [b] if whole or not b.parts else b.parts

    def _chooses(self, bset):
        """Whether the set's fp32 rounds go the way the part choice says (it has buckets with parts)."""
        return self.choice is not None and any(b.parts for b in bset.buckets)

    def _went_whole(self, bset, t):
        """Whether step t's fp32 round of the set went whole (part_choice.py), once pushed."""
        return self._chooses(bset) and self.choice.mode_of(t)

    def parts_from_grad(self, bset, t):
        """Whether step t's round of the set is synchronous and known, before it is pushed, to
        go in parts (the job's choice made, or no choice: rank-order parts): then each part
        takes g(t) from grad_buf and the buckets with parts skip comm_buf (one copy of the
        gradient, not two: 9 ms of a 2-core worker's CPU a round on Inception-BN)."""
        return not (self.schedule.compressed(t) or self.schedule.delayed(t) or bset.device) and \
            any(b.parts for b in bset.buckets) and (self.choice is None or self.choice.decided is False)

    def went_in_parts(self, bset, t):
        """Whether step t's round of the set, once pushed, went part by part: each part's W is
        in its own array, where the parameters can take it as it comes (copied into the
        bucket's comm_buf too, but behind every earlier part's copy there)."""
        return not (self.schedule.compressed(t) or bset.device or self._went_whole(bset, t)) and \
            any(b.parts for b in bset.buckets)

    @classmethod
    def fp32_units(cls, bset, whole=False):
        """[(bucket index, unit)] in the order an fp32 round pushes them: each bucket, or where
        buckets have parts, the buckets' parts in turn (every bucket's first part, then every
        second part, ...). A bucket's parts share its server: pushed one after another, they
        kept one server's NIC busy while the others idled (CD-SGD's correction at 8 + 2 took as
        long in parts as whole); in turn they go to every server, as consecutive buckets do.
        whole: every bucket whole (part_choice.py)."""
        units = [cls.units(b, whole) for b in bset.buckets]
        return [(i, us[j]) for j in range(max(map(len, units), default=0)) for i, us in enumerate(units) if j < len(us)]

    def _push_fp32(self, bset, u, i, t, window, tracked, keep):
        """The fp32 round of u (bucket i, or one of its parts): push g(t) with this worker's
        proof, W(t+1) coming back into u's comm_buf (for a part, then into its bucket's).
        Returns the bytes pushed."""
        nbytes = self.fp32_bytes(u, bset)
        earlier = window.behind(u, nbytes)
        with self.tracer.span("push fp32", bucket=i, step=t):
            if u.whole is None:  # (a part's g(t) is in already)
                bset.fp32_to_comm(u)
            self.backend.seal(u, tracked)
            if keep:
                u.comm.copyto(u.loc)  # before W comes back over it
            if self._rows_key(u) is None:  # one request: W(t+1) comes back as its answer
                if earlier:  # MXNet's engine holds the push back, not this thread (see _follow)
                    self._follow(earlier, u, i, t)
                self.backend.pushpull(u.weight_key, u.comm_wire)
            else:  # this worker's row: the server sums the rows in rank order
                self._wait_for(earlier, i, t)  # (push_row copies comm_wire synchronously)
                self.backend.push_row(u.rows_key)
        return nbytes

    def check(self, bset, t):
        """Communication thread, after the flush's pulls are issued and before the main thread
        may read what they bring: each bucket's round was applied by its server (the count
        after the weights went one up), else it is sent again (proofs.WorkerProofs.applied)
        until it is. Returns the follow-up: the proofs of the next rounds."""
        compressed = self.schedule.compressed(t)
        pull_down, tracked = self.schedule.pull_compressed(t), self._tracked(bset, t)
        rounds = [self._round(b) for b in bset.buckets]  # the counts this round brings once applied
        whole = compressed or self._went_whole(bset, t)
        for i, b in enumerate(bset.buckets):
            for u in self.units(b, whole):
                self._check_applied(bset, u, i, t, compressed, pull_down, tracked, rounds)
            if bset.copy is not None and tracked:
                with self.tracer.span("track", bucket=i, step=t):
                    bset.copy.track(i, b)  # V += the codes of W - V, as the server did; comm_buf = V
            elif bset.copy is not None and not pull_down:
                with self.tracer.span("re-sync", bucket=i, step=t):
                    bset.copy.start(i, b.comm)  # an fp32 pull: V := W
        if pull_down:  # the decodes ran on the engine: check them (a corrupt payload stops here)
            with self.tracer.span("decode pull", step=t):
                bset.wait_comm()
            for i in range(len(bset.buckets)):
                bset.copy.collect(i, rounds[i])
        after = self._tracked(bset, t + 1)  # (sealed as what the next round is)
        # (a part's proof is sealed again only after its own round: a 2-bit or whole round leaves it as it was)
        return lambda: [self.backend.seal_next(u, after) for b in bset.buckets
                        for u in [b] + (b.parts if not whole else [])]

    def _check_applied(self, bset, u, i, t, compressed, pull_down, tracked, rounds):
        """u's round (bucket i's, or one of its parts') was applied, else it is sent again until it is."""
        for attempt in range(MAX_RESENDS + 1):
            with heartbeat.waiting("step %d's pull of bucket %d (key %d, server %d)" % (t, i, u.weight_key, u.server)):
                if self.backend.bucket_applied(u, down=pull_down):
                    return
            dropped(self.backend.rank, "round %d of bucket %d (key %d, step %d)" % (
                self.backend.rounds.get(u.weight_key, 0), i, u.weight_key, t), attempt)
            self.resent += 1
            with self.tracer.span("resend", bucket=i, step=t):
                self.backend.resend(u, compressed, self._kept_gradient(bset, u, t), pull_down, tracked,
                                    rows=self._rows_key(u) is not None)
                if u.whole is not None:  # the W it brings, into the bucket's comm_buf
                    bset.part_to_comm(u)
                if pull_down:  # the first decode found the old count and changed nothing
                    bset.copy.issue(i, rounds[i])

    def _tracked(self, bset, t):
        """Is step t's round of the set a tracked fp32 round (Schedule.pull_tracked; only where
        the set holds V)?"""
        return bset.copy is not None and self.schedule.pull_tracked(t)

    def _follow(self, earlier, b, i, t):
        """Bucket b's pushpull goes out once the W of the earlier buckets is in: an engine
        operation that reads their comm_wire and writes b's, ahead of the push that reads it.
        The communication thread goes on pushing: blocking it in Python for each W (as first
        built) made S-SGD's round 1.16x slower at 10 Gbit/s (Inception-BN, 4 + 1), where the
        wait's wake-ups, not the wire, set the pace. Traced as 'window' (an instant event)."""
        self.backend.push_after([a.comm_wire for a in earlier], b.comm_wire)
        now = self.tracer.now_us()
        self.tracer.add("window", now, now, bucket=i, step=t, after=[a.weight_key for a in earlier])

    def _wait_for(self, earlier, i, t):
        """A rows push copies comm_wire synchronously: wait here for the earlier buckets' W."""
        for a in earlier:
            with self.tracer.span("window", bucket=i, step=t, after=[a.weight_key]), heartbeat.waiting(
                    "step %d's W of key %d (server %d), to push the next bucket" % (t, a.weight_key, a.server)):
                a.comm_wire.wait_to_read()  # its pull wrote W there

    def _rows_key(self, b):
        """The key of the bucket's fp32 rows this round pushes to, or None (the weight key)."""
        return b.rows_key if self.fp32_rows else None

    def _round(self, b):
        """The server's count of the bucket's rounds once this one is applied."""
        return self.backend.rounds.get(b.weight_key, 0) + 1

    def _kept_gradient(self, bset, b, t):
        """Where g(t) of a bucket still is for an fp32 round sent again: in grad_buf for a
        synchronous step (the main thread waits for this round before the next backward), in
        loc_buf for a delayed one (free until the next step's comm_to_loc: push keeps g(t)
        there, one copy per delayed fp32 round, since MXNet pulls into the array pushed). With
        device-resident buckets, in dev_comm (nothing is pulled into it; the next step's
        grad_to_comm waits for this round to be ready)."""
        if bset.device:
            return b.dev_comm
        return b.loc if self.schedule.delayed(t) else b.grad

    def fp32_bytes(self, b, bset):
        return 4 * (b.size + bset.region) + (8 if self._rows_key(b) is not None else 0)  # (+ the row index)

    def payload_bytes(self, b, bset):
        pull_flag = 1 if bset.copy is not None else 0  # 2-bit pulls: the round's pull flag
        return 4 * (b.words + pull_flag + (auth.TAG_FLOATS if self.backend.region else 0)) + 8  # + the row index

    def _pull(self, bset, t, i, b, acked, start, down=False):
        """Issue the pull of b's W(t+1) (bucket i's, or one of its parts') into its comm_wire
        (or with down, of the codes of W(t+1) - V into down_buf) right behind its push, without
        waiting, so that the pulls of the first buckets are on the wire while the later ones are
        still quantized and pushed.
        An fp32 round to the weight key pulls nothing more (acked is None): its pushpull brings
        W back. A pull of the weight key is not ordered after a push to another key (acked: the
        bucket's payload key or rows key): request the acknowledgement, and have MXNet's engine
        issue the pull once it is in."""
        if acked is None:
            return
        self.backend.request_acks([acked])
        self.backend.trace_ack(self.tracer, acked, start, step=t)  # traced: when the server had applied the push
        self.backend.pull_after_acks([(acked, b.down_key, b.down_wire) if down else (acked, b.weight_key, b.comm_wire)])
        if down:  # V += codes; comm_buf = V, once pulled
            bset.copy.issue(i, self._round(b))

    def bytes_of_step(self, sets, t):
        """Bytes this worker pushes at step t by the schedule and the buckets (what push counts
        into bytes_by_step once the step's rounds have run)."""
        compressed = self.schedule.compressed(t)
        return sum(self.payload_bytes(b, bset) if compressed else
                   sum(self.fp32_bytes(u, bset) for u in self.units(b, self._went_whole(bset, t)))
                   for bset in sets for b in bset.buckets)
