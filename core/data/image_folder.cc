#include "core/data/image_folder.h"

// Debian's libstb.so carries the implementations; the headers give declarations only.
#include <stb/stb_image.h>
#include <stb/stb_image_resize.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxSide = 4096;

bool IsHidden(const std::string& name) { return !name.empty() && name[0] == '.'; }

bool HasImageExtension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

std::string StbReason() {
  const char* r = stbi_failure_reason();
  return r != nullptr ? r : "no reason given";
}

Status CheckOptions(const ImageFolderOptions& o) {
  if (o.height < 1 || o.height > kMaxSide || o.width < 1 || o.width > kMaxSide) {
    return Status::InvalidArgument("ImageFolderOptions height and width must be in 1.." +
                                   std::to_string(kMaxSide) + ", got " + std::to_string(o.height) +
                                   " x " + std::to_string(o.width));
  }
  if (o.channels != 1 && o.channels != 3) {
    return Status::InvalidArgument("ImageFolderOptions.channels must be 1 (grey) or 3 (RGB), got " +
                                   std::to_string(o.channels));
  }
  if (o.max_files < 1) return Status::InvalidArgument("ImageFolderOptions.max_files must be >= 1");
  if (o.max_pixels_per_image < 1) {
    return Status::InvalidArgument("ImageFolderOptions.max_pixels_per_image must be >= 1");
  }
  return Status::OK();
}

// The names of `dir`'s non-hidden entries that pass `keep`, in byte order.
template <typename Keep>
Result<std::vector<std::string>> ListSorted(const fs::path& dir, Keep keep) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (IsHidden(name)) continue;
    FM_ASSIGN_OR_RETURN(bool wanted, keep(*it, name));
    if (wanted) names.push_back(std::move(name));
  }
  if (ec) return Status::IOError("cannot list folder " + dir.string() + ": " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// The whole file, refused when empty or beyond stb's int-sized input.
Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) return Status::IOError("cannot inspect image file " + path + ": " + ec.message());
  if (size == 0) return Status::Corruption("image file " + path + " is empty");
  if (size > static_cast<uintmax_t>(INT_MAX)) {
    return Status::InvalidArgument("image file " + path + " is over 2 GiB; the decoder (stb) " +
                                   "reads at most 2 GiB per file");
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::IOError("cannot open image file " + path + ": " + std::strerror(errno));
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  const size_t n = std::fread(bytes.data(), 1, bytes.size(), f);
  const int err = errno;
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed)
    return Status::IOError("reading image file " + path + " failed: " + std::strerror(err));
  // Shrunk between stat and read: decode what is there (a truncated image then fails).
  bytes.resize(n);
  if (n == 0) return Status::Corruption("image file " + path + " is empty");
  return bytes;
}

struct StbFree {
  void operator()(stbi_uc* p) const { stbi_image_free(p); }
};

// Decodes the image at `path` and appends it to `out` as height x width x channels floats.
Status AppendImage(const std::string& path, const ImageFolderOptions& o, std::vector<float>* out) {
  FM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadWholeFile(path));
  const int len = static_cast<int>(bytes.size());
  // The header alone first: a few bytes can claim gigapixels, and decoding allocates that.
  int w = 0, h = 0, file_channels = 0;
  if (stbi_info_from_memory(bytes.data(), len, &w, &h, &file_channels) == 0) {
    return Status::Corruption("image file " + path +
                              " is not a PNG or JPEG that can be read (stb: " + StbReason() + ")");
  }
  const int64_t pixels = int64_t{w} * int64_t{h};
  if (pixels > o.max_pixels_per_image) {
    return Status::InvalidArgument(
        "image file " + path + " is " + std::to_string(w) + " x " + std::to_string(h) + " = " +
        std::to_string(pixels) + " pixels, over the limit of " + std::to_string(o.max_pixels_per_image) +
        " pixels a source image may have; shrink it before training");
  }
  std::unique_ptr<stbi_uc, StbFree> img(
      stbi_load_from_memory(bytes.data(), len, &w, &h, &file_channels, o.channels));
  if (img == nullptr) {
    return Status::Corruption("image file " + path + " could not be decoded (stb: " + StbReason() +
                              "); it is truncated or damaged");
  }
  const stbi_uc* px = img.get();
  std::vector<stbi_uc> resized;
  if (w != o.width || h != o.height) {
    resized.resize(static_cast<size_t>(o.width) * o.height * o.channels);
    // Fails only when its work buffer cannot be allocated.
    if (stbir_resize_uint8(px, w, h, 0, resized.data(), o.width, o.height, 0, o.channels) == 0) {
      return Status::Unavailable("out of memory resizing image file " + path + " from " +
                                 std::to_string(w) + " x " + std::to_string(h));
    }
    px = resized.data();
  }
  // A table gives exactly v / 255.0f, as the IDX reader does, without a division per value.
  static const auto kScale = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) t[v] = static_cast<float>(v) / 255.0f;
    return t;
  }();
  const size_t n = static_cast<size_t>(o.width) * o.height * o.channels;
  for (size_t i = 0; i < n; ++i) out->push_back(kScale[px[i]]);
  return Status::OK();
}

}  // namespace

Result<Dataset> ReadImageFolder(const std::string& dir, const ImageFolderOptions& options) {
  FM_RETURN_IF_ERROR(CheckOptions(options));
  std::error_code ec;
  const auto st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) {
    return Status::NotFound("image folder " + dir + " does not exist");
  }
  if (ec) return Status::IOError("cannot inspect image folder " + dir + ": " + ec.message());
  if (st.type() != fs::file_type::directory) {
    return Status::InvalidArgument(dir + " is not a folder; pass a folder holding one " +
                                   "sub-folder of images per class");
  }

  FM_ASSIGN_OR_RETURN(
      std::vector<std::string> classes,
      ListSorted(dir, [](const fs::directory_entry& e, const std::string&) -> Result<bool> {
        std::error_code e_ec;
        return e.is_directory(e_ec);  // an entry that vanished or cannot be inspected: skip
      }));
  if (classes.empty()) {
    return Status::InvalidArgument("image folder " + dir + " has no class sub-folders; put " +
                                   "each class's images in " + dir + "/<class name>/");
  }

  // List everything before decoding anything, so layout mistakes surface in seconds.
  std::vector<std::vector<std::string>> files(classes.size());
  size_t total = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path class_dir = fs::path(dir) / classes[c];
    FM_ASSIGN_OR_RETURN(
        files[c],
        ListSorted(
            class_dir, [&](const fs::directory_entry& e, const std::string& name) -> Result<bool> {
              std::error_code e_ec;
              if (!e.is_regular_file(e_ec) || !HasImageExtension(name)) return false;
              if (++total > options.max_files) {
                return Status::InvalidArgument(
                    "image folder " + dir + " holds more than " +
                    std::to_string(options.max_files) +
                    " images (ImageFolderOptions.max_files); reached at " + e.path().string());
              }
              return true;
            }));
    if (files[c].empty()) {
      return Status::InvalidArgument("class folder " + class_dir.string() +
                                     " has no .png, .jpg or .jpeg images; add some or remove it");
    }
  }

  Dataset ds;
  ds.sample_shape = {options.height, options.width, options.channels};
  ds.num_classes = static_cast<int>(classes.size());
  ds.labels.reserve(total);
  ds.features.reserve(total * ds.sample_size());
  for (size_t c = 0; c < classes.size(); ++c) {
    const fs::path class_dir = fs::path(dir) / classes[c];
    for (const std::string& name : files[c]) {
      FM_RETURN_IF_ERROR(AppendImage((class_dir / name).string(), options, &ds.features));
      ds.labels.push_back(static_cast<int32_t>(c));
    }
  }
  return ds;
}

}  // namespace fedmesh
