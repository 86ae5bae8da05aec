#include "core/npz.h"

#include <zlib.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace fedmesh {
namespace {

void Put16(std::string& s, uint16_t v) { s.append(reinterpret_cast<const char*>(&v), 2); }
void Put32(std::string& s, uint32_t v) { s.append(reinterpret_cast<const char*>(&v), 4); }
uint16_t Get16(const char* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
uint32_t Get32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string EncodeNpyBytes(const NpzArray& a) {
  std::string shape = "(";
  for (size_t k = 0; k < a.dims.size(); ++k) shape += std::to_string(a.dims[k]) + ", ";
  if (a.dims.size() > 1) shape.resize(shape.size() - 2);
  if (a.dims.size() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = std::string("{'descr': '") +
                       (a.dtype == graph::DType::kFloat32 ? "<f4" : "<i8") +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + header, padded to 64 bytes with '\n' last.
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  Put16(out, static_cast<uint16_t>(header.size()));
  out += header;
  if (a.dtype == graph::DType::kFloat32) {
    out.append(reinterpret_cast<const char*>(a.f.data()), a.f.size() * 4);
  } else {
    out.append(reinterpret_cast<const char*>(a.i.data()), a.i.size() * 8);
  }
  return out;
}

Status Bad(const std::string& m) { return Status::InvalidArgument(m); }

}  // namespace

std::string EncodeNpz(const std::vector<NpzArray>& arrays) {
  std::string out, central;
  for (const NpzArray& a : arrays) {
    const std::string name = a.name + ".npy";
    const std::string data = EncodeNpyBytes(a);
    const uint32_t crc = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    // Local file header: stored (method 0), no extra field, DOS time 1980-01-01.
    Put32(out, 0x04034b50);
    Put16(out, 20), Put16(out, 0), Put16(out, 0), Put16(out, 0), Put16(out, 0x21);
    Put32(out, crc), Put32(out, data.size()), Put32(out, data.size());
    Put16(out, name.size()), Put16(out, 0);
    out += name;
    out += data;
    Put32(central, 0x02014b50);
    Put16(central, 20), Put16(central, 20), Put16(central, 0), Put16(central, 0);
    Put16(central, 0), Put16(central, 0x21);
    Put32(central, crc), Put32(central, data.size()), Put32(central, data.size());
    Put16(central, name.size()), Put16(central, 0), Put16(central, 0), Put16(central, 0);
    Put16(central, 0), Put32(central, 0), Put32(central, offset);
    central += name;
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  Put32(out, 0x06054b50);
  Put16(out, 0), Put16(out, 0), Put16(out, arrays.size()), Put16(out, arrays.size());
  Put32(out, central.size()), Put32(out, cd_offset), Put16(out, 0);
  return out;
}

Status WriteNpzFile(const std::string& path, const std::vector<NpzArray>& arrays) {
  size_t total = 0;
  for (const NpzArray& a : arrays) total += a.f.size() * 4 + a.i.size() * 8;
  if (total >= (size_t{1} << 32) - (size_t{1} << 20))
    return Bad(path + ": the arrays need ZIP64, which fedmesh does not write (over 4 GiB)");
  const std::string bytes = EncodeNpz(arrays);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !f.write(bytes.data(), static_cast<std::streamsize>(bytes.size())))
      return Status::IOError(path + ": cannot write the .npz file");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::IOError(path + ": cannot move the written file into place");
  return Status::OK();
}

Result<NpzArray> DecodeNpy(std::string_view b, const std::string& name, const NpzLimits& limits) {
  if (b.size() < 10 || b.substr(0, 6) != std::string_view("\x93NUMPY", 6))
    return Bad(name + ": not a .npy array (no NUMPY magic)");
  const int major = static_cast<unsigned char>(b[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = Get16(b.data() + 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) return Bad(name + ": truncated .npy header");
    hlen = Get32(b.data() + 8);
    hstart = 12;
  } else {
    return Bad(name + ": .npy format version " + std::to_string(major) + " is not supported");
  }
  if (hstart + hlen > b.size()) return Bad(name + ": truncated .npy header");
  const std::string header(b.substr(hstart, hlen));
  // A Python dict literal with exactly the keys descr, fortran_order and shape, padded with
  // spaces and a newline (numpy refuses anything else, and so do we: bytes after the dict or
  // an extra key are not an array we understand).
  {
    const size_t open = header.find_first_not_of(' ');
    const size_t close = header.rfind('}');
    if (open == std::string::npos || header[open] != '{' || close == std::string::npos) {
      return Bad(name + ": the .npy header is not a dict");
    }
    if (header.find_first_not_of(" \n", close + 1) != std::string::npos) {
      return Bad(name + ": the .npy header has bytes after its dict");
    }
    int seen[3] = {0, 0, 0};
    for (size_t q = header.find('\''); q != std::string::npos;) {
      const size_t e = header.find('\'', q + 1);
      if (e == std::string::npos) return Bad(name + ": the .npy header has an unclosed quote");
      size_t after = header.find_first_not_of(' ', e + 1);
      if (after != std::string::npos && header[after] == ':') {
        const std::string key = header.substr(q + 1, e - q - 1);
        const int k = key == "descr" ? 0 : key == "fortran_order" ? 1 : key == "shape" ? 2 : -1;
        if (k < 0) return Bad(name + ": the .npy header has an unknown key '" + key + "'");
        if (++seen[k] > 1) return Bad(name + ": the .npy header repeats key '" + key + "'");
      }
      q = header.find('\'', e + 1);
    }
  }
  auto field = [&](const std::string& key) -> std::string {
    const size_t k = header.find("'" + key + "'");
    if (k == std::string::npos) return "";
    size_t v = header.find(':', k);
    if (v == std::string::npos) return "";
    ++v;
    while (v < header.size() && header[v] == ' ') ++v;
    size_t e = v;
    if (header[v] == '\'') {
      e = header.find('\'', v + 1);
      return e == std::string::npos ? "" : header.substr(v + 1, e - v - 1);
    }
    if (header[v] == '(') {
      e = header.find(')', v);
      return e == std::string::npos ? "" : header.substr(v, e - v + 1);
    }
    while (e < header.size() && header[e] != ',' && header[e] != '}') ++e;
    return header.substr(v, e - v);
  };
  const std::string descr = field("descr");
  if (field("fortran_order") != "False")
    return Bad(name + ": Fortran-ordered arrays are not supported (save with np.ascontiguousarray)");
  const std::string shape = field("shape");
  if (shape.empty()) return Bad(name + ": the .npy header has no shape");
  NpzArray a;
  a.name = name;
  {
    std::string digits;
    int64_t n = 1;
    for (char c : shape.substr(1)) {
      if (c >= '0' && c <= '9') {
        digits += c;
        if (digits.size() > 12) return Bad(name + ": a dimension is too large");
      } else if (c == ',' || c == ')') {
        if (!digits.empty()) {
          const int64_t d = std::stoll(digits);
          a.dims.push_back(d);
          if (d > 0 && n > static_cast<int64_t>(limits.max_array_bytes) / d)
            return Bad(name + ": shape " + shape + " is larger than the limit");
          n *= d;
          digits.clear();
        }
      } else if (c != ' ') {
        return Bad(name + ": cannot read shape " + shape);
      }
    }
    if (a.dims.size() > 8) return Bad(name + ": rank " + std::to_string(a.dims.size()));
  }
  const int64_t n = graph::NumElements(a.dims);
  if (descr.size() != 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '=') ||
      descr[2] < '0' || descr[2] > '9')
    return Bad(name + ": dtype '" + descr + "' is not a little-endian number type");
  const char kind = descr[1];
  const int width = std::atoi(descr.c_str() + 2);
  if (!(width == 1 || width == 2 || width == 4 || width == 8) ||
      !(kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b') || (kind == 'f' && width == 1))
    return Bad(name + ": dtype '" + descr + "' is not supported (float16/32/64, int, uint, bool)");
  const size_t bytes = static_cast<size_t>(n) * width;
  if (bytes > limits.max_array_bytes) return Bad(name + ": the array is larger than the limit");
  const char* p = b.data() + hstart + hlen;
  if (b.size() - hstart - hlen != bytes)
    return Bad(name + ": shape " + shape + " of " + descr + " needs " + std::to_string(bytes) +
               " bytes, the array holds " + std::to_string(b.size() - hstart - hlen));
  if (kind == 'f') {
    a.dtype = graph::DType::kFloat32;
    a.f.resize(n);
    for (int64_t k = 0; k < n; ++k) {
      if (width == 4) {
        std::memcpy(&a.f[k], p + 4 * k, 4);
      } else if (width == 8) {
        double d;
        std::memcpy(&d, p + 8 * k, 8);
        a.f[k] = static_cast<float>(d);
      } else {  // IEEE half
        const uint16_t h = Get16(p + 2 * k);
        const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
        float v;
        if (exp == 0) {
          v = std::ldexp(static_cast<float>(man), -24);
        } else if (exp == 31) {
          v = man ? NAN : INFINITY;
        } else {
          v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
        }
        a.f[k] = sign ? -v : v;
      }
    }
  } else {
    a.dtype = graph::DType::kInt64;
    a.i.resize(n);
    for (int64_t k = 0; k < n; ++k) {
      const char* q = p + width * k;
      int64_t v = 0;
      if (kind == 'u' || kind == 'b') {
        uint64_t u = 0;
        std::memcpy(&u, q, width);
        v = static_cast<int64_t>(u);
      } else if (width == 1) {
        v = static_cast<int8_t>(*q);
      } else if (width == 2) {
        int16_t x;
        std::memcpy(&x, q, 2);
        v = x;
      } else if (width == 4) {
        int32_t x;
        std::memcpy(&x, q, 4);
        v = x;
      } else {
        std::memcpy(&v, q, 8);
      }
      a.i[k] = v;
    }
  }
  return a;
}

Result<std::vector<NpzArray>> DecodeNpz(std::string_view b, const NpzLimits& limits) {
  if (b.size() > limits.max_file_bytes) return Bad("the .npz file is larger than the limit");
  // End of central directory: the last signature within the final 64 KiB + 22 bytes.
  if (b.size() < 22) return Bad("not a .npz file (too short for a ZIP archive)");
  size_t eocd = std::string_view::npos;
  for (size_t k = b.size() - 22 + 1; k-- > 0 && b.size() - k <= 65536 + 22;)
    if (Get32(b.data() + k) == 0x06054b50) {
      eocd = k;
      break;
    }
  if (eocd == std::string_view::npos) return Bad("not a .npz file (no ZIP directory)");
  const size_t entries = Get16(b.data() + eocd + 10);
  const size_t cd_size = Get32(b.data() + eocd + 12), cd_off = Get32(b.data() + eocd + 16);
  if (entries == 0xffff || cd_off == 0xffffffffu) return Bad("ZIP64 .npz files are not supported");
  if (entries > limits.max_members) return Bad("the .npz has too many members");
  if (cd_off > eocd || cd_size > eocd - cd_off) return Bad("the .npz directory is corrupt");
  std::vector<NpzArray> out;
  size_t p = cd_off;
  for (size_t e = 0; e < entries; ++e) {
    if (p + 46 > eocd || Get32(b.data() + p) != 0x02014b50)
      return Bad("the .npz directory is corrupt at entry " + std::to_string(e));
    const uint16_t method = Get16(b.data() + p + 10);
    const uint32_t crc = Get32(b.data() + p + 16);
    const size_t csize = Get32(b.data() + p + 20), usize = Get32(b.data() + p + 24);
    const size_t nlen = Get16(b.data() + p + 28), xlen = Get16(b.data() + p + 30),
                 clen = Get16(b.data() + p + 32);
    const size_t local = Get32(b.data() + p + 42);
    if (p + 46 + nlen > eocd) return Bad("the .npz directory is corrupt");
    std::string name(b.substr(p + 46, nlen));
    p += 46 + nlen + xlen + clen;
    if (local + 30 > b.size() || Get32(b.data() + local) != 0x04034b50)
      return Bad(name + ": corrupt member header");
    const size_t data_at = local + 30 + Get16(b.data() + local + 26) + Get16(b.data() + local + 28);
    if (data_at > b.size() || csize > b.size() - data_at)
      return Bad(name + ": the member claims " + std::to_string(csize) +
                 " bytes past the end of the file");
    if (usize > limits.max_array_bytes + 4096) return Bad(name + ": the member is larger than the limit");
    std::string data;
    if (method == 0) {
      if (csize != usize) return Bad(name + ": stored member sizes differ");
      data.assign(b.substr(data_at, csize));
    } else if (method == 8) {
      data.resize(usize);
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Status::Internal("zlib init failed");
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + data_at));
      z.avail_in = static_cast<uInt>(csize);
      z.next_out = reinterpret_cast<Bytef*>(data.data());
      z.avail_out = static_cast<uInt>(usize);
      const int rc = inflate(&z, Z_FINISH);
      const size_t got = z.total_out;
      inflateEnd(&z);
      if (rc != Z_STREAM_END || got != usize) return Bad(name + ": corrupt deflated member");
    } else {
      return Bad(name + ": ZIP compression method " + std::to_string(method) + " is not supported");
    }
    if (static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(data.data()),
                                    static_cast<uInt>(data.size()))) != crc)
      return Bad(name + ": CRC mismatch (the file is corrupt)");
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
    FM_ASSIGN_OR_RETURN(NpzArray a, DecodeNpy(data, name, limits));
    out.push_back(std::move(a));
  }
  return out;
}

Result<std::vector<NpzArray>> ReadNpzFile(const std::string& path, const NpzLimits& limits) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return Status::NotFound(path + ": cannot open the .npz file");
  const std::streamoff size = f.tellg();
  if (size < 0 || static_cast<size_t>(size) > limits.max_file_bytes)
    return Bad(path + ": the .npz file is larger than the limit");
  std::string bytes(static_cast<size_t>(size), '\0');
  f.seekg(0);
  if (!f.read(bytes.data(), size)) return Status::IOError(path + ": cannot read the .npz file");
  auto r = DecodeNpz(bytes, limits);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

}  // namespace fedmesh
