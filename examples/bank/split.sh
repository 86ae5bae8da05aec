#!/usr/bin/env bash
# Splits the German credit data (1,000 loan applicants, 300 bad risks; Debian's r-cran-caret,
# exported by export.R with its categorical attributes as text columns) over three banks of
# different size and risk mix, one CSV each:
#   bank-1  a large retail bank: many applicants, few bad risks
#   bank-2  a regional bank
#   bank-3  a small consumer lender: few applicants, many bad risks
# The assignment is a fixed pseudo-random draw per row (the same files on every run).
#   examples/bank/split.sh OUT_DIR
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: split.sh OUT_DIR}
command -v Rscript >/dev/null && Rscript -e 'library(caret)' >/dev/null 2>&1 ||
  { echo "no caret for R: apt-get install r-cran-caret" >&2; exit 2; }
mkdir -p "$out"
Rscript "$here/export.R" "$out/german_credit.csv"
awk -F, -v out="$out" '
  BEGIN {
    # Share of each class that goes to banks 1..3.
    split("0.35 0.35 0.30", bad, " ")
    split("0.50 0.32 0.18", good, " ")
    state = 2024
  }
  NR == 1 { for (b = 1; b <= 3; ++b) print > (out "/bank-" b ".csv"); next }
  {
    state = (state * 1103515245 + 12345) % 2147483648
    u = state / 2147483648
    c = 0
    for (b = 1; b <= 3; ++b) { c += ($NF == "Bad") ? bad[b] : good[b]; if (u < c || b == 3) break }
    print >> (out "/bank-" b ".csv")
  }' "$out/german_credit.csv"
for b in 1 2 3; do
  f="$out/bank-$b.csv"
  printf "bank-%s: %4d applicants, %3d bad\n" "$b" "$(($(wc -l <"$f") - 1))" "$(grep -c ',Bad$' "$f")"
done
