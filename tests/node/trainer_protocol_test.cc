// The external trainer's message format (node/trainer_protocol.h): every malformed prefix,
// header and tensor list a trainer could send is refused with an error naming it.
#include "node/trainer_protocol.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace fedmesh::trainer {
namespace {

using ::testing::HasSubstr;

std::array<uint8_t, kPrefixBytes> Prefix(const char* magic, uint32_t h, uint64_t p) {
  auto b = EncodePrefix(h, p);
  std::memcpy(b.data(), magic, 4);
  return b;
}

TEST(TrainerProtocolTest, PrefixRoundTripsAndRefusesGarbage) {
  auto ok = ParsePrefix(EncodePrefix(123, 4096), 4096);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->header_length, 123u);
  EXPECT_EQ(ok->payload_length, 4096u);
  auto garbage = ParsePrefix(Prefix("GARB", 10, 0), 0);
  ASSERT_FALSE(garbage.ok());
  EXPECT_THAT(garbage.status().message(), HasSubstr("not a fedmesh trainer message"));
  EXPECT_THAT(garbage.status().message(), HasSubstr("47 41 52 42"));
  EXPECT_THAT(ParsePrefix(EncodePrefix(1, 0), 0).status().message(), HasSubstr("header is 1 bytes"));
  EXPECT_THAT(ParsePrefix(EncodePrefix(kMaxHeaderBytes + 1, 0), 0).status().message(),
              HasSubstr("must be 2.."));
  auto big = ParsePrefix(EncodePrefix(10, 4097), 4096);
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("4097 payload bytes; at most 4096"));
}

TEST(TrainerProtocolTest, HelloResultAndErrorParse) {
  auto hello = ParseTrainerHeader(R"({"type":"hello","protocol":1,"num_examples":6000,"name":"pytorch"})");
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  EXPECT_EQ(hello->type, TrainerMessage::Type::kHello);
  EXPECT_EQ(hello->hello_examples, std::optional<uint64_t>(6000));
  EXPECT_EQ(hello->name, "pytorch");
  auto result = ParseTrainerHeader(
      R"({"type":"result","task":7,"num_examples":10,"metrics":{"loss":0.5,"accuracy":0.75},
          "tensors":[{"name":"fc.weight","shape":[2,3],"dtype":"float32"},{"name":"s","shape":[]}]})");
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->task_id, 7u);
  EXPECT_EQ(result->num_examples, 10u);
  EXPECT_DOUBLE_EQ(result->metrics.at("accuracy"), 0.75);
  ASSERT_EQ(result->tensors.size(), 2u);
  EXPECT_EQ(result->tensors[0], (TensorSpec{"fc.weight", {2, 3}}));
  EXPECT_EQ(result->tensors[1].elements(), 1u);
  EXPECT_EQ(PayloadBytes(result->tensors), 4u * 7);
  auto error = ParseTrainerHeader(R"({"type":"error","task":3,"message":"CUDA out of memory\n"})");
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->type, TrainerMessage::Type::kError);
  EXPECT_EQ(error->message, "CUDA out of memory?");  // control characters never reach a log
}

TEST(TrainerProtocolTest, MalformedHeadersAreRefusedWithTheField) {
  struct Case {
    const char* json;
    const char* expect;
  };
  const Case cases[] = {
      {"not json", "not valid JSON"},
      {"[1,2]", "not a JSON object"},
      {R"({"task":1})", "no \"type\""},
      {R"({"type":"reboot","task":1})", "unknown type \"reboot\""},
      {R"({"type":"hello","protocol":2})", "speaks protocol 2"},
      {R"({"type":"hello"})", "no \"protocol\""},
      {R"({"type":"result","num_examples":1})", "no \"task\""},
      {R"({"type":"result","task":1,"num_examples":-5})", "\"num_examples\": -5"},
      {R"({"type":"result","task":1,"num_examples":2.5})", "\"num_examples\": 2.5"},
      {R"({"type":"result","task":1,"num_examples":"10"})", "integer >= 0"},
      {R"({"type":"result","task":1,"num_examples":1,"metrics":[1]})", "not an object"},
      {R"({"type":"result","task":1,"num_examples":1,"metrics":{"acc uracy":1}})", "\"acc uracy\""},
      {R"({"type":"result","task":1,"num_examples":1,"metrics":{"loss":"low"}})", "finite numbers"},
      {R"({"type":"result","task":1,"num_examples":1,"metrics":{"loss":1e999}})", "not valid JSON"},
      {R"({"type":"result","task":1,"num_examples":1,"tensors":{}})", "must be a list"},
      {R"({"type":"result","task":1,"num_examples":1,"tensors":[{"shape":[1]}]})", "non-empty string \"name\""},
      {R"({"type":"result","task":1,"num_examples":1,"tensors":[{"name":"w","shape":[1],"dtype":"float64"}]})",
       "float32 is the only dtype"},
      {R"({"type":"result","task":1,"num_examples":1,"tensors":[{"name":"w","shape":[-1]}]})", "dimension -1"},
      {R"({"type":"result","task":1,"num_examples":1,"tensors":[{"name":"w"}]})", "needs a \"shape\""},
      {R"({"type":"result","task":1,"num_examples":1,"tensors":[{"name":"w","shape":[1,1,1,1,1,1,1,1,1]}]})",
       "rank 9"},
      {R"({"type":"result","task":1,"num_examples":1,"tensors":[{"name":"w","shape":[1048576,1048577]}]})",
       "over 2^40 elements"},
  };
  for (const Case& c : cases) {
    auto m = ParseTrainerHeader(c.json);
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(m.status().message(), HasSubstr(c.expect)) << c.json;
  }
}

TEST(TrainerProtocolTest, DeeplyNestedJsonIsRefusedWithoutCrashing) {
  const std::string deep = "{\"type\":\"result\",\"task\":1,\"x\":" + std::string(200000, '[') +
                           std::string(200000, ']') + "}";
  auto m = ParseTrainerHeader(deep);
  // Parsed (the extra key is ignored) or refused: what matters is no stack overflow.
  if (m.ok()) {
    EXPECT_EQ(m->type, TrainerMessage::Type::kResult);
  }
  auto unbalanced = ParseTrainerHeader(std::string(500000, '['));
  EXPECT_FALSE(unbalanced.ok());
}

TEST(TrainerProtocolTest, ResultTensorsMustMatchTheTask) {
  const std::vector<TensorSpec> task = {{"w", {2, 3}}, {"b", {3}}};
  auto same = MatchTensors(task, {{"b", {3}}, {"w", {2, 3}}});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, (std::vector<size_t>{1, 0}));
  EXPECT_THAT(MatchTensors(task, {{"w", {2, 3}}}).status().message(),
              HasSubstr("lacks tensor 'b' (shape [3])"));
  EXPECT_THAT(MatchTensors(task, {{"w", {2, 3}}, {"b", {3}}, {"extra", {1}}}).status().message(),
              HasSubstr("sent tensor 'extra', which the federation's model does not have"));
  EXPECT_THAT(MatchTensors(task, {{"w", {3, 2}}, {"b", {3}}}).status().message(),
              HasSubstr("'w' with shape [3, 2]; the federation's model has [2, 3]"));
  EXPECT_THAT(MatchTensors(task, {{"w", {2, 3}}, {"w", {2, 3}}}).status().message(), HasSubstr("twice"));
}

TEST(TrainerProtocolTest, TaskHeaderIsTheDocumentedJson) {
  TaskRequest r;
  r.kind = "fit";
  r.task_id = 9;
  r.round = 4;
  r.node_id = "site \"1\"";
  r.epochs = 2;
  r.lr = 0.125;
  r.batch = 64;
  r.seed = 18446744073709551615ull;
  r.deadline_unix_ms = 1764160000000;
  r.tensors = {{"conv1.weight", {16, 1, 5, 5}}, {"s", {}}};
  const auto j = nlohmann::json::parse(EncodeTaskHeader(r));
  EXPECT_EQ(j["type"], "fit");
  EXPECT_EQ(j["task"], 9);
  EXPECT_EQ(j["round"], 4);
  EXPECT_EQ(j["node_id"], "site \"1\"");
  EXPECT_EQ(j["epochs"], 2);
  EXPECT_EQ(j["steps"], 0);
  EXPECT_EQ(j["lr"], 0.125);
  EXPECT_EQ(j["batch"], 64);
  EXPECT_EQ(j["seed"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(j["loss"], "cross_entropy");
  EXPECT_EQ(j["deadline_unix_ms"].get<uint64_t>(), 1764160000000ull);
  ASSERT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][0]["name"], "conv1.weight");
  EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::parse("[16,1,5,5]"));
  EXPECT_EQ(j["tensors"][0]["dtype"], "float32");
  EXPECT_EQ(j["tensors"][1]["shape"], nlohmann::json::array());
  EXPECT_EQ(nlohmann::json::parse(EncodeShutdownHeader())["type"], "shutdown");
}

}  // namespace
}  // namespace fedmesh::trainer
