"""engine_worker.py as a user would change a script for a launcher that runs one command for
every role (MXNet's tools/launch.py): its only change is `import cdsgd_mx` first. Its arguments
come in ENGINE_WORKER_ARGS (a JSON list): tools/launch.py parses a command's own options again
and stops at any it could take for an abbreviation of its own (--k: --kube-...)."""
import cdsgd_mx  # noqa: F401  (on a server or the scheduler: runs ours and exits)
import json
import os
import runpy
import sys

sys.argv = [sys.argv[0]] + json.loads(os.environ["ENGINE_WORKER_ARGS"])
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "engine_worker.py"), run_name="__main__")
