# Writes the German credit data of Debian's r-cran-caret (1,000 loan applicants, 300 bad
# risks) as one CSV with real categorical text columns. caret stores each categorical
# attribute as 0/1 dummy columns (CheckingAccountStatus.lt.0, CheckingAccountStatus.0.to.200,
# ...); every level has its column, so each row has exactly one 1 per group, which becomes the
# text of one column (CheckingAccountStatus = "lt.0"). The script stops if a row has no level
# or two. Class (Good / Bad) is the label, written last.
#   Rscript examples/bank/export.R OUT.csv
args <- commandArgs(trailingOnly = TRUE)
if (length(args) != 1) stop("usage: Rscript export.R OUT.csv")
data(GermanCredit, package = "caret")
g <- GermanCredit
groups <- c("CheckingAccountStatus", "CreditHistory", "Purpose", "SavingsAccountBonds",
            "EmploymentDuration", "Personal", "OtherDebtorsGuarantors", "Property",
            "OtherInstallmentPlans", "Housing", "Job")
out <- g[, c("Duration", "Amount", "InstallmentRatePercentage", "ResidenceDuration", "Age",
             "NumberExistingCredits", "NumberPeopleMaintenance", "Telephone", "ForeignWorker")]
for (p in groups) {
  cols <- grep(paste0("^", p, "\\."), names(g), value = TRUE)
  dummies <- as.matrix(g[, cols])
  if (any(rowSums(dummies) != 1)) stop(p, ": a row without exactly one level")
  out[[p]] <- sub(paste0("^", p, "\\."), "", cols)[max.col(dummies, ties.method = "first")]
}
out$Class <- as.character(g$Class)
write.csv(out, args[1], row.names = FALSE, quote = FALSE)
