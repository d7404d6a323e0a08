"""A step handed over one parameter per call (MXNet's Module, gluon's own Trainer), collected
into the buckets: one round per bucket, not per parameter (issue 39), as Horovod's fusion buffer
collects tensors until they are all there.

- fuse_fresh(): at the first pushpull, the parameters that came in one broadcast() call each
  (Module and gluon broadcast one at a time) are planned again as one bucket set. Nothing has
  run yet (no round, no optimizer state, W(0) everywhere), so this is a broadcast of the weights
  the parameters already hold.
- collect(sets, keys): a call's gradients go into their set's grad_buf; a set steps once every
  one of its parameters has come in this step (the call that brings the last one runs it).
- end_of_step(): a step ended (a key came again) with a set still waiting for some of its
  parameters. At the first step that means parameters that are never pushed (Module's
  fixed_param_names, gluon's grad_req='null'): the set is planned again without them, its
  first step runs now, and one line says that the forward/backward just before this ran at the
  weights of step 0 (once). Later it means a step left parameters out: that stops, in one line.

API: CallFusion(kv).fuse_fresh() / collect(sets, keys) -> sets complete / end_of_step(step).
"""
import sys

from cdsgd_mx.worker.config import ConfigError


class CallFusion:
    def __init__(self, kv):
        self.kv = kv
        self.arrived = {}       # bucket set -> the keys it has received in the current step
        self.abandoned = 0      # slots of sets planned again: their state ids stay used

    def fuse_fresh(self):
        """One bucket set for every one-parameter set that has not stepped yet (before the first
        round: the servers hold only the weights every worker already has)."""
        kv = self.kv
        fresh = [bset for bset in kv._sets[kv._registered:] if len(bset.keys) == 1]
        if len(fresh) < 2 or len(fresh) != len(kv._sets) - kv._registered:
            return
        self._replan(fresh, [[k for bset in fresh for k in bset.keys]])

    def collect(self, sets, keys):
        """The sets whose every parameter has now come in this step (each at most once)."""
        done = []
        for bset in sets:
            got = self.arrived.setdefault(bset, set())
            got.update(k for k in keys if k in bset.outs)
            if len(got) == len(bset.keys):
                done.append(bset)
                del self.arrived[bset]
        return done

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
            arrived = [k for k in bset.keys if k in got]
            sys.stdout.write("cdsgd_mx: parameters %s are never pushed (fixed, or grad_req='null'): fusing the other %d "
                             "from here on; the forward/backward just before this ran at step 0's weights, once\n"
                             % (self.kv._names(missing), len(arrived)))
            sys.stdout.flush()
            grads = {k: bset.grad_views[k].copy() for k in arrived}
            new = self._replan([bset], [arrived, missing])
            new[0].gather({k: [g] for k, g in grads.items()})
            run.append(new[0])
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
