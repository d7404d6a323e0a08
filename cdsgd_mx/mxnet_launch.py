"""python -m cdsgd_mx.mxnet_launch: the command's old name, kept; the module is cdsgd_mx.cluster.mxnet_launch."""
from cdsgd_mx.cluster.mxnet_launch import main

if __name__ == "__main__":
    main()
