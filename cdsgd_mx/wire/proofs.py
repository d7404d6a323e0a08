"""The push-proof protocol, both sides: every round of a key carries each worker's MAC tag for
the round's count, a server acts on the round only when every tag checks, and writes the new
count after the data, where the workers' pulls read it (docs/design.md "Authenticated pushes";
the MACs themselves are auth.py's).

Worker side, WorkerProofs: seal(bucket) before a push, bucket_applied(bucket) / applied(group,
status) after the pull (False: the server dropped the round, send it again), seal_next(bucket)
after an applied round, unseal(bucket) where a pull overwrote the regions.
Server side, ServerProofs: proven(key, sum, n, announced) / proven_rows(pk, wk, n, rows, ranks)
(one_row_each(what, ranks, width, expected) for fp32 rows) before an update, count_round(group,
stored, n) after it.

API: WorkerProofs(session_keys, rank, num_workers).seal / seal_next / bucket_applied / applied /
region_for; ServerProofs(session, num_workers, drop).proven / proven_rows / one_row_each / count_round;
unseal.
"""
import time

import numpy as np

from cdsgd_mx.wire import auth, protocol
from cdsgd_mx import codec


FP32, FP32_TRACKED = "fp32", "fp32 tracked"  # the MAC's kind for an fp32 round: V := W, or V += codes
                                             # of W - V on both sides (2-bit pulls: pull_compression.py)


def unseal(bucket):
    """The bucket's proof regions no longer hold a proof (a pull or a restore wrote them)."""
    bucket.sealed_for = None


class WorkerProofs:
    """This worker's count of each group's applied rounds (a bucket's weight key, or a lone key)
    and the tags it pushes with them. session_keys: one per server (auth.session_key)."""

    def __init__(self, session_keys, rank, num_workers):
        self.session_keys, self.rank = session_keys, rank
        self.region = num_workers * auth.TAG_FLOATS  # floats of proof after each pushed array
        self.rounds = {}           # group -> its rounds the servers applied, as this worker saw
        self.payload_regions = {}  # payload key -> the proof's part of this worker's payload row

    def _session(self, group):
        """The session key of the server that holds `group` (MXNet's placement rule; a bucket's
        payload key shares its weight key's server)."""
        return self.session_keys[protocol.server_of(group, len(self.session_keys))]

    def region_for(self, group, n, kind="fp32"):
        """This worker's proof region for the next round of `group` (n data values): its tag in
        its own slot, zeros in the others' (the server sums the workers' pushes)."""
        region = np.zeros(self.region, np.float32)
        at = self.rank * auth.TAG_FLOATS
        region[at:at + auth.TAG_FLOATS] = auth.tag(self._session(group), kind, self.rank, self.rounds.get(group, 0),
                                                   group, n)
        return region

    def seal(self, bucket, tracked=False):
        """Before a round of the bucket is pushed: its proof after the data in comm_buf and after
        the codes in this worker's payload row. Normally already written, off the critical path,
        after the check of the round before (seal_next); written again for a tracked fp32 round
        (the servers learn from its proof's kind that V follows W by codes, not V := W)."""
        if bucket.sealed_for != (self.rounds.get(bucket.weight_key, 0), tracked):
            self.seal_next(bucket, tracked)

    def seal_next(self, bucket, tracked=False):
        """Write both proofs for the bucket's next round: synchronous copies into the regions,
        which no engine op reads or writes until the next push (pulls come after it)."""
        wk, count = bucket.weight_key, self.rounds.get(bucket.weight_key, 0)
        bucket.comm_region._sync_copyfrom(self.region_for(wk, bucket.size, FP32_TRACKED if tracked else FP32))
        if bucket.payload_key in self.payload_regions:
            self.payload_regions[bucket.payload_key]._sync_copyfrom(
                auth.tag(self._session(wk), "codes", self.rank, count, wk, bucket.size))
        bucket.sealed_for = (count, tracked)

    def applied(self, group, status):
        """Whether the server applied this worker's last round of `group`: the count of applied
        rounds that the pull brought back after the data went one up (this worker then counts it
        too). It stays put when the server dropped the round: a push that is not the job's
        reached it, and MXNet's server, which counts pushes per key before any check, closed the
        round with it, one of the job's pushes short. The caller then sends its push again: the
        pushes of the dropped round come again, the one it left out is already there, and the
        next round of the key holds every worker's push once."""
        count = self.rounds.get(group, 0)
        if status == count + 1:
            self.rounds[group] = count + 1
            return True
        if status == count:
            return False
        raise RuntimeError("the server of key %d answered round %d with a count of %g applied rounds: the rounds "
                           "of this worker and the server's are out of step" % (group, count, status))

    def bucket_applied(self, bucket, down=False):
        """applied() with the count the pull brought back after the bucket's weights, or with
        down after the codes of its 2-bit pull (waits for the pull)."""
        status = bucket.down_status if down else bucket.comm_status
        return self.applied(bucket.weight_key, float(status.asnumpy()[0]))


class ServerProofs:
    """A server's count of each group's applied rounds, and its check of every round's tags.
    session: this server's session key (None in process: no proofs); drop(why) counts and logs a
    message that is not the job's and returns False."""

    def __init__(self, session, num_workers, drop):
        self.session, self.num_workers, self.drop = session, num_workers, drop
        self.region = num_workers * auth.TAG_FLOATS if session is not None else 0
        self.rounds = {}          # group -> rounds applied: the count pulls bring back
        self._status = {}         # the same -> the stored value the count is written into (codec.writable)
        self.seconds = 0.0        # time spent checking proofs and writing counts (the benchmark reports it)
        self.cpu_seconds = 0.0    # the same in this thread's CPU time (without waiting for a core)
        self.counted = 0          # rounds counted

    def proven(self, key, grad, n, announced, kinds=(FP32,)):
        """The kind (of `kinds`) whose tags this round of a dense key (grad: the workers' sum, n
        data values, then the region) holds from every worker for its count, else False: the
        round is dropped (logged, counted), never acted on. announced: a command of the job
        named the key."""
        start = self._clock()
        try:
            if not announced:
                return self.drop("a push to key %d, which no command of the job announced" % key)
            tag_at = [n + r * auth.TAG_FLOATS for r in range(self.num_workers)]
            ranks = range(self.num_workers)
            for kind in kinds:  # (every worker seals a round as the same kind)
                if self._tags_match(kind, key, n, grad, tag_at, ranks):
                    return kind
            # none: name the ranks missing from the kind most workers sealed
            missing = min((self._missing(k, key, n, grad, tag_at, ranks) for k in kinds), key=len)
            return self._dropped("key %d" % key, key, missing)
        except Exception as e:  # a shape no worker of the job pushes
            return self.drop("a push to key %d that is not the job's (%s)" % (key, e))
        finally:
            self._clocked(start)

    def proven_rows(self, pk, wk, n, wire, row_ids, extra=0):
        """Whether every worker pushed exactly its own row of payload key pk, each ending with
        its valid tag for this round of the bucket (weight key wk). extra: values between the
        codes and the tag (the pull flag with 2-bit pulls)."""
        start = self._clock()
        try:
            words = codec.packed_size(n) + extra
            ranks = [int(r) for r in (row_ids if isinstance(row_ids, np.ndarray) else row_ids.asnumpy())]
            width = words + auth.TAG_FLOATS
            if not self.one_row_each("payload key %d" % pk, ranks, wire.shape[1], width):
                return False
            return self._tags_check("payload key %d" % pk, "codes", wk, n, np.ascontiguousarray(wire),
                                    [i * width + words for i in range(len(ranks))], ranks)
        except Exception as e:
            return self.drop("a push to payload key %d that is not the job's (%s)" % (pk, e))
        finally:
            self._clocked(start)

    def one_row_each(self, what, ranks, width, expected_width):
        """Whether a round of a row_sparse key (`what`) holds exactly one row of expected_width
        values from every worker rank (ranks: its rows' ids), else it is dropped: a push from
        outside the job took a place in it, or summed into a worker's row."""
        if width != expected_width or sorted(ranks) != list(range(self.num_workers)):
            return self.drop("a push to %s that is not the job's (rows %s of %d values)" % (what, ranks, width))
        return True

    def _tags_check(self, what, kind, group, n, values, tag_at, ranks):
        """values (the round's sum, or the payload rows; waited for) must hold at each offset of
        tag_at the tag of the matching rank's MAC for this round of `group`, else the round is
        dropped. One native call for the round (codec.tags_match); worker by worker only to name
        the ones missing."""
        if self._tags_match(kind, group, n, values, tag_at, ranks):
            return True
        return self._dropped(what, group, self._missing(kind, group, n, values, tag_at, ranks))

    def _dropped(self, what, group, missing):
        return self.drop("round %d of %s without the job's proof from worker rank %s (a push from outside the "
                         "job?); not applied" % (self.rounds.get(group, 0), what, ", ".join(map(str, missing))))

    def _macs(self, kind, group, n, ranks):
        """Each rank's MAC of `kind` for this round of `group`."""
        count = self.rounds.get(group, 0)
        return [auth.mac_bytes(self.session, kind, r, count, group, n) for r in ranks]

    def _tags_match(self, kind, group, n, values, tag_at, ranks):
        """Whether every rank's tag of `kind` for this round of `group` is in values: one native call."""
        return codec.tags_match(values, tag_at, b"".join(self._macs(kind, group, n, ranks)))

    def _missing(self, kind, group, n, values, tag_at, ranks):
        """The ranks whose tag of `kind` for this round of `group` is not in values."""
        macs = self._macs(kind, group, n, ranks)
        return [r for r, at, m in zip(ranks, tag_at, macs) if not codec.tags_match(values, [at], m)]

    def count_round(self, group, stored, n, down=None):
        """One more round of `group` applied: its count goes after the data, where pulls read it.
        Written in place once the update is done (the caller waited for the stored array), before
        the handler returns and the server answers. down: (the down key's stored array, its data
        values) with 2-bit pulls: the count goes there too (a compressed pull reads it there)."""
        start = self._clock()
        self.rounds[group] = self.rounds.get(group, 0) + 1
        self.counted += 1
        where = self._status.get(group)
        if where is None:  # MXNet keeps a key's stored array for the job's life: one capsule serves
            where = self._status[group] = codec.writable(stored)
        codec.set_value(where, n, self.rounds[group])
        if down is not None:
            there = self._status.get(("down", group))
            if there is None:
                there = self._status[("down", group)] = codec.writable(down[0])
            codec.set_value(there, down[1], self.rounds[group])
        self._clocked(start)

    @staticmethod
    def _clock():
        return time.perf_counter(), time.thread_time()

    def _clocked(self, start):
        """Add the time since start (from _clock) to the proofs' wall and CPU time."""
        self.seconds += time.perf_counter() - start[0]
        self.cpu_seconds += time.thread_time() - start[1]
