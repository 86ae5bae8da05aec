#!/usr/bin/env bash
# CSV ingestion, fedmesh's ReadCsv vs pandas.read_csv, side by side on the same files in one
# run (issue 19). Two generated files (seeded, the same bytes every run):
#   numeric      ROWS x 30 float columns (amounts with 2 decimals, rates with 4, scores
#                with 6, small counts; some negative) + a text label (good/bad)
#   categorical  ROWS x 10 float columns + 4 text columns one-hot encoded by both sides
#                (fedmesh: CsvOptions::categorical; pandas: get_dummies) + the text label
# Each implementation reads each file REPS times after one untimed read (page cache warm);
# the table gives best and median rows/s and MB/s, and fedmesh's ratio to pandas read_csv
# alone and to read_csv + conversion to float32 arrays (what ReadCsv's result is).
#   bench/csv_ingest.sh            # needs fedmesh_csv_ingest (scripts/build.sh) and python3-pandas
# Environment: ROWS (1000000), REPS (5), BUILD (build), DATA_DIR (BUILD/bench/csv-data).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$root/build}
rows=${ROWS:-1000000}
reps=${REPS:-5}
data=${DATA_DIR:-$build/bench/csv-data}
fm="$build/bench/fedmesh_csv_ingest"
[[ -x "$fm" ]] || { echo "build first: FEDMESH_TARGETS=fedmesh_csv_ingest scripts/build.sh" >&2; exit 2; }
py=/usr/bin/python3  # Debian's interpreter: python3-pandas is installed for it
if ! "$py" -c "import pandas" 2>/dev/null; then
  echo "installing python3-pandas (the baseline)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pandas >/dev/null
fi
mkdir -p "$data"
numeric="$data/numeric-$rows.csv"
categorical="$data/categorical-$rows.csv"
if [[ ! -s $numeric || ! -s $categorical ]]; then
  echo "generating $numeric and $categorical" >&2
  "$py" - "$rows" "$numeric" "$categorical" <<'EOF'
import sys
import numpy as np
import pandas as pd

rows, numeric_path, categorical_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rng = np.random.default_rng(19)

def floats(n, prefix):
    # Realistic decimals: rounded values written in their shortest form (12.5, 1234.56).
    kinds = [(lambda: rng.lognormal(6, 1.5, rows), 2),      # amounts
             (lambda: rng.beta(2, 20, rows), 4),             # rates
             (lambda: rng.standard_normal(rows), 6),         # standardised scores
             (lambda: rng.poisson(3, rows).astype(float), 0)]  # counts
    cols = {}
    for j in range(n):
        gen, dec = kinds[j % len(kinds)]
        v = np.round(gen(), dec)
        cols[f"{prefix}{j + 1:02d}"] = v.astype(np.int64) if dec == 0 else v
    return cols

def label():
    return np.where(rng.random(rows) < 0.3, "bad", "good")

df = pd.DataFrame(floats(30, "x"))
df["label"] = label()
df.to_csv(numeric_path, index=False)
df = pd.DataFrame(floats(10, "x"))
df["purpose"] = rng.choice(["car", "furniture", "radio_tv", "education", "business",
                            "repairs", "vacation", "retraining", "appliances", "other"], rows)
df["region"] = rng.choice([f"region_{k:02d}" for k in range(20)], rows)
df["channel"] = rng.choice(["branch", "online", "phone"], rows)
df["housing"] = rng.choice(["own", "rent", "free"], rows)
df["label"] = label()
df.to_csv(categorical_path, index=False)
EOF
fi

field() { sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
echo "machine: $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ); rows $rows, reps $reps"
printf "%-12s %-26s %7s %12s %12s %9s %9s\n" file impl MB rows/s_best rows/s_med MB/s_best MB/s_med
for kind in numeric categorical; do
  f="$data/$kind-$rows.csv"
  cat_flags=() py_flags=()
  if [[ $kind == categorical ]]; then
    cat_flags=(--categorical purpose,region,channel,housing)
    py_flags=(--categorical purpose,region,channel,housing)
  fi
  fm_line=$("$fm" "$f" --label-column label --label-values good,bad --reps "$reps" "${cat_flags[@]}")
  mapfile -t py_lines < <("$py" "$root/bench/csv_ingest.py" "$f" --label-column label \
                            --label-values good,bad --reps "$reps" "${py_flags[@]}")
  for l in "$fm_line" "${py_lines[@]}"; do
    printf "%-12s %-26s %7s %12s %12s %9s %9s\n" "$kind" "$(field impl <<<"$l" | tr -d '"')" \
      "$(field mb <<<"$l")" "$(field rows_per_s <<<"$l")" "$(field rows_per_s_median <<<"$l")" \
      "$(field mb_per_s <<<"$l")" "$(field mb_per_s_median <<<"$l")"
  done
  fm_w=$(field features <<<"$fm_line") py_w=$(field features <<<"${py_lines[1]}")
  [[ $fm_w == "$py_w" ]] || echo "  warning: feature widths differ: fedmesh $fm_w, pandas $py_w" >&2
  f_best=$(field rows_per_s <<<"$fm_line")
  echo "  $kind: fedmesh / pandas read_csv = $(ratio "$f_best" "$(field rows_per_s <<<"${py_lines[0]}")")x;" \
    "fedmesh / pandas read_csv+to_numpy = $(ratio "$f_best" "$(field rows_per_s <<<"${py_lines[1]}")")x (best of $reps)"
done
