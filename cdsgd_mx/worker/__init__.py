"""What runs in a worker: the KVStore face (kvstore.py), buckets, the step engine and its rounds,
the local update, guards, gluon's rules, compression, engine operations, the device layer, the
communication thread, the backends, the job's checkpoints and the configuration they check."""
