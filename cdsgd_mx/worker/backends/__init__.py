"""Where a worker's pushes and pulls go, behind one declared interface (base.Backend): MXNet's
parameter server (dist.py: dist_sync, ps-lite) or an in-process server (local.py: kvstore='local'
/ None, the same semantics with one worker). API: create(kvstore); Backend, DistBackend,
LocalBackend; MAX_RESENDS, dropped (the resend rule)."""
from cdsgd_mx.worker.backends.base import MAX_RESENDS, Backend, dropped
from cdsgd_mx.worker.backends.dist import DistBackend
from cdsgd_mx.worker.backends.local import LocalBackend

__all__ = ["Backend", "DistBackend", "LocalBackend", "MAX_RESENDS", "create", "dropped"]


def create(kvstore):
    """The backend of a CDSGD store: kvstore is 'dist_sync', a dist_sync KVStore the script made
    (config.existing_dist_sync), or 'local' / None."""
    if kvstore == "dist_sync" or not isinstance(kvstore, (str, type(None))):
        return DistBackend(kvstore)
    return LocalBackend()
