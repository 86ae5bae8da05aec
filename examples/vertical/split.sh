#!/usr/bin/env bash
# Cuts the Wisconsin diagnostic breast cancer data (569 patients, 30 measurements; the CSV
# Debian's python3-sklearn ships) by columns between two organisations that hold records of
# many of the same patients:
#   hospital.csv  patient_id, the 10 *_mean measurements and the diagnosis (the label)
#   lab.csv       patient_id, the 20 *_se and *_worst measurements
# Each keeps a patient with probability 0.82, drawn independently (a fixed pseudo-random
# stream per file, the same files on every run), so about two thirds of the patients are in both (70% of all the ids either holds),
# and each holds patients the other lacks. The rows are in different orders and the ids are
# not row numbers: only private set intersection can line them up.
#   examples/vertical/split.sh OUT_DIR [SOURCE_CSV]
set -euo pipefail
out=${1:?usage: split.sh OUT_DIR [SOURCE_CSV]}
src=${2:-/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv}
[[ -f $src ]] || { echo "no $src: apt-get install python3-sklearn" >&2; exit 2; }
mkdir -p "$out"
names="radius texture perimeter area smoothness compactness concavity concave_points symmetry fractal_dimension"
awk -F, -v out="$out" -v names="$names" '
  function next_u(s) { return (s * 1103515245 + 12345) % 2147483648 }
  BEGIN {
    n = split(names, nm, " ")
    h = "patient_id"; for (i = 1; i <= n; ++i) h = h "," nm[i] "_mean"; print h ",diagnosis" > (out "/hospital.tmp")
    l = "patient_id"; for (i = 1; i <= n; ++i) l = l "," nm[i] "_se"; for (i = 1; i <= n; ++i) l = l "," nm[i] "_worst"
    print l > (out "/lab.tmp")
    sh = 12345; sl = 54321
  }
  NR > 1 {
    id = sprintf("WI-%05d", (NR * 7919) % 100003)   # a record number, not the row
    sh = next_u(sh); sl = next_u(sl)
    if (sh / 2147483648 < 0.82) {
      line = id; for (i = 1; i <= 10; ++i) line = line "," $i
      print line "," ($31 == 0 ? "malignant" : "benign") >> (out "/hospital.tmp")
    }
    if (sl / 2147483648 < 0.82) {
      line = id; for (i = 11; i <= 30; ++i) line = line "," $i
      print line >> (out "/lab.tmp")
    }
  }' "$src"
# Different row orders on the two sides: the lab sorts by id, the hospital keeps intake order.
{ head -1 "$out/lab.tmp"; tail -n +2 "$out/lab.tmp" | sort; } >"$out/lab.csv"
mv "$out/hospital.tmp" "$out/hospital.csv"
rm "$out/lab.tmp"
both=$(comm -12 <(tail -n +2 "$out/hospital.csv" | cut -d, -f1 | sort) <(tail -n +2 "$out/lab.csv" | cut -d, -f1 | sort) | wc -l)
echo "hospital: $(($(wc -l <"$out/hospital.csv") - 1)) patients, lab: $(($(wc -l <"$out/lab.csv") - 1)), in both: $both"
