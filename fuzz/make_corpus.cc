// Writes the seed corpus for every codec fuzz target: <dir>/<target>/seed-<i>, the valid
// encodings and round-trip inputs of SeedInputs (fuzz/codec_fuzz_targets.h).
// Usage: make_corpus <dir>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz/codec_fuzz_targets.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  const std::filesystem::path root = argv[1];
  for (const fedmesh::fuzz::FuzzTarget& t : fedmesh::fuzz::AllTargets()) {
    const std::filesystem::path dir = root / std::string(t.name);
    std::filesystem::create_directories(dir);
    const auto inputs = fedmesh::fuzz::SeedInputs(t, /*seed=*/1);
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::ofstream f(dir / ("seed-" + std::to_string(i)), std::ios::binary);
      f.write(reinterpret_cast<const char*>(inputs[i].data()),
              static_cast<std::streamsize>(inputs[i].size()));
      if (!f) {
        std::fprintf(stderr, "cannot write %s\n", (dir / ("seed-" + std::to_string(i))).c_str());
        return 1;
      }
    }
    std::printf("%-8s %zu seeds\n", std::string(t.name).c_str(), inputs.size());
  }
  return 0;
}
