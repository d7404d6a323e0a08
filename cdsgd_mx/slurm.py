"""python -m cdsgd_mx.slurm: the command's old name, kept; the module is cdsgd_mx.cluster.slurm."""
from cdsgd_mx.cluster.slurm import main

if __name__ == "__main__":
    main()
