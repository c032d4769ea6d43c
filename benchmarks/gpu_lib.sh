# Common start of the device scripts (source it from a script in benchmarks/):
# strict mode, the repository root as working directory and on PYTHONPATH,
# results under $OUT/r ($R), el() printing the elapsed seconds, and the GPU,
# driver, clock, torch and Triton versions in $R/env.txt.
set -u -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONPATH="$PWD" PYTHONUNBUFFERED=1 MPLBACKEND=Agg
OUT="${OUT:-/tmp/out}"; R="$OUT/r"; mkdir -p "$R"
t0=$(date +%s); el() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$R/env.txt" 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$R/env.txt" 2>&1
