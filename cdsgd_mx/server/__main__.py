from cdsgd_mx.server.node import main  # python -m cdsgd_mx.server

main()
