// A fresh folder for config tests: files written into it, removed at scope exit.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fedmesh::testing_util {

namespace fs = std::filesystem;

class ConfigTempDir {
 public:
  ConfigTempDir() {
    path_ = fs::temp_directory_path() /
            ("fedmesh_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ConfigTempDir() { fs::remove_all(path_); }
  // Writes `text` to `name` (subfolders created) and returns its path.
  std::string Write(const std::string& name, const std::string& text) const {
    fs::path p = path_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

}  // namespace fedmesh::testing_util
