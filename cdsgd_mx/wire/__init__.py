"""What crosses the network and the disk: the protocol (keys and payload layouts), proofs and
authentication, the 2-bit pull's payloads, the optimizer spec the servers accept, and the
checkpoint format. Shared by worker and server; imports neither."""
