"""python -m cdsgd_mx.demo: the command's old name, kept; the module is cdsgd_mx.experiments.demo."""
from cdsgd_mx.experiments.demo import main

if __name__ == "__main__":
    main()
