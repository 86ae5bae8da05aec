#include "config/zmq_endpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

TEST(ZmqEndpoint, TheFormsZeroMqTakesPassAndTyposAreNamed) {
  for (const char* ok : {"tcp://127.0.0.1:5555", "tcp://aggregator.example.org:443", "tcp://[::1]:7100",
                         "ipc:///run/fedmesh/agg.sock", "inproc://ring-0"}) {
    EXPECT_TRUE(CheckZmqEndpoint(ok, EndpointUse::kConnect).ok()) << ok;
    EXPECT_TRUE(CheckZmqEndpoint(ok, EndpointUse::kBind).ok()) << ok;
  }
  for (const char* bind_only : {"tcp://*:5555", "tcp://127.0.0.1:*", "tcp://0.0.0.0:*"}) {
    EXPECT_TRUE(CheckZmqEndpoint(bind_only, EndpointUse::kBind).ok()) << bind_only;
    EXPECT_THAT(CheckZmqEndpoint(bind_only, EndpointUse::kConnect).message(), HasSubstr("is for binding")) << bind_only;
  }
  EXPECT_THAT(CheckZmqEndpoint("htp://nowhere:5555", EndpointUse::kConnect).message(),
              HasSubstr("\"htp://nowhere:5555\" is not a ZeroMQ endpoint: it must start with tcp://"));
  EXPECT_THAT(CheckZmqEndpoint("aggregator:5555", EndpointUse::kConnect).message(), HasSubstr("must start with tcp://"));
  EXPECT_THAT(CheckZmqEndpoint("tcp://aggregator", EndpointUse::kConnect).message(), HasSubstr("needs a host and a port"));
  for (const char* port : {"tcp://h:0", "tcp://h:65536", "tcp://h:55x", "tcp://h:", "tcp://h:1234567"}) {
    EXPECT_THAT(CheckZmqEndpoint(port, EndpointUse::kBind).message(), HasSubstr("the port must be a number from 1 to 65535"))
        << port;
  }
  EXPECT_EQ(CheckZmqEndpoint("ipc://", EndpointUse::kBind).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fedmesh
