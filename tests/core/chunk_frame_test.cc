// core/wire/chunk_frame.h writes and reads chunk frames by hand (issue 26 item 10): the bytes
// must be exactly protobuf's, and the reader must accept exactly what protobuf accepts.
#include "core/wire/chunk_frame.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/wire/fedmesh.pb.h"

namespace fedmesh::wire {
namespace {

std::vector<uint8_t> ProtobufChunkFrame(const pb::Header& h, uint64_t id, uint32_t index,
                                        uint32_t count, const std::string& data) {
  pb::ChunkFrame f;
  *f.mutable_header() = h;
  f.mutable_chunk()->set_transfer_id(id);
  f.mutable_chunk()->set_index(index);
  f.mutable_chunk()->set_count(count);
  f.mutable_chunk()->set_data(data);
  std::string out;
  EXPECT_TRUE(f.SerializeToString(&out));
  return {out.begin(), out.end()};
}

TEST(ChunkFrame, BytesAreProtobufsAndParseBack) {
  pb::Header h;
  h.set_protocol_version(1);
  h.set_type(pb::MESSAGE_TYPE_CHUNK);
  h.set_federation_id("fed");
  h.set_sender_id("site-a");
  h.set_round(3);
  h.set_message_id(77);
  std::string hb;
  ASSERT_TRUE(h.SerializeToString(&hb));
  const std::span<const uint8_t> header(reinterpret_cast<const uint8_t*>(hb.data()), hb.size());
  for (uint32_t index : {0u, 1u, 200u, 70000u}) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{127}, size_t{128}, size_t{300000}}) {
      std::string data(len, '\0');
      for (size_t i = 0; i < len; ++i) data[i] = static_cast<char>(i * 31 + index);
      const auto mine = WriteChunkFrame(
          header, 77, index, 70001,
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), len));
      EXPECT_EQ(mine, ProtobufChunkFrame(h, 77, index, 70001, data)) << index << " " << len;
      auto v = ParseChunkFrame(mine);
      ASSERT_TRUE(v.has_value());
      EXPECT_TRUE(v->has_header && v->has_chunk);
      EXPECT_EQ(std::string(v->header.begin(), v->header.end()), hb);
      EXPECT_EQ(v->transfer_id, 77u);
      EXPECT_EQ(v->index, index);
      EXPECT_EQ(v->count, 70001u);
      EXPECT_EQ(std::string(v->data.begin(), v->data.end()), data);
    }
  }
}

TEST(ChunkFrame, MalformedBytesAreRefusedAndMissingPartsReported) {
  pb::Header h;
  h.set_sender_id("s");
  const auto good = ProtobufChunkFrame(h, 1, 2, 3, std::string(1000, 'x'));
  for (size_t cut = 1; cut < good.size(); cut += 97) {  // every truncation is malformed
    std::vector<uint8_t> t(good.begin(), good.begin() + cut);
    auto v = ParseChunkFrame(t);
    EXPECT_FALSE(v.has_value() && v->has_chunk && v->data.size() == 1000) << cut;
  }
  const std::vector<uint8_t> overlong = {0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                         0xff, 0xff, 0xff, 0x01};
  EXPECT_FALSE(ParseChunkFrame(overlong).has_value());
  pb::ChunkFrame only_header;
  *only_header.mutable_header() = h;
  std::string s;
  ASSERT_TRUE(only_header.SerializeToString(&s));
  auto v = ParseChunkFrame(std::vector<uint8_t>(s.begin(), s.end()));
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(v->has_header);
  EXPECT_FALSE(v->has_chunk);
  // An unknown field (number 5, varint) is skipped as protobuf skips it.
  std::vector<uint8_t> extra = good;
  extra.push_back((5 << 3) | 0);
  extra.push_back(42);
  auto skipped = ParseChunkFrame(extra);
  ASSERT_TRUE(skipped.has_value());
  EXPECT_EQ(skipped->data.size(), 1000u);
}

}  // namespace
}  // namespace fedmesh::wire
