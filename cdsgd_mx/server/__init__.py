"""What runs on a parameter server: the node (node.py: ps-lite's loop with our controller and
updater) and its global update (global_update.py). `python -m cdsgd_mx.server` starts one."""
