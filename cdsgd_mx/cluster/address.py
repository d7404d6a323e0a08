"""Which address a node of a multi-host job is reached at.

ps-lite announces each server's and worker's address to the others. Unless told
(DMLC_NODE_HOST, DMLC_INTERFACE) it takes the first interface with an IPv4 address that is not
loopback, whichever network that is: on a host with a management network listed first, the
others then cannot reach the node and the job waits forever. The address on the route to the
scheduler is the one the rest of the job can reach, so a node that was told nothing announces
that one. The launcher finds its own (the scheduler's) address the same way, on the route to
the first host.
"""
import os
import socket

# the scheduler's exit code when its port was taken between the launcher's pick and its bind
# (ps-lite gives the scheduler no second try): the launcher starts the job again on another port
EXIT_PORT_TAKEN = 76


def towards(peer, port=9):
    """This machine's source address on the route to peer (an address or a resolvable name);
    None where there is no route or the name does not resolve. No packet is sent."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((peer, port))
            return s.getsockname()[0]
    except (OSError, UnicodeError):
        return None


def announce_route(environ=os.environ):
    """For a worker or server told neither DMLC_NODE_HOST nor DMLC_INTERFACE: set DMLC_NODE_HOST
    to the address on the route to the scheduler (DMLC_PS_ROOT_URI). Before MXNet starts its
    kvstore, which reads it then. Returns the address set, else None."""
    if environ.get("DMLC_ROLE") not in ("worker", "server") or environ.get("DMLC_NODE_HOST") \
            or environ.get("DMLC_INTERFACE") or not environ.get("DMLC_PS_ROOT_URI"):
        return None
    found = towards(environ["DMLC_PS_ROOT_URI"], int(environ.get("DMLC_PS_ROOT_PORT") or 9))
    if found:
        environ["DMLC_NODE_HOST"] = found
    return found
