// Identity: key generation, Ed25519 sign/verify (known-answer vectors and tampering), and
// that the X25519 keys are genuine CurveZMQ keys: libzmq derives the same public key from
// our secret, and a real CURVE connection over loopback works with them (and fails with
// the wrong server key).
#include "crypto/identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "crypto/z85.h"

namespace fedmesh {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Bytes(std::string_view s) { return {s.begin(), s.end()}; }

template <size_t N>
std::array<uint8_t, N> FromHex(std::string_view hex) {
  std::array<uint8_t, N> out{};
  EXPECT_EQ(hex.size(), 2 * N);
  for (size_t i = 0; i < N; ++i) {
    out[i] = static_cast<uint8_t>(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  }
  return out;
}

Identity MustGenerate(const std::string& name) {
  Result<Identity> id = Identity::Generate(name);
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  return std::move(id).value();
}

TEST(IdentityTest, GenerateGivesFreshKeysUnderTheName) {
  Identity a = MustGenerate("site-a");
  Identity b = MustGenerate("site-b");
  EXPECT_EQ(a.name(), "site-a");
  EXPECT_EQ(a.public_identity().name, "site-a");
  EXPECT_NE(a.public_identity().curve_public, b.public_identity().curve_public);
  EXPECT_NE(a.public_identity().sign_public, b.public_identity().sign_public);
  EXPECT_NE(a.public_identity().curve_public, CurveKey{});
  ASSERT_EQ(a.curve_secret().size(), kCurveKeySize);
  ASSERT_EQ(a.sign_seed().size(), kSignSeedSize);
  EXPECT_FALSE(
      std::equal(a.curve_secret().begin(), a.curve_secret().end(), b.curve_secret().begin()));
}

TEST(IdentityTest, GenerateRejectsBadNames) {
  for (const char* bad : {"", "-site", ".site", "site a", "site/a", "site\na", "s\xc3\xa9"}) {
    Result<Identity> id = Identity::Generate(bad);
    EXPECT_EQ(id.status().code(), StatusCode::kInvalidArgument) << "name '" << bad << "'";
  }
  EXPECT_EQ(Identity::Generate(std::string(65, 'a')).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Identity::Generate(std::string(64, 'a')).ok());
  EXPECT_TRUE(Identity::Generate("Hospital_7.eu-west").ok());
}

TEST(IdentityTest, BadNameMessagesQuoteOnlyPrintableNames) {
  EXPECT_EQ(ValidateSiteName("site a").message(),
            "site name 'site a' may only contain letters, digits, '.', '_' and '-'");
  const Status s = ValidateSiteName("site\x1b[31m");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "site name may only contain letters, digits, '.', '_' and '-'");
}

TEST(IdentityTest, SignatureVerifies) {
  Identity id = MustGenerate("site-a");
  const auto msg = Bytes("federation=f1 round=7 model=3 payload=abc");
  Result<Signature> sig = id.Sign(msg);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  EXPECT_TRUE(VerifySignature(id.public_identity(), msg, *sig));
  // Ed25519 is deterministic: the same key and message give the same signature.
  EXPECT_EQ(*id.Sign(msg), *sig);
}

TEST(IdentityTest, EmptyMessageSignsAndVerifies) {
  Identity id = MustGenerate("site-a");
  Result<Signature> sig = id.Sign({});
  ASSERT_TRUE(sig.ok());
  EXPECT_TRUE(VerifySignature(id.public_identity(), {}, *sig));
  EXPECT_FALSE(VerifySignature(id.public_identity(), Bytes("x"), *sig));
}

TEST(IdentityTest, TamperedMessageFailsVerification) {
  Identity id = MustGenerate("site-a");
  const auto msg = Bytes("round=7 model=3");
  const Signature sig = *id.Sign(msg);
  for (size_t i = 0; i < msg.size(); ++i) {
    auto tampered = msg;
    tampered[i] ^= 0x01;
    EXPECT_FALSE(VerifySignature(id.public_identity(), tampered, sig)) << "byte " << i;
  }
  auto longer = msg;
  longer.push_back('!');
  EXPECT_FALSE(VerifySignature(id.public_identity(), longer, sig));
  EXPECT_FALSE(VerifySignature(id.public_identity(),
                               std::span<const uint8_t>(msg).first(msg.size() - 1), sig));
}

TEST(IdentityTest, TamperedSignatureFailsVerification) {
  Identity id = MustGenerate("site-a");
  const auto msg = Bytes("round=7 model=3");
  const Signature sig = *id.Sign(msg);
  for (size_t i = 0; i < sig.size(); ++i) {
    Signature bad = sig;
    bad[i] ^= 0x80;
    EXPECT_FALSE(VerifySignature(id.public_identity(), msg, bad)) << "byte " << i;
  }
}

TEST(IdentityTest, WrongLengthSignatureIsRejected) {
  Identity id = MustGenerate("site-a");
  const auto msg = Bytes("m");
  const Signature sig = *id.Sign(msg);
  EXPECT_FALSE(VerifySignature(id.public_identity(), msg, std::span(sig).first(63)));
  std::vector<uint8_t> longer(sig.begin(), sig.end());
  longer.push_back(0);
  EXPECT_FALSE(VerifySignature(id.public_identity(), msg, longer));
  EXPECT_FALSE(VerifySignature(id.public_identity(), msg, {}));
}

TEST(IdentityTest, AnotherIdentitysKeyFailsVerification) {
  Identity a = MustGenerate("site-a");
  Identity b = MustGenerate("site-b");
  const auto msg = Bytes("update");
  const Signature sig = *a.Sign(msg);
  EXPECT_FALSE(VerifySignature(b.public_identity(), msg, sig));
  // Only the signing key matters: a's name on b's key does not help.
  PublicIdentity forged = b.public_identity();
  forged.name = "site-a";
  EXPECT_FALSE(VerifySignature(forged, msg, sig));
}

// RFC 8032 section 7.1, TEST 1 (empty message) and TEST 2 (one byte 0x72).
TEST(IdentityTest, Ed25519KnownAnswers) {
  const auto seed = FromHex<32>("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60");
  const auto curve =
      FromHex<32>("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");  // RFC 7748
  Result<Identity> id = Identity::FromSecrets("kat", curve, seed);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->public_identity().sign_public,
            FromHex<32>("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"));
  EXPECT_EQ(*id->Sign({}),
            FromHex<64>("e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
                        "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"));

  const auto seed2 =
      FromHex<32>("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb");
  Result<Identity> id2 = Identity::FromSecrets("kat2", curve, seed2);
  ASSERT_TRUE(id2.ok());
  const std::array<uint8_t, 1> msg = {0x72};
  EXPECT_EQ(*id2->Sign(msg),
            FromHex<64>("92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
                        "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"));
}

// RFC 7748 section 6.1: Alice's X25519 key pair.
TEST(IdentityTest, X25519KnownAnswer) {
  const auto curve =
      FromHex<32>("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
  Result<Identity> id = Identity::FromSecrets("alice", curve, std::array<uint8_t, 32>{});
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->public_identity().curve_public,
            FromHex<32>("8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a"));
}

TEST(IdentityTest, FromSecretsRebuildsTheSameIdentity) {
  Identity a = MustGenerate("site-a");
  Result<Identity> b = Identity::FromSecrets("site-a", a.curve_secret(), a.sign_seed());
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->public_identity(), a.public_identity());
  const auto msg = Bytes("same key, same signature");
  EXPECT_EQ(*b->Sign(msg), *a.Sign(msg));
}

TEST(IdentityTest, FromSecretsRejectsWrongSizes) {
  const std::array<uint8_t, 31> short_key{};
  const std::array<uint8_t, 32> key{};
  EXPECT_EQ(Identity::FromSecrets("s", short_key, key).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Identity::FromSecrets("s", key, short_key).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(Identity::FromSecrets("", key, key).status().code(), StatusCode::kInvalidArgument);
}

TEST(IdentityTest, Z85FormsRoundTrip) {
  Identity id = MustGenerate("site-a");
  const std::string pub = id.public_identity().curve_public_z85();
  ASSERT_EQ(pub.size(), 40u);
  CurveKey decoded{};
  ASSERT_TRUE(Z85Decode(pub, decoded));
  EXPECT_EQ(decoded, id.public_identity().curve_public);

  const std::string secret = id.curve_secret_z85();
  ASSERT_EQ(secret.size(), 40u);
  std::array<uint8_t, 32> secret_bytes{};
  ASSERT_TRUE(Z85Decode(secret, secret_bytes));
  EXPECT_TRUE(std::equal(secret_bytes.begin(), secret_bytes.end(), id.curve_secret().begin()));

  SignPublicKey sign{};
  ASSERT_TRUE(Z85Decode(id.public_identity().sign_public_z85(), sign));
  EXPECT_EQ(sign, id.public_identity().sign_public);
}

TEST(IdentityTest, ZmqDerivesOurCurvePublicKeyFromOurSecret) {
  if (!zmq_has("curve")) GTEST_SKIP() << "libzmq was built without CURVE support";
  for (int i = 0; i < 5; ++i) {
    Identity id = MustGenerate("site-" + std::to_string(i));
    char derived[41] = {};
    ASSERT_EQ(zmq_curve_public(derived, id.curve_secret_z85().c_str()), 0);
    EXPECT_EQ(std::string(derived), id.public_identity().curve_public_z85());
  }
}

// The keys used the way the transport will: a CURVE server with the aggregator's secret
// (as 32 raw bytes) and a client that knows the server's Z85 public key.
class ZmqCurveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!zmq_has("curve")) GTEST_SKIP() << "libzmq was built without CURVE support";
    ctx_ = zmq_ctx_new();
    ASSERT_NE(ctx_, nullptr);
  }
  void TearDown() override {
    for (void* s : sockets_) zmq_close(s);
    if (ctx_ != nullptr) zmq_ctx_term(ctx_);
  }
  void* Socket(int type, int recv_timeout_ms) {
    void* s = zmq_socket(ctx_, type);
    EXPECT_NE(s, nullptr);
    const int linger = 0;
    EXPECT_EQ(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)), 0);
    EXPECT_EQ(zmq_setsockopt(s, ZMQ_RCVTIMEO, &recv_timeout_ms, sizeof(recv_timeout_ms)), 0);
    sockets_.push_back(s);
    return s;
  }
  // Binds a CURVE server on a port the OS picks and returns its endpoint.
  std::string BindServer(void* server, const Identity& id) {
    const int on = 1;
    EXPECT_EQ(zmq_setsockopt(server, ZMQ_CURVE_SERVER, &on, sizeof(on)), 0);
    EXPECT_EQ(zmq_setsockopt(server, ZMQ_CURVE_SECRETKEY, id.curve_secret().data(),
                             id.curve_secret().size()),
              0);
    EXPECT_EQ(zmq_bind(server, "tcp://127.0.0.1:*"), 0);
    char endpoint[256] = {};
    size_t len = sizeof(endpoint);
    EXPECT_EQ(zmq_getsockopt(server, ZMQ_LAST_ENDPOINT, endpoint, &len), 0);
    return endpoint;
  }
  void ConnectClient(void* client, const Identity& id, const std::string& server_key_z85,
                     const std::string& endpoint) {
    const std::string pub = id.public_identity().curve_public_z85();
    const std::string secret = id.curve_secret_z85();
    EXPECT_EQ(zmq_setsockopt(client, ZMQ_CURVE_SERVERKEY, server_key_z85.c_str(), 41), 0);
    EXPECT_EQ(zmq_setsockopt(client, ZMQ_CURVE_PUBLICKEY, pub.c_str(), 41), 0);
    EXPECT_EQ(zmq_setsockopt(client, ZMQ_CURVE_SECRETKEY, secret.c_str(), 41), 0);
    EXPECT_EQ(zmq_connect(client, endpoint.c_str()), 0);
  }

  void* ctx_ = nullptr;
  std::vector<void*> sockets_;
};

TEST_F(ZmqCurveTest, ClientWithTheServersPublicKeyGetsThrough) {
  Identity server_id = MustGenerate("aggregator");
  Identity client_id = MustGenerate("site-a");
  void* server = Socket(ZMQ_PULL, 10000);
  void* client = Socket(ZMQ_PUSH, 10000);
  const std::string endpoint = BindServer(server, server_id);
  ConnectClient(client, client_id, server_id.public_identity().curve_public_z85(), endpoint);

  ASSERT_EQ(zmq_send(client, "hello", 5, 0), 5);
  char buf[16] = {};
  ASSERT_EQ(zmq_recv(server, buf, sizeof(buf), 0), 5) << zmq_strerror(zmq_errno());
  EXPECT_EQ(std::string(buf, 5), "hello");
}

TEST_F(ZmqCurveTest, ClientWithAnotherServerKeyIsNotHeard) {
  Identity server_id = MustGenerate("aggregator");
  Identity impostor = MustGenerate("impostor");
  Identity client_id = MustGenerate("site-a");
  void* server = Socket(ZMQ_PULL, 500);
  void* client = Socket(ZMQ_PUSH, 500);
  const std::string endpoint = BindServer(server, server_id);
  ConnectClient(client, client_id, impostor.public_identity().curve_public_z85(), endpoint);

  const int sndtimeo = 0;
  ASSERT_EQ(zmq_setsockopt(client, ZMQ_SNDTIMEO, &sndtimeo, sizeof(sndtimeo)), 0);
  zmq_send(client, "hello", 5, 0);  // may be queued or refused (no peer): both are fine
  char buf[16] = {};
  EXPECT_EQ(zmq_recv(server, buf, sizeof(buf), 0), -1);
  EXPECT_EQ(zmq_errno(), EAGAIN);
}

}  // namespace
}  // namespace fedmesh
