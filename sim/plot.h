// WritePlots: the PNG figures of a simulation, drawn by gnuplot (Debian's gnuplot-nox):
// accuracy vs round, accuracy vs simulated time, accuracy vs cumulative bytes (up + down),
// and, in gossip mode, consensus distance vs round. The data goes to DIR/metrics.dat and
// the script to DIR/plots.gp, so a figure can be re-drawn or restyled by hand.
// Thread-safety: writes files and runs a child process; one call at a time per DIR.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "sim/simulation.h"

namespace fedmesh {

// Creates `dir` if needed. FailedPrecondition when gnuplot is not installed or fails (its
// output in the message), IOError when a file cannot be written, InvalidArgument when no
// round was evaluated.
Status WritePlots(const std::vector<SimRoundMetrics>& rounds, const std::string& dir,
                  const std::string& title);

}  // namespace fedmesh
