"""cdsgd-mx: CD-SGD for Apache MXNet 1.9.1's parameter server.

The codec (cdsgd_mx.codec) is the foundation: threshold 2-bit quantization with error-feedback
residuals, MXNet's packed layout, and the wire format that carries codes through the server.
"""
__version__ = "0.1.0"
