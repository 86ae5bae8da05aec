#include "vertical/cut_wire.h"

#include "collective/wire_floats.h"
#include "core/codec/int8_quantizer.h"

namespace fedmesh::vertical {
namespace {

const codec::Int8Quantizer& Int8() {
  static const codec::Int8Quantizer q(kCutInt8Block);
  return q;
}
collective::WireType FloatWire(CutWire w) { return static_cast<collective::WireType>(w); }

}  // namespace

const char* CutWireName(CutWire w) {
  switch (w) {
    case CutWire::kFloat32: return "float32";
    case CutWire::kFloat16: return "fp16";
    case CutWire::kBFloat16: return "bf16";
    case CutWire::kInt8: return "int8";
  }
  return "?";
}

Result<CutWire> CutWireOfCompression(std::string_view compression) {
  if (compression == "int8") return CutWire::kInt8;
  auto w = collective::WireTypeOfCompression(compression);
  if (!w.ok()) {
    return Status::InvalidArgument("split compression \"" + std::string(compression) +
                                   "\": use none (float32), fp16, bf16 or int8");
  }
  return static_cast<CutWire>(*w);
}

uint64_t CutWireBytes(CutWire w, uint64_t count) {
  if (w == CutWire::kInt8) return Int8().EncodedBytes(count);
  return count * collective::WireBytes(FloatWire(w));
}

Status EncodeCutValues(CutWire w, std::span<const float> values, std::string& out) {
  if (w != CutWire::kInt8) return collective::EncodeWireFloats(FloatWire(w), values, out);
  out.resize(CutWireBytes(w, values.size()));
  return Int8().Encode(values, /*seed=*/0, reinterpret_cast<uint8_t*>(out.data()));
}

Status DecodeCutValues(CutWire w, std::string_view in, std::span<float> out) {
  if (in.size() != CutWireBytes(w, out.size())) {
    return Status::Corruption(std::string(CutWireName(w)) + " values: " + std::to_string(in.size()) + " bytes for " +
                              std::to_string(out.size()) + " values, expected " +
                              std::to_string(CutWireBytes(w, out.size())));
  }
  if (w != CutWire::kInt8) return collective::DecodeWireFloats(FloatWire(w), in, out);
  return Int8().Decode({reinterpret_cast<const uint8_t*>(in.data()), in.size()}, out);
}

}  // namespace fedmesh::vertical
