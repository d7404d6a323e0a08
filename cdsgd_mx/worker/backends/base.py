"""The declared interface of a backend (Backend) and what both backends share: the servers'
register command and the resend rule. API: Backend (abstract), registration(...), MAX_RESENDS,
dropped(rank, what, attempt)."""
import abc
import sys

from cdsgd_mx.wire.pull_compression import pieces_of


def rows_units(buckets):
    """The buckets and parts that have an fp32 rows key (fp32_sum='rank'; a bucket with parts has
    none of its own, each part one)."""
    return [u for b in buckets for u in [b] + b.parts if u.rows_key is not None]


def registered(buckets, compressing, rows):
    """The buckets whose weights the server records (their next round only registers them):
    every one where payloads or rank-order rows update them, else those with parts (a part's
    round steps its stretch of its bucket's weights)."""
    return [b for b in buckets if compressing or rows or b.parts]


def registration(buckets, threshold, compressing, aggregate=False):
    """The servers' register command: each bucket's parameters (slots: state id, range in the
    weight key, lr_mult, wd_mult), its parts (buckets.partition: each part's weight key, its
    stretch of the bucket's and its own slots), when compressing its payload key, with 2-bit pulls its down
    key and its parameters' pieces (pull_compression.py), with fp32_sum='rank' its rows key, and with aggregate the weight
    keys that from now on hold the workers' summed gradient (the workers update). Listed in
    "weights": the keys whose next round only registers them (weight keys first: a down key's V
    starts as its weights)."""
    downs = [b for b in buckets if b.down_key is not None]
    rows = rows_units(buckets)
    parts = [(b, p) for b in buckets for p in b.parts]
    return {"op": "register", "weights": [b.weight_key for b in registered(buckets, compressing, rows)] +
                                         [b.down_key for b in downs] +
                                         [p.weight_key for _, p in parts if p.rows_key is not None],  # (apply_rows)
            "downs": {str(b.down_key): [b.weight_key, b.size, pieces_of(b)] for b in downs},
            "rows": {str(b.rows_key): b.weight_key for b in rows},
            "parts": {str(p.weight_key): [b.weight_key, p.offset - b.offset, p.offset - b.offset + p.size, b.size]
                      for b, p in parts},
            "sum": [u.weight_key for b in buckets for u in [b] + b.parts] if aggregate else [],
            "slots": {str(u.weight_key): [[s.state_id, s.offset - u.offset, s.offset - u.offset + s.size,
                                           s.lr_mult, s.wd_mult] for s in u.slots]
                      for b in buckets for u in [b] + b.parts},
            "payloads": {str(b.payload_key): [b.weight_key, b.size, threshold] for b in buckets} if compressing else {}}


MAX_RESENDS = 100  # a round dropped this often in a row: a flood from outside the job, not a stray push


def dropped(rank, what, attempt):
    """A round the server dropped (a push from outside the job took a place in it): say so on
    this worker; after MAX_RESENDS in a row stop rather than spin."""
    if attempt >= MAX_RESENDS:
        raise RuntimeError("the server dropped %s %d times in a row: pushes from outside the job keep reaching it "
                           "(its log says 'dropped message'); stopping" % (what, attempt + 1))
    sys.stderr.write("cdsgd_mx worker %d: the server dropped %s (a push from outside the job took a place in it); "
                     "sending it again\n" % (rank, what))
    sys.stderr.flush()


class Backend(abc.ABC):
    """What the kvstore asks of a transport: MXNet's parameter server (DistBackend) or the same
    semantics in one process (LocalBackend). Attributes: rank, num_workers, num_servers, region
    (floats of proof after each pushed array, 0 without), rounds (key -> rounds applied, as this
    worker saw)."""

    rank: int
    num_workers: int
    num_servers: int
    region: int

    # -- control: the optimizer, keys, commands, small all-worker exchanges
    @abc.abstractmethod
    def set_optimizer(self, optimizer): """The global optimizer, to every server."""

    @abc.abstractmethod
    def init(self, keys, values): """Keys stored on their servers, with rank 0's values."""

    @abc.abstractmethod
    def init_payloads(self, buckets, pull=False):
        """The buckets' payload keys (2-bit codes, one row per worker; with pull, a row also
        carries the round's pull flag after the codes: pull_compression.PULL_FP32 / PULL_2BIT)."""

    @abc.abstractmethod
    def register(self, buckets, threshold, compressing, aggregate=False): """Tell the servers the buckets' layout."""

    @abc.abstractmethod
    def command(self, msg): """An authenticated command to every server; every worker waits for it."""

    @abc.abstractmethod
    def assign(self, values): """Set global weights {weight key: array} (checkpoint restore)."""

    @abc.abstractmethod
    def gather_rows(self, key, row): """Every worker's row, stacked (start-up agreement)."""

    @abc.abstractmethod
    def exchange(self, row): """(every worker's row, every server's checkpoint result)."""

    @abc.abstractmethod
    def server_message(self, s): """Server s's last checkpoint error, if this process knows it."""

    @abc.abstractmethod
    def open_tally(self, key, width): """A key whose every round stores the workers' sum."""

    @abc.abstractmethod
    def tally(self, key, value): """The sum of every worker's value for this round."""

    @abc.abstractmethod
    def barrier(self): """Wait until every worker reaches this point."""

    @abc.abstractmethod
    def set_learning_rate(self, lr): """The servers' learning rate."""

    @abc.abstractmethod
    def follow_rescale(self, rescale_grad): """A new rescale_grad where the servers can follow it."""

    # -- a round: push (fp32 or codes) with its proof, pull W, check it was applied
    @abc.abstractmethod
    def pushpull(self, key, wire):
        """An fp32 round of a weight key in one request: push wire, and the stored value, once
        the servers applied every worker's push, comes back into wire (no pull request follows
        the push, so none waits behind this worker's later pushes: both directions of the NIC
        carry a round at once)."""

    @abc.abstractmethod
    def push_after(self, earlier, wire):
        """Hold the next push of `wire` back until the pulls into `earlier` (arrays) are in,
        without waiting here (the fp32 round's window, rounds.PushWindow)."""

    @abc.abstractmethod
    def wire_row(self, key): """This worker's row of a payload key, where the codes are encoded."""

    @abc.abstractmethod
    def set_pull(self, key, flag): """The pull flag of this worker's next push to payload key `key`."""

    @abc.abstractmethod
    def push_payload(self, key): """Push this worker's payload row."""

    @abc.abstractmethod
    def push_row(self, key): """Push this worker's row of an fp32 rows key: its bucket's comm_wire (fp32_sum='rank')."""

    @abc.abstractmethod
    def seal(self, bucket, tracked=False):
        """This worker's proof of the bucket's next round, into what it pushes. tracked: an
        fp32 round after which V follows W by codes on both sides (Schedule.pull_tracked)."""

    @abc.abstractmethod
    def request_acks(self, payload_keys): """Ask for the acknowledgements of the payload (or rows) rounds."""

    @abc.abstractmethod
    def wait_acks(self, payload_keys): """Wait until they are in."""

    @abc.abstractmethod
    def pull_after_acks(self, pulls): """[(payload key, weight key, out)]: each pull once its ack is in."""

    @abc.abstractmethod
    def trace_ack(self, tracer, key, start_us, **args): """A trace span for an acknowledgement."""

    @abc.abstractmethod
    def pull(self, key, out): """Pull a key's stored value into out."""

    @abc.abstractmethod
    def bucket_applied(self, bucket, down=False):
        """Whether the servers applied the bucket's round (else resend); down: read the count
        after the codes of a 2-bit pull."""

    @abc.abstractmethod
    def resend(self, bucket, compressed, gradient, pull_down=False, tracked=False, rows=False):
        """Send a dropped round again, and pull (W, or with pull_down the codes of W - V);
        rows: an fp32 round that went to the bucket's rows key."""

    @abc.abstractmethod
    def seal_next(self, bucket, tracked=False): """Ready the proof of the bucket's next round (tracked: see seal)."""
