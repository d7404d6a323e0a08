"""python -m cdsgd_mx.launch: the command's old name, kept; the module is cdsgd_mx.cluster.launch."""
import sys

from cdsgd_mx.cluster.launch import main

if __name__ == "__main__":
    sys.exit(main())
