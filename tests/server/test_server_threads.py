"""How many threads a server's codec passes use (server/node.py: server_threads): 1, or
CDSGD_SERVER_THREADS; a bad value stops the server in one line. That the passes give the same
bits on any count is tests/codec's (one and two threads against the references)."""
import os
import subprocess
import sys

import pytest

from cdsgd_mx.server.node import SERVER_THREADS, server_threads


def test_one_thread_unless_told():
    assert server_threads({}) == 1
    assert server_threads({SERVER_THREADS: "3"}) == 3


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5", ""])
def test_a_bad_count_is_refused_by_name(value):
    with pytest.raises(ValueError, match="CDSGD_SERVER_THREADS must be an integer >= 1, got %r" % value):
        server_threads({SERVER_THREADS: value})


def test_a_server_with_a_bad_count_stops_in_one_line(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("ab" * 16)
    secret.chmod(0o600)
    env = dict(os.environ, DMLC_ROLE="server", CDSGD_SERVER_THREADS="many", CDSGD_SECRET_FILE=str(secret),
               DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT="1", DMLC_NUM_WORKER="1", DMLC_NUM_SERVER="1")
    proc = subprocess.run([sys.executable, "-m", "cdsgd_mx.server"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.strip() == "cdsgd_mx server: CDSGD_SERVER_THREADS must be an integer >= 1, got 'many'"


def test_the_launcher_hands_the_count_to_every_node():
    from cdsgd_mx.cluster.launch import FORWARDED
    assert SERVER_THREADS in FORWARDED
