#include "sim/plot.h"

#include "core/gnuplot.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace fedmesh {

Status WritePlots(const std::vector<SimRoundMetrics>& rounds, const std::string& dir,
                  const std::string& title) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create plot directory '" + dir + "': " + ec.message());
  const std::string data = (fs::path(dir) / "metrics.dat").string();
  const std::string script = (fs::path(dir) / "plots.gp").string();
  bool any_eval = false, any_consensus = false;
  {
    std::ofstream f(data);
    if (!f) return Status::IOError("cannot write '" + data + "'");
    f << "# round sim_time_s test_accuracy cumulative_bytes consensus_distance\n";
    double bytes = 0;
    for (const SimRoundMetrics& m : rounds) {
      bytes += static_cast<double>(m.bytes_up + m.bytes_down);
      any_eval |= m.test_accuracy.has_value();
      any_consensus |= m.consensus_distance.has_value();
      char line[160];
      std::snprintf(line, sizeof line, "%llu %.6f %s %.0f %s\n",
                    static_cast<unsigned long long>(m.round), m.sim_time_s,
                    m.test_accuracy ? std::to_string(*m.test_accuracy).c_str() : "NaN", bytes,
                    m.consensus_distance ? std::to_string(*m.consensus_distance).c_str() : "NaN");
      f << line;
    }
    if (!f.flush()) return Status::IOError("cannot write '" + data + "'");
  }
  if (!any_eval) return Status::InvalidArgument("no round was evaluated: nothing to plot");
  {
    std::ofstream f(script);
    if (!f) return Status::IOError("cannot write '" + script + "'");
    auto png = [&](const std::string& name) { return GnuplotQuote((fs::path(dir) / name).string()); };
    f << "set terminal png size 900,600\nset grid\nset key off\n"
      << "set title " << GnuplotQuote(title) << "\nset ylabel 'test accuracy'\nset datafile missing 'NaN'\n"
      << "set output " << png("accuracy_vs_round.png") << "\nset xlabel 'round'\n"
      << "plot " << GnuplotQuote(data) << " using 1:3 with linespoints pt 7 ps 0.6\n"
      << "set output " << png("accuracy_vs_time.png") << "\nset xlabel 'simulated time (s)'\n"
      << "plot " << GnuplotQuote(data) << " using 2:3 with linespoints pt 7 ps 0.6\n"
      << "set output " << png("accuracy_vs_bytes.png")
      << "\nset xlabel 'bytes sent and received, cumulative (MB)'\n"
      << "plot " << GnuplotQuote(data) << " using ($4/1e6):3 with linespoints pt 7 ps 0.6\n";
    if (any_consensus) {
      f << "set output " << png("consensus_vs_round.png")
        << "\nset xlabel 'round'\nset ylabel 'consensus distance'\nset logscale y\n"
        << "plot " << GnuplotQuote(data) << " using 1:5 with linespoints pt 7 ps 0.6\n";
    }
    if (!f.flush()) return Status::IOError("cannot write '" + script + "'");
  }
  return RunGnuplot(script);
}

}  // namespace fedmesh
