# Z-scores of the 30 measurement columns with this file's own means and standard deviations
# (run as: awk -f standardize.awk FILE FILE): a hospital's local preprocessing, nothing leaves it.
BEGIN { FS = OFS = "," }
NR == FNR { if (FNR > 1) { for (i = 1; i <= 30; ++i) { s[i] += $i; q[i] += $i * $i } ++n } ; next }
FNR == 1 { print; for (i = 1; i <= 30; ++i) { m[i] = s[i] / n; sd[i] = sqrt(q[i] / n - m[i] * m[i]); if (sd[i] == 0) sd[i] = 1 } ; next }
{ for (i = 1; i <= 30; ++i) $i = sprintf("%.6f", ($i - m[i]) / sd[i]); print }
