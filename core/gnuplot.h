// Running Debian's gnuplot (gnuplot-nox) on a script file, for the PNG figures of the
// simulator (sim/plot.h) and the federated statistics report (aggregator/stats_report.h).
// Thread-safety: pure functions (RunGnuplot starts a process).
#pragma once

#include <string>

#include "core/status.h"

namespace fedmesh {

// `s` as a single-quoted gnuplot string; a quote inside becomes two.
std::string GnuplotQuote(const std::string& s);

// Runs `gnuplot SCRIPT`. FailedPrecondition with gnuplot's output (or how to install it)
// when it cannot run or fails.
Status RunGnuplot(const std::string& script_path);

}  // namespace fedmesh
