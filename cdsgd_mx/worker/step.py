"""Algorithm 1's timing: which steps wait for their round and which overlap it with the next
forward/backward, and the communication thread the rounds run on.

    synchronous steps (warm-up before n-1, ssgd, bitsgd): comm_buf = g(t); the round pushes it
        and pulls W(t+1) into comm_buf; the parameters get W(t+1) once it is ready (finish_step);
    delayed steps (odsgd/cdsgd from step n-1 on): wait for W(t) (the previous round's pull),
        loc_buf = W(t), the local update with g(t) gives x(t+1) (eq. 11), then round t goes to
        the communication thread and the step returns.

The engine owns where each bucket set is: its step t and the round in flight whose pull brings
W(t) (checkpoints read and restore them through position/resume), and the training step the
job is at (begin): one count per step through every door, whether a step's parameters come in
one pushpull call (cdsgd_mx.Trainer) or one call per parameter (Module, gluon's own Trainer).

API: StepEngine(rounds, local, tracer, aggregate).begin(keys) / steps / step(bset, held) / finish_step() /
wait_all(sets) / close() / position(bset) / resume(bset, t, in_flight); driven_by_trainer;
comm (the communication thread).
"""
import mxnet as mx

from cdsgd_mx.worker.comm import CommError, Communicator


class StepEngine:
    """Runs each bucket set's next step t as the schedule says (rounds.schedule), on rounds (a
    RoundRunner) and local (a LocalUpdate). held: parameters not updated at this step (no
    worker had a fresh gradient): no local step for them, and their residual kept."""

    def __init__(self, rounds, local, tracer, aggregate=False):
        self.rounds, self.local, self.tracer, self.aggregate = rounds, local, tracer, aggregate
        self.comm = Communicator()
        self.driven_by_trainer = False  # the Trainer calls finish_step once per step
        self._sync_sets = []            # synchronous rounds of this step: parameters = comm_buf after the pull
        self._t = {}                    # bucket set -> its next step (the schedule's t)
        self._in_flight = {}            # bucket set -> the flush after which W(t) is (being) pulled into comm_buf
        self.steps = 0                  # training steps begun (a checkpoint restores it)
        self._stepped = set()           # the parameters (keys) brought in the current training step

    def begin(self, keys):
        """The training step that a pushpull call of these parameters belongs to: (t, whether
        this call begins it). A step brings every parameter once; a call that brings one already
        brought in the current step begins the next one. So the learning-rate schedule, warm-up,
        k-step correction, heartbeats and checkpoints count steps, not calls, whether a step
        comes in one call or in one call per parameter (MXNet's Module pushes them one by one)."""
        begins = not self._stepped or not self._stepped.isdisjoint(keys)
        if begins:
            self.steps += 1
            self._stepped = set()
        self._stepped.update(keys)
        return self.steps - 1, begins

    def restart_steps(self, steps):
        """Go on from `steps` training steps done (checkpoint restore): the next call begins one."""
        self.steps = int(steps)
        self._stepped = set()

    def position(self, bset):
        """(the set's next step t, whether a round is in flight that brings W(t) into comm_buf)."""
        return self._t.get(bset, 0), self._in_flight.get(bset) is not None

    def resume(self, bset, t, in_flight):
        """Continue the set at step t (checkpoint restore); in_flight: W(t) is already in comm_buf
        where a delayed step will wait for it (an empty flush stands for its round)."""
        self._t[bset] = t
        self._in_flight[bset] = self.comm.flush() if in_flight else None

    def step(self, bset, held=()):
        t = self._t.get(bset, 0)
        self._t[bset] = t + 1
        if self.rounds.schedule.delayed(t):
            self._delayed_step(bset, t, held)
        else:
            self._sync_step(bset, t, held)

    def _sync_step(self, bset, t, held):
        """x(t+1) = W(t+1): comm_buf = g(t); push it, pull the new global weights into
        comm_buf; the parameters = comm_buf once the rounds are ready (finish_step). held:
        parameters not updated at this step (no fresh gradient anywhere)."""
        if self._in_flight.get(bset) is not None:  # cannot happen with the schedules above; kept safe
            self.comm.wait(self._in_flight[bset])
            self._in_flight[bset] = None
        from_grad = self.rounds.parts_from_grad(bset, t)
        if not (self.rounds.schedule.compressed(t) and not bset.device):
            bset.grad_to_comm(but_parted=from_grad)  # pushing grad_buf itself would let MXNet pull into it
        # (a compressed round of host buckets quantizes grad_buf itself: one copy less)
        keep = bset.keep_residual(held) if held and self.rounds.schedule.compressed(t) else None
        self.comm.submit(lambda: self.rounds.push(bset, t, keep, from_grad), "step %d" % t)
        self._sync_sets.append(bset)
        if not self.driven_by_trainer:
            self.finish_step()  # the Trainer calls it once per step instead

    def _delayed_step(self, bset, t, held):
        """x(t+1) = W(t) - local step with g(t); round t goes on in the background. held:
        parameters not updated at this step (x(t+1) = W(t) for them)."""
        with self.tracer.span("wait W(t)", step=t):
            if self._in_flight.get(bset) is not None:
                self.comm.wait(self._in_flight[bset])  # W(t) is (being) pulled into comm_buf
            bset.comm_to_loc()                     # the engine orders this after that pull
        with self.tracer.span("local update", step=t):
            restore = bset.hold_loc(held) if held else None
            self.local.step(bset)                  # eq. 11
            if restore:
                restore()
            bset.scatter("loc")
            bset.grad_to_comm()                    # comm_buf = g(t): backward of t+1 may now write grad_buf
        keep = bset.keep_residual(held) if held and self.rounds.schedule.compressed(t) else None
        self._in_flight[bset] = self.comm.submit(lambda: self.rounds.push(bset, t, keep), "step %d" % t)
        if not self.driven_by_trainer:
            self.comm.flush()  # do not wait: the round finishes in the background

    def finish_step(self):
        """End of a Trainer step: let the communication thread finish this step's rounds; wait
        only if some were synchronous (their rounds must be ready before the next forward)."""
        resent = self.rounds.resent  # before the flush: the communication thread may resend at once
        flush = self.comm.flush()
        # aggregate: out is the gradient a resent round would read: wait first. (A 2-bit pull's
        # decode is an engine operation behind the pull, writing comm_buf: ordered like a pull.)
        t = self._t.get(self._sync_sets[0], 1) - 1 if self._sync_sets else None
        if self._sync_sets and self.aggregate:
            with self.tracer.span("wait rounds", step=t):
                self.comm.wait(flush)
            self._weights_to_parameters(t)
        elif self._sync_sets:
            self.comm.wait_issued(flush)
            self._weights_to_parameters(t)  # the engine orders the copies after the pulls
            with self.tracer.span("wait rounds", step=t):
                self.comm.wait(flush)  # the rounds were applied: nothing reads a dropped round's weights
            if self.rounds.resent != resent:  # a round was sent again: copy the weights it brought back
                self._weights_to_parameters(t)
        self._sync_sets = []

    def _weights_to_parameters(self, t):
        with self.tracer.span("weights to parameters", step=t):
            for bset in self._sync_sets:  # (after a round in parts, from the parts' arrays: no wait for the last one)
                bset.scatter("parts" if self.rounds.went_in_parts(bset, t) else "comm")

    def wait_all(self, sets):
        """Wait for every round in flight (e.g. before reading global weights or saving)."""
        self.comm.drain()
        for bset in sets:
            bset.wait_comm()
        mx.nd.waitall()

    def close(self):
        """Finish rounds in flight and stop the communication thread (also run at exit)."""
        if self.comm is not None:
            try:
                self.comm.drain()
            except CommError:
                pass  # already raised to the caller of the failed step
            finally:
                self.comm.close()
                self.comm = None
                mx.nd.waitall()
