#!/usr/bin/env bash
# Create benchmarks/.venv-hta with Holistic Trace Analysis 0.5.0 (PyPI: holistictraceanalysis).
# HTA 0.5.0 does NOT need torch: its dependencies are jupyterlab, numpy, networkx, pandas,
# plotly, pydot, pytest.  orjson is added for the JSON-decode floor in bench_analyze.py.
# Usage: bash benchmarks/setup_hta_env.sh [PYTHON]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${1:-python3}"
VENV="$HERE/.venv-hta"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "holistictraceanalysis==0.5.0" orjson
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import hta  # noqa: F401
from hta.trace_analysis import TraceAnalysis  # noqa: F401
print("holistictraceanalysis", md.version("holistictraceanalysis"),
      "pandas", md.version("pandas"), "numpy", md.version("numpy"))
PY
