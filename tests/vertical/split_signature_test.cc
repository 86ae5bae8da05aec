// Per-message signatures of split training (vertical/split_signature.h): a signed message
// verifies for its receiver and decodes to what was sent; a flipped byte, another sender's
// key, another receiver, an unsigned message and a message signed twice are refused, naming
// the sender; so are another federation and a cleared signed flag.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "vertical/split_messages.h"
#include "vertical/split_signature.h"

namespace fedmesh::vertical {
namespace {

using ::testing::HasSubstr;

SplitMessage Gradients() {
  SplitMessage m;
  m.type = SplitMessageType::kGradients;
  m.training = true;
  m.step = 12;
  m.micro = 3;
  m.rows = 2;
  m.cols = 3;
  m.values = {0.5f, -1, 2, 0.25f, 0, -3};
  return m;
}

TEST(SplitSignatureTest, ASignedMessageVerifiesForItsReceiverOnly) {
  Identity hospital = Identity::Generate("hospital").value(), lab = Identity::Generate("lab").value(),
           other = Identity::Generate("insurer").value();
  std::string plain = EncodeSplitMessage(Gradients()).value();
  auto signed_bytes = SignSplitMessage(hospital, "fed", "lab", plain);
  ASSERT_TRUE(signed_bytes.ok()) << signed_bytes.status().ToString();
  EXPECT_EQ(signed_bytes->size(), plain.size() + 64);
  EXPECT_TRUE(VerifySplitMessage(hospital.public_identity(), "fed", "lab", *signed_bytes).ok());
  auto m = DecodeSplitMessage(*signed_bytes);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->signed_by_sender);
  EXPECT_TRUE(m->training);
  EXPECT_EQ(m->step, 12u);
  EXPECT_EQ(m->values, Gradients().values);

  // Every byte counts: a flipped value byte, a flipped flag, a flipped signature byte.
  for (size_t at : {size_t{60}, size_t{6}, signed_bytes->size() - 1}) {
    std::string t = *signed_bytes;
    t[at] = static_cast<char>(t[at] ^ 1);
    EXPECT_THAT(VerifySplitMessage(hospital.public_identity(), "fed", "lab", t).message(),
                ::testing::AnyOf(HasSubstr("bad signature"), HasSubstr("unsigned")))
        << "byte " << at;
  }
  // The signed flag cleared: the message reads as unsigned. Another federation: refused.
  std::string cleared = *signed_bytes;
  cleared[6] = static_cast<char>(cleared[6] & ~2);
  EXPECT_THAT(VerifySplitMessage(hospital.public_identity(), "fed", "lab", cleared).message(), HasSubstr("is unsigned"));
  EXPECT_THAT(VerifySplitMessage(hospital.public_identity(), "other-fed", "lab", *signed_bytes).message(),
              HasSubstr("bad signature"));
  // Not the claimed sender's key, or meant for another party.
  const Status forged = VerifySplitMessage(other.public_identity(), "fed", "lab", *signed_bytes);
  EXPECT_EQ(forged.code(), StatusCode::kPermissionDenied);
  EXPECT_THAT(forged.message(), HasSubstr("split message from insurer has a bad signature"));
  EXPECT_THAT(VerifySplitMessage(hospital.public_identity(), "fed", "insurer", *signed_bytes).message(),
              HasSubstr("not meant for insurer"));
  // A message with a valid signature from `other` claims to be from hospital: refused.
  auto by_other = SignSplitMessage(other, "fed", "lab", plain).value();
  EXPECT_THAT(VerifySplitMessage(hospital.public_identity(), "fed", "lab", by_other).message(), HasSubstr("bad signature"));
  // Unsigned, truncated, signed twice.
  EXPECT_THAT(VerifySplitMessage(hospital.public_identity(), "fed", "lab", plain).message(),
              HasSubstr("split message from hospital is unsigned"));
  EXPECT_THAT(VerifySplitMessage(hospital.public_identity(), "fed", "lab", "FMSP").message(), HasSubstr("unsigned"));
  EXPECT_EQ(SignSplitMessage(hospital, "fed", "lab", *signed_bytes).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SignSplitMessage(hospital, "fed", "lab", "not a split message at all, long enough to pass the size check").status().code(),
            StatusCode::kInvalidArgument);
  // The decoder alone never takes the signature for values.
  EXPECT_THAT(DecodeSplitMessage(signed_bytes->substr(0, signed_bytes->size() - 1)).status().message(),
              HasSubstr("expected"));
  (void)lab;
}

}  // namespace
}  // namespace fedmesh::vertical
