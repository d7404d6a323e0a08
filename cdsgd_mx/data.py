"""python -m cdsgd_mx.data: the command's old name, kept; the module is cdsgd_mx.experiments.data."""
import sys

from cdsgd_mx.experiments.data import main

if __name__ == "__main__":
    sys.exit(main())
