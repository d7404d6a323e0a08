"""A step handed over one parameter per call (MXNet's Module, gluon's own Trainer), collected
into the buckets: one round per bucket, not per parameter (issue 39), as Horovod's fusion buffer
collects tensors until they are all there.

- fuse_fresh(): at the first pushpull, the parameters that came in one broadcast() call each
  (Module and gluon broadcast one at a time) are planned again as one bucket set. Nothing has
  run yet (no round, no optimizer state, W(0) everywhere), so this is a broadcast of the weights
  the parameters already hold.
- collect(sets, keys): a call's gradients go into their set's grad_buf; a set steps once every
  one of its parameters has come in this step (the call that brings the last one runs it).
  At a set's first step the store does not yet know which of its parameters a step brings, and
  the next forward must not wait for the next step to find out (stock MXNet updates each
  parameter in its own call). So the first step ends at the call that brings the last
  parameter that can come:
  * gluon's parameters carry their gradient (autograd marks it on the data) unless
    grad_req='null' (BatchNorm's running statistics, frozen layers): those are never pushed;
  * gluon's Trainer and Module push in the order they broadcast, so a parameter the step
    passed over without pushing (Module's fixed_param_names) is not coming in this step.
  The set is then planned again without the parameters that did not come (they keep a set of
  their own, which runs if one of them is ever pushed) and its step runs in that same call.
- end_of_step(): a step ended (a key came again) with a set still waiting for some of its
  parameters. At the first step that means the rules above could not tell (the last
  parameter in broadcast order is never pushed and carries no gradient mark, or calls came out
  of order): the set is planned again without them, its first step runs now, and one line says
  that the forward/backward just before this ran at the weights of step 0 (once). Later it
  means a step left parameters out: that stops, in one line.

API: CallFusion(kv).broadcast(keys, outs) / fuse_fresh() / collect(sets, keys) -> sets complete /
end_of_step(step).
"""
import sys

from cdsgd_mx.worker.config import ConfigError


class CallFusion:
    def __init__(self, kv):
        self.kv = kv
        self.arrived = {}       # bucket set -> the keys it has received in the current step
        self.abandoned = 0      # slots of sets planned again: their state ids stay used
        self.marked = set()     # keys whose weights carried a gradient mark when first broadcast

    def broadcast(self, keys, outs):
        """Parameters broadcast: note which carry autograd's gradient mark (gluon's, unless
        grad_req='null'), before a call can hand over other arrays as out (update_on_kvstore=False
        gives the gradients)."""
        self.marked.update(k for k, o in zip(keys, outs) if o[0].grad is not None)

    def fuse_fresh(self):
        """One bucket set for every one-parameter set that has not stepped yet (before the first
        round: the servers hold only the weights every worker already has)."""
        kv = self.kv
        fresh = [bset for bset in kv._sets[kv._registered:] if len(bset.keys) == 1]
        if len(fresh) < 2 or len(fresh) != len(kv._sets) - kv._registered:
            return
        self._replan(fresh, [[k for bset in fresh for k in bset.keys]])

    def collect(self, sets, keys):
        """The sets whose every parameter that can come has now come in this step (each at
        most once). A set at its first step that is complete without some of its parameters
        is planned again without them: the new set is returned in its place."""
        done = []
        for bset in sets:
            got = self.arrived.setdefault(bset, set())
            got.update(k for k in keys if k in bset.outs)
            if len(got) == len(bset.keys):
                done.append(bset)
                del self.arrived[bset]
            elif self.kv.engine.position(bset)[0] == 0 and self._first_step_complete(bset, got, keys):
                del self.arrived[bset]
                done.append(self._split(bset, got))
        return done

    def _first_step_complete(self, bset, got, keys):
        """Whether the parameters `got` are all that a first step brings (see the docstring):
        every parameter that carries a gradient mark (where any does), after the last one this
        call brought in broadcast order, has come."""
        at = {k: i for i, k in enumerate(bset.keys)}  # broadcast order
        marked = [k for k in bset.keys if k in self.marked]
        last = max(at[k] for k in keys if k in at)
        return all(k in got or at[k] < last for k in marked or bset.keys)

    def _split(self, bset, got):
        """bset planned again as [the parameters that came, the others]; the first set, with
        their gradients gathered, is what runs this step."""
        arrived = [k for k in bset.keys if k in got]
        missing = [k for k in bset.keys if k not in got]
        grads = {k: bset.grad_views[k].copy() for k in arrived}
        new = self._replan([bset], [arrived, missing])
        new[0].gather({k: [g] for k, g in grads.items()})
        return new[0]

    def end_of_step(self, step):
        """A new step begins (`step`): settle the sets the step before left waiting. Returns
        the sets planned again that must run that step now (with their gradients gathered)."""
        waiting = [(bset, got) for bset, got in self.arrived.items() if got]
        self.arrived = {}
        run = []
        for bset, got in waiting:
            missing = [k for k in bset.keys if k not in got]
            if self.kv.engine.position(bset)[0] > 0:
                raise ConfigError("parameters %s were pushed at earlier steps but not at step %d (their bucket set waits "
                                  "for every parameter it holds every step): push the same parameters every step"
                                  % (self.kv._names(missing), step - 1))
            sys.stdout.write("cdsgd_mx: parameters %s are never pushed (fixed, or grad_req='null'): fusing the other %d "
                             "from here on; the forward/backward just before this ran at step 0's weights, once\n"
                             % (self.kv._names(missing), len(bset.keys) - len(missing)))
            sys.stdout.flush()
            run.append(self._split(bset, got))
        return run

    def _replan(self, old, groups):
        """Bucket sets for `groups` of keys in place of the sets `old`, holding the weights the
        parameters have now (as broadcast() would give them); returns the new sets."""
        kv = self.kv
        outs = {k: bset.outs[k] for bset in old for k in bset.keys}
        kv._registered -= sum(1 for bset in old if kv._sets.index(bset) < kv._registered)
        for bset in old:
            self.abandoned += len(bset.slots)  # (their state ids stay taken: the servers may know them)
            kv._sets.remove(bset)
            for k in bset.keys:
                del kv._set_of[k]
        new = []
        for keys in groups:
            if keys:
                kv.broadcast(keys, [outs[k][0] for k in keys], [outs[k] for k in keys])
                new.append(kv._sets[-1])
        return new
