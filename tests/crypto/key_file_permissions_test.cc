#include "crypto/key_file_permissions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace fedmesh {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class KeyFilePermissionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = ::testing::TempDir() + "fedmesh_keyfile_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  static void WriteWithMode(const std::string& path, const std::string& bytes, mode_t mode) {
    std::ofstream(path, std::ios::binary) << bytes;
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
  }
  static std::string ReadAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  static mode_t ModeOf(const std::string& path) {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0);
    return st.st_mode & 07777;
  }
  size_t EntriesInDir() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }

  fs::path dir_;
};

TEST_F(KeyFilePermissionsTest, OwnerOnlyFileIsAccepted) {
  const std::string path = Path("site.key");
  WriteWithMode(path, "secret", 0600);
  EXPECT_TRUE(CheckSecretFilePermissions(path).ok());
  WriteWithMode(path, "secret", 0400);
  EXPECT_TRUE(CheckSecretFilePermissions(path).ok());
}

TEST_F(KeyFilePermissionsTest, WorldReadableFileIsRefusedWithTheFix) {
  const std::string path = Path("site.key");
  WriteWithMode(path, "secret", 0644);
  Status s = CheckSecretFilePermissions(path);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(),
            path + " is readable by group or others (mode 0644); run: chmod 600 " + path);
  EXPECT_THAT(s.message(), HasSubstr("chmod 600"));
}

TEST_F(KeyFilePermissionsTest, GroupWritableFileIsRefused) {
  const std::string path = Path("site.key");
  WriteWithMode(path, "secret", 0620);
  Status s = CheckSecretFilePermissions(path);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("writable by group or others (mode 0620)"));
  EXPECT_THAT(s.message(), HasSubstr("chmod 600 " + path));
}

TEST_F(KeyFilePermissionsTest, MissingFileIsNotFound) {
  Status s = CheckSecretFilePermissions(Path("absent.key"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("absent.key"));
}

TEST_F(KeyFilePermissionsTest, DirectoryIsNotASecretFile) {
  ASSERT_TRUE(fs::create_directory(Path("keys")));
  ::chmod(Path("keys").c_str(), 0700);
  EXPECT_EQ(CheckSecretFilePermissions(Path("keys")).code(), StatusCode::kInvalidArgument);
}

// Issue 26 item 9: the check is made on the opened file, and a link is not opened.
TEST_F(KeyFilePermissionsTest, SymlinkIsRefusedEvenToAnOwnerOnlyFile) {
  const std::string target = Path("site.key");
  const std::string link = Path("link.key");
  WriteWithMode(target, "secret", 0600);
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  Status s = CheckSecretFilePermissions(link);
  EXPECT_EQ(s.code(), StatusCode::kPermissionDenied) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(link + " is a symbolic link"));
  EXPECT_TRUE(CheckSecretFilePermissions(target).ok());
}

// The descriptor stays the checked file: replacing the name after the open changes nothing
// for the reader (what a path-based stat-then-open could not promise).
TEST_F(KeyFilePermissionsTest, OpenKeyFileKeepsTheCheckedFileWhenTheNameIsSwapped) {
  const std::string path = Path("site.pub");
  WriteWithMode(path, "checked", 0644);
  Result<CheckedFile> file = OpenKeyFile(path, KeyFileRule::kPublic);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  WriteWithMode(Path("evil.pub"), "swapped", 0666);
  ASSERT_EQ(::rename(Path("evil.pub").c_str(), path.c_str()), 0);
  char buf[16] = {};
  ASSERT_EQ(::read(file->fd(), buf, sizeof(buf)), 7);
  EXPECT_EQ(std::string(buf), "checked");
  EXPECT_EQ(file->file_stat().st_mode & 07777, 0644u);
  EXPECT_EQ(OpenKeyFile(path, KeyFileRule::kPublic).status().code(), StatusCode::kPermissionDenied);
}

TEST_F(KeyFilePermissionsTest, WriteSecretFileCreatesMode0600WithExactBytes) {
  // A permissive umask must not leak into the key's mode.
  const mode_t old_umask = ::umask(0);
  const std::string path = Path("new.key");
  const std::string bytes("\x00\x01secret\xff\n", 10);
  Status s = WriteSecretFile(path, bytes);
  ::umask(old_umask);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_EQ(ReadAll(path), bytes);
  EXPECT_TRUE(CheckSecretFilePermissions(path).ok());
  EXPECT_EQ(EntriesInDir(), 1u) << "the temporary file must not be left behind";
}

TEST_F(KeyFilePermissionsTest, WriteSecretFileCreatesEmptyFile) {
  const std::string path = Path("empty.key");
  ASSERT_TRUE(WriteSecretFile(path, "").ok());
  EXPECT_EQ(ModeOf(path), 0600u);
  EXPECT_EQ(ReadAll(path), "");
}

TEST_F(KeyFilePermissionsTest, WriteSecretFileRefusesToOverwrite) {
  const std::string path = Path("site.key");
  ASSERT_TRUE(WriteSecretFile(path, "first").ok());
  Status s = WriteSecretFile(path, "second");
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_EQ(ReadAll(path), "first");
  EXPECT_EQ(EntriesInDir(), 1u);
}

TEST_F(KeyFilePermissionsTest, WriteSecretFileInMissingDirectoryIsNotFound) {
  Status s = WriteSecretFile(Path("no/such/dir/site.key"), "x");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("does not exist"));
}

TEST_F(KeyFilePermissionsTest, ConcurrentWritersExactlyOneWins) {
  const std::string path = Path("race.key");
  constexpr int kWriters = 8;
  std::atomic<int> wins{0}, already{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      Status s = WriteSecretFile(path, "writer " + std::to_string(i));
      if (s.ok()) ++wins;
      if (s.code() == StatusCode::kAlreadyExists) ++already;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wins.load(), 1);
  EXPECT_EQ(already.load(), kWriters - 1);
  EXPECT_THAT(ReadAll(path), HasSubstr("writer "));
  EXPECT_EQ(EntriesInDir(), 1u);
}

TEST_F(KeyFilePermissionsTest, WritePublicFileCreatesMode0644WhateverTheUmask) {
  for (mode_t mask : {mode_t{0}, mode_t{077}}) {
    const mode_t old_umask = ::umask(mask);
    const std::string path = Path("site-" + std::to_string(mask) + ".pub");
    Status s = WritePublicFile(path, "fedmesh-pub v1\n");
    ::umask(old_umask);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(ModeOf(path), 0644u) << "umask " << mask;
    EXPECT_EQ(ReadAll(path), "fedmesh-pub v1\n");
  }
  EXPECT_EQ(EntriesInDir(), 2u) << "the temporary files must not be left behind";
}

TEST_F(KeyFilePermissionsTest, WritePublicFileRefusesToOverwrite) {
  const std::string path = Path("site.pub");
  ASSERT_TRUE(WritePublicFile(path, "first").ok());
  Status s = WritePublicFile(path, "second");
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(s.message(), path + " already exists; refusing to overwrite a public file");
  EXPECT_EQ(ReadAll(path), "first");
  EXPECT_EQ(EntriesInDir(), 1u);
}

}  // namespace
}  // namespace fedmesh
