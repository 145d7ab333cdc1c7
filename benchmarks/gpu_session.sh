#!/usr/bin/env bash
# A device session's work on the lent H200, step by step, each step sized to one device call (the lender stops a
# command at 600 s and takes an idle machine back after 30 s, so chain steps in one call where they fit).
#
# From the repository root on this machine: `../shared/tools/gpu-wheels.sh` (sqlalchemy, pydantic: the image
# lacks them) puts wheels in .whl/; carry `.whl` in the device call and run there, for example:
#
#     bash benchmarks/gpu_session.sh gpu-tests-a gate-cost
#     bash benchmarks/gpu_session.sh llama-a
#
# Each step writes its full log under $OUT and prints a short summary (counts, failures, the table). Timeouts per
# step: T_<STEP> (seconds), else the defaults below. Steps:
#
#   gpu-tests-a   the nvidia ops and gate tests (the heaviest GPU files)          ~300 s at -n 14
#   gpu-tests-b   Triton, special values, capture, torch.compile, gemm_mma, gate cost, row kernels
#   rest-tests    every other test file (CPU tests that take the GPU path where one is present)
#   gate-cost     benchmarks/gate_cost.py --target nvidia --breakdown (4096^3 fp16, per solution)
#   host          benchmarks/host_profile.py at 384 x 768 fp16 (per-op host cost, torch callers)
#   llama-a       benchmarks/model_block.py --llama, LLAMA_GRID 0-3, tuning capped (--tune-seconds 2: each key's
#                 gate and again its timing; uncapped it took 170-300 s a configuration, Triton tiles compiled);
#                 NO_TUNE=1 leaves the tuned column out (--no-tune): a half then runs in about 150 s
#   llama-b       the same, LLAMA_GRID 4-7 (float32 included); --table-from joins the two jsonl files
#   triton        gemm_tc --triton (plain, bias+gelu, swiglu), rows_tc, epilogue --quick
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:=out}"
mkdir -p "$OUT"
N=${N:-14}

prep() {
    if [ -d .whl ] && [ ! -d /tmp/site ]; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    fi
    export PYTHONPATH=/tmp/site:$PWD
    export ARBITER_CACHE_DIR=${ARBITER_CACHE_DIR:-/tmp/arbiter-cache}
    nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader 2>/dev/null || true
}

pytest_step() {  # name timeout files...
    local name=$1 limit=$2
    shift 2
    timeout "$limit" python -m pytest -v -n "$N" -p no:cacheprovider -rfE --tb=short "$@" > "$OUT/$name.log" 2>&1
    echo "$name: rc=$? ($(grep -c ' PASSED' "$OUT/$name.log") passed, $(grep -c ' FAILED' "$OUT/$name.log") failed)"
    grep -E '^(FAILED|ERROR) ' "$OUT/$name.log" | cut -c1-300 | head -40
    grep -E '^E  ' "$OUT/$name.log" | cut -c1-300 | sort | uniq -c | sort -rn | head -15
}

GPU_A="tests/candidates/nvidia/test_nvidia_ops.py tests/candidates/nvidia/test_nvidia_gate.py"
GPU_B="tests/candidates/nvidia/test_triton_gpu.py tests/candidates/nvidia/test_triton.py
       tests/candidates/nvidia/test_triton_rows.py tests/candidates/nvidia/test_gpu_special_values.py
       tests/test_capture.py tests/test_torch_compile_gpu.py tests/candidates/nvidia/test_gemm_mma.py
       tests/test_gate_cost.py tests/candidates/nvidia/test_row_kernels.py"

prep
for step in "$@"; do
    case $step in
        gpu-tests-a) pytest_step "$step" "${T_GPU_TESTS_A:-330}" $GPU_A ;;
        gpu-tests-b) pytest_step "$step" "${T_GPU_TESTS_B:-330}" $GPU_B ;;
        rest-tests)
            ignore=()
            for f in $GPU_A $GPU_B; do ignore+=("--ignore=$f"); done
            pytest_step "$step" "${T_REST_TESTS:-330}" tests "${ignore[@]}" ;;
        gate-cost)
            timeout "${T_GATE_COST:-150}" python benchmarks/gate_cost.py --target nvidia --rounds 3 --breakdown \
                --out "$OUT/gate_cost" > "$OUT/gate_cost.log" 2>&1
            echo "gate-cost: rc=$?"; grep -E '^\|' "$OUT/gate_cost.log" ;;
        host)
            timeout "${T_HOST:-120}" python benchmarks/host_profile.py --seq 384 --d 768 -n 1000 --out "$OUT/host" \
                > "$OUT/host.log" 2>&1
            echo "host: rc=$?"; tail -14 "$OUT/host.log" ;;
        llama-a|llama-b)
            configs=$([ "$step" = llama-a ] && echo 0,1,2,3 || echo 4,5,6,7)
            tune=(--tune-seconds "${TUNE_SECONDS:-2}")
            [ "${NO_TUNE:-0}" = 1 ] && tune=(--no-tune)
            timeout "${T_LLAMA:-560}" python benchmarks/model_block.py --llama --configs "$configs" \
                "${tune[@]}" --budget-seconds "${LLAMA_BUDGET:-420}" \
                --compile-budget "${COMPILE_BUDGET:-240}" --out "$OUT/$step" > "$OUT/$step.log" 2>&1
            echo "$step: rc=$?"; grep -E '^[0-9]+x[0-9]+ ' "$OUT/$step.log" | cut -c1-400 ;;
        triton)
            timeout "${T_TRITON:-500}" bash -c "
                python benchmarks/gemm_tc.py --triton --out '$OUT/gemm_tc' &&
                python benchmarks/rows_tc.py --out '$OUT/rows_tc' &&
                python benchmarks/epilogue.py --quick --out '$OUT/epilogue'" > "$OUT/triton.log" 2>&1
            echo "triton: rc=$?"; grep -E '^\|' "$OUT/triton.log" | tail -40 ;;
        *) echo "unknown step: $step (see the header of $0)"; exit 2 ;;
    esac
done
