#!/usr/bin/env bash
# Reproduces the paper's studies end to end: installs (scripts/setup.sh, with label-pfam's pyhmmer),
# then runs `performer reproduce` with these arguments (performer/plans; docs/reproducing.md, "Reproducing the
# paper"), e.g.
#   bash scripts/reproduce.sh                                  # the mini budget, results/
#   bash scripts/reproduce.sh --budget tiny --only fig6        # a quick check on the sample
#   bash scripts/reproduce.sh --status                         # where each job stands
#   bash scripts/reproduce.sh --budget paper --launcher slurm  # one sbatch per job
# `.venv/bin/performer reproduce --help` lists every flag and study.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/performer ] || bash scripts/setup.sh
.venv/bin/python -c "import pyhmmer" 2> /dev/null || .venv/bin/python -m pip install --quiet -c requirements.lock -e '.[labels]'
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
exec .venv/bin/performer reproduce "$@"
