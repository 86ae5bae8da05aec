#include "core/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace fedmesh {
namespace {

constexpr uint8_t kUint8TypeCode = 0x08;

// Data is read in chunks so that memory grows only as bytes actually arrive: a truncated
// file whose header claims 1 GiB costs one chunk, not 1 GiB, before we notice.
constexpr size_t kReadChunk = size_t{16} << 20;

const char* TypeCodeName(uint8_t code) {
  switch (code) {
    case 0x08:
      return "uint8";
    case 0x09:
      return "int8";
    case 0x0B:
      return "int16";
    case 0x0C:
      return "int32";
    case 0x0D:
      return "float32";
    case 0x0E:
      return "float64";
    default:
      return "unknown";
  }
}

std::string Hex2(uint8_t b) {
  static const char kDigits[] = "0123456789abcdef";
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 0xF];
}

// Owns a gzFile so that every early return closes it.
class GzFile {
 public:
  explicit GzFile(gzFile f) : f_(f) {}
  ~GzFile() {
    if (f_ != nullptr) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }

 private:
  gzFile f_;
};

Status OpenGz(const std::string& path, gzFile* out) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) {
    return Status::NotFound("IDX file " + path + " does not exist");
  }
  if (ec) {
    return Status::IOError("cannot inspect IDX file " + path + ": " + ec.message());
  }
  if (st.type() != std::filesystem::file_type::regular) {
    return Status::InvalidArgument(path + " is not a regular file; pass the path of an IDX file");
  }
  errno = 0;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    const int err = errno;
    return Status::IOError("cannot open IDX file " + path + ": " +
                           (err != 0 ? std::strerror(err) : "out of memory"));
  }
  // A larger buffer than zlib's 8 KiB default roughly halves decode time on 47 MB files.
  gzbuffer(f, 128 * 1024);
  *out = f;
  return Status::OK();
}

// gzerror() prefixes its message with the path, which our messages already name.
std::string ZlibMessage(gzFile f, const std::string& path, int* errnum) {
  const char* msg = gzerror(f, errnum);
  std::string m = msg != nullptr ? msg : "unknown zlib error";
  if (m.rfind(path + ": ", 0) == 0) m.erase(0, path.size() + 2);
  return m;
}

// Reads up to n bytes; *got is how many arrived before end of file. A read error or a
// damaged gzip stream is returned as a Status; a clean short read is not an error here,
// the caller decides what a short read means.
Status ReadUpTo(gzFile f, const std::string& path, uint8_t* dst, size_t n, size_t* got) {
  *got = 0;
  while (*got < n) {
    const unsigned want = static_cast<unsigned>(std::min(n - *got, kReadChunk));
    errno = 0;
    const int r = gzread(f, dst + *got, want);
    if (r < 0) {
      int errnum = Z_OK;
      const std::string msg = ZlibMessage(f, path, &errnum);
      if (errnum == Z_ERRNO) {
        return Status::IOError("reading IDX file " + path + " failed: " + std::strerror(errno));
      }
      return Status::Corruption("IDX file " + path + " has a damaged gzip stream (" + msg +
                                "); download or reinstall it");
    }
    if (r == 0) break;
    *got += static_cast<size_t>(r);
  }
  if (*got < n) {
    // zlib reports a gzip stream cut short (even one missing only its CRC trailer, whose
    // data therefore went unverified) as Z_BUF_ERROR on a short read, not as a failed read.
    int errnum = Z_OK;
    const std::string msg = ZlibMessage(f, path, &errnum);
    if (errnum == Z_ERRNO) {
      return Status::IOError("reading IDX file " + path + " failed: " + std::strerror(errno));
    }
    if (errnum == Z_BUF_ERROR) {
      return Status::Corruption("IDX file " + path + " is truncated: its gzip stream ends early (" +
                                msg + "); download or reinstall it");
    }
    if (errnum != Z_OK) {
      return Status::Corruption("IDX file " + path + " has a damaged gzip stream (" + msg +
                                "); download or reinstall it");
    }
  }
  return Status::OK();
}

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

}  // namespace

Result<IdxArray> ReadIdxUint8(const std::string& path, int expected_ndims) {
  if (expected_ndims < 1 || expected_ndims > 255) {
    return Status::InvalidArgument("expected_ndims must be in 1..255, got " +
                                   std::to_string(expected_ndims));
  }
  gzFile raw = nullptr;
  FM_RETURN_IF_ERROR(OpenGz(path, &raw));
  GzFile file(raw);

  // Header: two zero bytes, the element type code, the number of dimensions.
  uint8_t magic[4];
  size_t got = 0;
  FM_RETURN_IF_ERROR(ReadUpTo(file.get(), path, magic, 4, &got));
  if (got < 4) {
    return Status::Corruption(
        "IDX file " + path + " is " + std::to_string(got) +
        " bytes long, too short for the 4-byte IDX magic; is it an IDX file?");
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return Status::Corruption("IDX file " + path +
                              " does not start with the IDX magic (first bytes " + Hex2(magic[0]) +
                              " " + Hex2(magic[1]) + ", expected 0x00 0x00); is it an IDX file?");
  }
  if (magic[2] != kUint8TypeCode) {
    return Status::Corruption("IDX file " + path + " has element type code " + Hex2(magic[2]) +
                              " (" + TypeCodeName(magic[2]) +
                              "); only uint8 (0x08) IDX files are supported");
  }
  if (magic[3] != expected_ndims) {
    return Status::Corruption("IDX file " + path + " has " + std::to_string(magic[3]) +
                              " dimensions, expected " + std::to_string(expected_ndims) +
                              " (images are count x rows x cols, labels are count); "
                              "were the image and label paths swapped?");
  }

  IdxArray out;
  const size_t ndims = magic[3];
  std::vector<uint8_t> dim_bytes(4 * ndims);
  FM_RETURN_IF_ERROR(ReadUpTo(file.get(), path, dim_bytes.data(), dim_bytes.size(), &got));
  if (got < dim_bytes.size()) {
    return Status::Corruption("IDX file " + path + " is truncated inside its header (" +
                              std::to_string(ndims) + " dimension sizes expected)");
  }
  uint64_t total = 1;
  out.dims.resize(ndims);
  for (size_t i = 0; i < ndims; ++i) {
    out.dims[i] = BigEndian32(&dim_bytes[4 * i]);
    if (out.dims[i] == 0) {
      return Status::Corruption("IDX file " + path + " has size 0 in dimension " +
                                std::to_string(i) + "; it holds no data");
    }
    // Each factor is < 2^32 and total stays <= 2^30 after every step, so no overflow.
    total *= out.dims[i];
    if (total > kMaxIdxElements) {
      return Status::Corruption(
          "IDX file " + path + " declares more than " + std::to_string(kMaxIdxElements) +
          " elements, beyond the 1 GiB limit; its header is probably corrupt");
    }
  }

  // Grow the buffer as data arrives (see kReadChunk).
  size_t have = 0;
  while (have < total) {
    const size_t next = std::min<size_t>(total, have + kReadChunk);
    out.data.resize(next);
    FM_RETURN_IF_ERROR(ReadUpTo(file.get(), path, out.data.data() + have, next - have, &got));
    have += got;
    if (have < next) {
      return Status::Corruption("IDX file " + path + " is truncated: its header declares " +
                                std::to_string(total) + " data bytes but only " +
                                std::to_string(have) + " are present; download or reinstall it");
    }
  }
  uint8_t extra = 0;
  FM_RETURN_IF_ERROR(ReadUpTo(file.get(), path, &extra, 1, &got));
  if (got != 0) {
    return Status::Corruption("IDX file " + path + " has bytes after the " + std::to_string(total) +
                              " its header declares; the header or the file is wrong");
  }
  return out;
}

Result<Dataset> ReadIdxImagesAndLabels(const std::string& images_path,
                                       const std::string& labels_path, int num_classes) {
  // Labels are stored as uint8, so more than 256 classes cannot be represented.
  if (num_classes < 1 || num_classes > 256) {
    return Status::InvalidArgument("num_classes must be in 1..256 for IDX uint8 labels, got " +
                                   std::to_string(num_classes));
  }
  FM_ASSIGN_OR_RETURN(IdxArray images, ReadIdxUint8(images_path, 3));
  FM_ASSIGN_OR_RETURN(IdxArray labels, ReadIdxUint8(labels_path, 1));
  if (images.dims[0] != labels.dims[0]) {
    return Status::Corruption("IDX image file " + images_path + " holds " +
                              std::to_string(images.dims[0]) + " images but label file " +
                              labels_path + " holds " + std::to_string(labels.dims[0]) +
                              " labels; they must come from the same split");
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= num_classes) {
      return Status::Corruption("IDX label file " + labels_path + " has label " +
                                std::to_string(labels.data[i]) + " at sample " + std::to_string(i) +
                                ", outside 0.." + std::to_string(num_classes - 1) +
                                " for num_classes " + std::to_string(num_classes));
    }
  }

  Dataset ds;
  // rows and cols are <= kMaxIdxElements = 2^30, so they fit an int.
  ds.sample_shape = {static_cast<int>(images.dims[1]), static_cast<int>(images.dims[2]), 1};
  ds.num_classes = num_classes;
  // A table gives exactly x / 255.0f for each byte without a division per pixel.
  float scale[256];
  for (int v = 0; v < 256; ++v) scale[v] = static_cast<float>(v) / 255.0f;
  ds.features.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) ds.features[i] = scale[images.data[i]];
  ds.labels.assign(labels.data.begin(), labels.data.end());
  return ds;
}

}  // namespace fedmesh
