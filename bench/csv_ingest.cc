// CSV ingestion throughput of ReadCsv (core/data/csv_reader.h): reads one file REPS times,
// each from the path (file read + parse + one-hot expansion, as fedmesh-node loads a site's
// data), and prints rows/s and MB/s for the best and the median repeat as one JSON line.
// The baseline, pandas.read_csv on the same file, is bench/csv_ingest.py; bench/csv_ingest.sh
// runs both in one run. The first read warms the page cache and is not timed, so both sides
// read from memory rather than disk.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "core/data/csv_reader.h"

namespace {

using fedmesh::bench::Median;

using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  std::string path, label;
  std::vector<std::string> categorical, label_values;
  int reps = 5;
  CLI::App app{"fedmesh ReadCsv throughput (rows/s, MB/s); baseline: bench/csv_ingest.py"};
  app.add_option("path", path, "CSV file")->required();
  app.add_option("--label-column", label, "Label column")->required();
  app.add_option("--label-values", label_values, "Text labels in class order")->delimiter(',');
  app.add_option("--categorical", categorical, "Categorical columns (one-hot)")->delimiter(',');
  app.add_option("--reps", reps, "Timed repeats (best and median are reported)");
  CLI11_PARSE(app, argc, argv);
  if (reps < 1) {
    std::fprintf(stderr, "--reps must be >= 1\n");
    return 2;
  }
  fedmesh::CsvOptions options;
  options.label_column = label;
  options.label_values = label_values;
  options.categorical = categorical;

  std::error_code ec;
  const double mb = static_cast<double>(std::filesystem::file_size(path, ec)) / 1e6;
  size_t rows = 0, width = 0;
  std::vector<double> secs;
  for (int r = -1; r < reps; ++r) {
    const auto t0 = Clock::now();
    auto ds = fedmesh::ReadCsv(path, options);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!ds.ok()) {
      std::fprintf(stderr, "%s\n", ds.status().ToString().c_str());
      return 1;
    }
    rows = ds->size();
    width = ds->sample_size();
    if (r >= 0) secs.push_back(s);
  }
  const double best = *std::min_element(secs.begin(), secs.end());
  const double median = Median(secs);
  std::printf(
      "{\"impl\":\"fedmesh\",\"rows\":%zu,\"features\":%zu,\"mb\":%.1f,\"reps\":%d,"
      "\"best_s\":%.4f,\"median_s\":%.4f,\"rows_per_s\":%.0f,\"rows_per_s_median\":%.0f,"
      "\"mb_per_s\":%.1f,\"mb_per_s_median\":%.1f}\n",
      rows, width, mb, reps, best, median, rows / best, rows / median, mb / best, mb / median);
  return 0;
}
