#!/usr/bin/env bash
# Splits the Wisconsin diagnostic breast cancer data (569 patients, 30 measurements; the CSV
# Debian's python3-sklearn ships) over five hospitals of different sizes and case mix, one CSV
# each with named columns and a text diagnosis (benign / malignant):
#   hospital-1  a large referral centre: many patients, many malignant
#   hospital-5  a small clinic: few patients, mostly benign
# The assignment is a fixed pseudo-random draw per row (the same files on every run).
# MALIGNANT_SHARES: the share of the malignant patients each hospital gets (default
# "0.46 0.24 0.14 0.11 0.05", which the DP-SGD examples' figures were measured with; run.sh
# uses "0.47 0.25 0.15 0.115 0.015": a clinic that sees 3 malignant cases in 44 patients); five
# numbers from 0 to 1 that add up to 1, or the script exits 2 saying which is wrong.
#   examples/breast_cancer/split.sh OUT_DIR [SOURCE_CSV]
set -euo pipefail
out=${1:?usage: split.sh OUT_DIR [SOURCE_CSV]}
src=${2:-/usr/lib/python3/dist-packages/sklearn/datasets/data/breast_cancer.csv}
[[ -f $src ]] || { echo "no $src: apt-get install python3-sklearn" >&2; exit 2; }
mkdir -p "$out"
header="radius_mean,texture_mean,perimeter_mean,area_mean,smoothness_mean,compactness_mean,\
concavity_mean,concave_points_mean,symmetry_mean,fractal_dimension_mean,radius_se,texture_se,\
perimeter_se,area_se,smoothness_se,compactness_se,concavity_se,concave_points_se,symmetry_se,\
fractal_dimension_se,radius_worst,texture_worst,perimeter_worst,area_worst,smoothness_worst,\
compactness_worst,concavity_worst,concave_points_worst,symmetry_worst,fractal_dimension_worst,\
diagnosis"
# sklearn's file: a first line "569,30,malignant,benign", then 30 values and the target
# (0 = malignant, 1 = benign) per row.
shares=${MALIGNANT_SHARES:-0.46 0.24 0.14 0.11 0.05}
awk -F, -v out="$out" -v header="$header" -v shares="$shares" '
  BEGIN {
    # Share of each diagnosis that goes to hospitals 1..5.
    if (split(shares, mal, " ") != 5) {
      print "MALIGNANT_SHARES=\"" shares "\": needs five shares, one per hospital" > "/dev/stderr"; exit 2
    }
    sum = 0
    for (h = 1; h <= 5; ++h) {
      if (mal[h] !~ /^([0-9]+\.?[0-9]*|\.[0-9]+)$/ || mal[h] + 0 > 1) {
        print "MALIGNANT_SHARES=\"" shares "\": share " h " (\"" mal[h] "\") is not a number from 0 to 1" > "/dev/stderr"; exit 2
      }
      sum += mal[h]
    }
    if (sum < 0.999999 || sum > 1.000001) {
      print "MALIGNANT_SHARES=\"" shares "\": the shares add up to " sum ", not 1" > "/dev/stderr"; exit 2
    }
    split("0.26 0.26 0.20 0.16 0.12", ben, " ")
    for (h = 1; h <= 5; ++h) print header > (out "/hospital-" h ".csv")
    state = 12345
  }
  NR > 1 {
    state = (state * 1103515245 + 12345) % 2147483648
    u = state / 2147483648
    malignant = ($31 == 0)
    c = 0
    for (h = 1; h <= 5; ++h) { c += malignant ? mal[h] : ben[h]; if (u < c || h == 5) break }
    line = $1
    for (i = 2; i <= 30; ++i) line = line "," $i
    print line "," (malignant ? "malignant" : "benign") >> (out "/hospital-" h ".csv")
  }' "$src"
for h in 1 2 3 4 5; do
  f="$out/hospital-$h.csv"
  printf "hospital-%s: %4d patients, %3d malignant\n" "$h" "$(($(wc -l <"$f") - 1))" "$(grep -c ',malignant$' "$f")"
done
