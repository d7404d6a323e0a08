#!/bin/bash
# The checks a lent GPU machine runs (issue 12, docs/performance.md "The device part of a
# compressed round"): build the CUDA kernels, run the CUDA and device-layer tests, then the device
# benchmark (ResNet-50's 25.6 M values) and the codec's CUDA throughput. That machine has PyTorch
# and CuPy but no MXNet: the tests that need MXNet skip there, with the reason.
# Logs and figures go to $OUT (the device tool's folder) or ./gpu-check.
set -uo pipefail
out=${OUT:-gpu-check}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
# build for this GPU alone unless told otherwise (five architectures take minutes of device time)
if [ -z "${CDSGD_CUDA_ARCHS:-}" ]; then
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '. ')
    [ -n "$cap" ] && export CDSGD_CUDA_ARCHS=$cap
fi
echo "== build (CDSGD_CUDA=1, archs ${CDSGD_CUDA_ARCHS:-all this nvcc has})"
if ! CDSGD_CUDA=1 "$py" setup.py build_ext --inplace > "$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    exit 1
fi
nvidia-smi -L 2>/dev/null | tee "$out/gpu.txt"
echo "== tests"
"$py" -m pytest -q -rs tests/codec/test_codec_cuda.py tests/worker/test_device.py tests/codec/test_codec.py 2>&1 | tee "$out/pytest.log"
tests=$?
echo "== device part of a compressed round (25.6 M values)"
"$py" -m cdsgd_mx.bench.device --values 25600000 --repeats 50 --json "$out/device.json" 2>&1 | tee "$out/device.txt"
echo "== codec throughput on the GPU"
"$py" -m cdsgd_mx.bench.codec --device cuda --sizes 1e6,1e7,1e8,4e8 --json 2>&1 > "$out/codec-cuda.jsonl"
"$py" - "$out/codec-cuda.jsonl" <<'PY' | tee "$out/codec-cuda.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][1:]
print("%-21s %10s %10s %9s %9s" % ("op", "n", "Gelem/s", "TB/s", "of copy"))
for r in rows:
    print("%-21s %10d %10.1f %9.3f %8.0f%%" % (r["op"], r["n"], r["melem_per_s"] / 1e3, r["gb_per_s"] / 1e3,
                                                100 * r["fraction_of_copy"]))
PY
echo "== compute-sanitizer memcheck: the codec's and the device layer's GPU tests (at most 120 s)"
if command -v compute-sanitizer > /dev/null; then
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 "$py" -m pytest -q -x \
        tests/codec/test_codec_cuda.py tests/worker/test_device.py -k "gpu or views_off or match_cpu" \
        2>&1 | tail -25 | tee "$out/sanitizer.log"
    echo "sanitizer exit: ${PIPESTATUS[0]}" | tee -a "$out/sanitizer.log"
else
    echo "compute-sanitizer not found" | tee "$out/sanitizer.log"
fi
exit $tests
