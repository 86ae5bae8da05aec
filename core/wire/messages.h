// The messages fedmesh nodes, aggregators and gossip peers exchange, as plain structs,
// secure aggregation's included.
// These are the only wire types the rest of the code sees: core/wire/wire_codec.h turns
// them into frames and back, and is the one place that touches the generated protobuf
// types (docs/wire.md describes the bytes). Tensor payloads are kept as encoded bytes so
// that codecs (fp16, topk, zstd, ...) can sit between the trainer and the wire; codec
// "none" means raw little-endian float32 (see FloatPayload / PayloadFloats).
// Thread-safety: value types, safe to copy between threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/wire/payload_digest.h"

namespace fedmesh::wire {

// Protocol version this build writes and the only one it reads (docs/wire.md, Versioning).
inline constexpr uint32_t kProtocolVersion = 1;

// Codec chain name for uncoded payloads: element_count little-endian IEEE-754 float32.
inline constexpr std::string_view kCodecNone = "none";
// Most metrics an evaluation FitResult may carry (core/metrics.h gives a handful per task).
inline constexpr size_t kMaxEvalMetrics = 64;
// Most fine-tuning or local-only epochs an evaluation task may ask for.
inline constexpr uint32_t kMaxEvalEpochs = 10000;
// Bounds of federated statistics messages: features per site, histogram bins, t-digest
// centroids per feature, classes in the label counts.
inline constexpr size_t kMaxStatsFeatures = 4096;
inline constexpr size_t kMaxStatsBins = 1024;
inline constexpr size_t kMaxStatsCentroids = 1024;
inline constexpr size_t kMaxStatsClasses = 65536;

// Fields every message carries. The protocol version is not here: Encode always writes
// kProtocolVersion and decoding rejects any other.
struct Header {
  std::string federation_id;  // required: 1..max_id_bytes bytes of printable ASCII, no space
  std::string sender_id;      // required: same rules
  uint64_t round = 0;
  uint64_t model_version = 0;
  uint64_t message_id = 0;  // sender-chosen; unique among the sender's messages in flight

  friend bool operator==(const Header&, const Header&) = default;
};

// Element type of the dense tensor a payload decodes to.
enum class DType : uint32_t {
  kFloat32 = 1,
  kUint32 = 2,  // words of Z_2^32, codec "none" only; only SecAggMaskedInput carries them
};

// A tensor payload: one or more tensors, concatenated, encoded by a codec chain.
struct TensorPayload {
  std::string codec = std::string(kCodecNone);
  DType dtype = DType::kFloat32;
  uint64_t element_count = 0;  // dense elements after decoding, all tensors together
  // Dims of each tensor in order (row-major, every dim >= 1, {} = a scalar). Empty: one
  // flat vector of element_count elements. When present, their products sum to
  // element_count.
  std::vector<std::vector<uint64_t>> shapes;
  std::vector<uint8_t> bytes;  // the encoded payload
  // The digest of `bytes` it traveled with (payload_digest.h). Set by decoding, after the
  // check against the received bytes. Encode computes the hash itself (of
  // WireLimits::payload_digest's kind, or of this one's kind when set); if this is set, it
  // must match (a caller that signed the hash then changed the bytes gets an error, not a
  // silently different message).
  std::optional<PayloadDigest> digest;

  friend bool operator==(const TensorPayload&, const TensorPayload&) = default;
};

// Node -> aggregator: join the federation.
struct Register {
  std::string node_id;
  uint64_t num_examples = 0;
  std::vector<std::string> capabilities;  // e.g. "codec:fp16", "device:cuda"; id rules

  friend bool operator==(const Register&, const Register&) = default;
};

// Aggregator -> node: registration accepted.
struct RegisterAck {
  std::string node_id;
  uint64_t heartbeat_interval_ms = 0;

  friend bool operator==(const RegisterAck&, const RegisterAck&) = default;
};

// Secure aggregation (SecAgg+, crypto/secagg/). Fixed sizes of its byte fields; the
// crypto side static_asserts that its own constants agree (crypto/secagg/secagg_wire.cc).
inline constexpr size_t kSecAggKeyBytes = 32;        // an X25519 public key
inline constexpr size_t kSecAggSignatureBytes = 64;  // an Ed25519 signature
inline constexpr size_t kSecAggGraphSeedBytes = 32;  // the public seed of the round's graph
inline constexpr size_t kSecAggShareBytes = 32;      // one Shamir share of a 32-byte secret
// A sealed box of two shares: nonce (24) || ciphertext (2 x 32) || tag (16).
inline constexpr size_t kSecAggShareBoxBytes = 24 + 2 * kSecAggShareBytes + 16;
// Most graph neighbours of one client (Shamir x-coordinates are 1..255, the degree is even),
// which bounds the boxes of ShareKeys and ForwardedShares and the shares of UnmaskShares.
inline constexpr size_t kSecAggMaxNeighbours = 254;

using SecAggKey = std::array<uint8_t, kSecAggKeyBytes>;
using SecAggSignature = std::array<uint8_t, kSecAggSignatureBytes>;

// What a FitTask tells a node about the round's secure aggregation: the settings of
// SecAggOptions (crypto/secagg/secagg_options.h) that every party must share and a node
// cannot know itself. The federation is Header::federation_id, the round FitTask::round
// and the vector size global_model.element_count.
struct SecAggParameters {
  uint32_t threshold = 0;    // Shamir threshold t; 0 = default. <= 254; with neighbours
                             // set, more than half of them and at most all
  uint32_t neighbours = 0;   // graph degree k; 0 = default; otherwise even and <= 254
  double clip = 1.0;         // L2 bound of an update; finite, > 0
  uint32_t bits = 16;        // fixed-point bits per coordinate; 2..32
  uint64_t min_clients = 3;  // >= 2
  uint64_t max_clients = 0;  // most updates summed (overflow bound); >= min_clients: set it
  // Distributed DP: the standard deviation of the Gaussian noise each node adds to its
  // clipped update before masking (in update units); finite, >= 0; 0 = none.
  double noise_stddev = 0.0;

  friend bool operator==(const SecAggParameters&, const SecAggParameters&) = default;
};

// Federated statistics (core/stats/site_statistics.h, docs/data.md): what the aggregator
// asks each site to summarise. Phase 1: per feature count, sum, sum of squares, min/max
// and a quantile sketch, plus the label counts. Phase 2: per feature a histogram of `bins`
// equal bins over [bin_lo[i], bin_hi[i]].
struct StatsRequest {
  uint32_t phase = 1;           // 1 or 2
  uint32_t bins = 0;            // phase 2: 1..kMaxStatsBins; phase 1: 0
  std::vector<double> bin_lo;   // phase 2: one per feature; finite, bin_lo <= bin_hi
  std::vector<double> bin_hi;
  // Secure aggregation ([secagg] enabled): phase 1 answers leave the additive figures out;
  // phase 2 comes with FitTask::secagg and the site answers through SecAgg+ with its
  // counts, sums, sums of squares, histograms and `classes` label counts encoded exactly
  // (core/stats/secure_sums.h).
  bool secure = false;
  uint32_t classes = 0;  // secure phase 2: label classes in the layout; <= kMaxStatsClasses

  friend bool operator==(const StatsRequest&, const StatsRequest&) = default;
};

// One feature of a site's summary.
struct FeatureSummary {
  uint64_t count = 0;
  double sum = 0.0;
  double sum_sq = 0.0;
  double min = 0.0;  // pushed outward by the site's noise (StatsPrivacyPolicy)
  double max = 0.0;
  // t-digest centroids (core/stats/tdigest.h), means ascending; empty when withheld.
  std::vector<double> centroid_mean;
  std::vector<double> centroid_weight;
  std::vector<uint64_t> histogram;  // phase 2: StatsRequest::bins counts; empty if withheld

  friend bool operator==(const FeatureSummary&, const FeatureSummary&) = default;
};

// A site's answer to a StatsRequest, after its own privacy policy. Values are finite;
// sizes within the kMaxStats* bounds.
struct SiteStatistics {
  uint32_t phase = 1;     // the request's
  bool released = false;  // false: only `withheld` is set
  std::string withheld;   // why nothing was released, or which parts were left out
  uint64_t rows = 0;
  std::vector<std::string> feature_names;  // one per feature
  std::vector<FeatureSummary> features;
  std::vector<uint64_t> label_counts;      // classification: rows per class
  // The answer to a secure phase 1: count, sum, sum_sq, histograms and label_counts are
  // left out (zero / empty) and travel under secure aggregation in phase 2; num_classes is
  // the site's number of classes (0 for regression data).
  bool secure = false;
  uint32_t num_classes = 0;

  friend bool operator==(const SiteStatistics&, const SiteStatistics&) = default;
};

// Aggregator -> node: train from global_model and send back a FitResult.
struct FitTask {
  uint64_t round = 0;                                  // must equal Header::round
  TensorPayload global_model;  // any codec chain; decodes to finite values
  uint32_t local_epochs = 1;                           // >= 1
  uint32_t batch_size = 32;                            // >= 1
  double learning_rate = 0.01;                         // finite, > 0
  double momentum = 0.0;                               // [0, 1)
  double prox_mu = 0.0;                                // finite, >= 0; 0 = FedAvg, > 0 = FedProx
  uint64_t deadline_unix_ms = 0;                       // 0 = no deadline
  // Codec chain the node must use for its update (core/codec/codec.h); empty = the node's
  // own configured chain. The FitResult's update.codec says which one it used.
  std::string update_codec;
  // Set: the round aggregates securely, and the node answers with the SecAgg* messages
  // (its update masked) rather than a FitResult update. Unset in every FitTask from a
  // sender that predates it, so those decode with secure aggregation off.
  std::optional<SecAggParameters> secagg;
  // True: global_model holds 2n values, the model and then the update prediction p (the
  // aggregator's guess of this round's change, aggregator/update_prediction.h). The node
  // encodes its change minus p and sets FitResult::applied_prediction. Never with secagg.
  bool with_prediction = false;
  // A graph model's architecture (core/graph): the SHA-256 (hex) of its canonical graph and
  // the ONNX graph with the trainable weights and state left out, so that a site needs no
  // model file: it builds the model from these bytes and loads global_model into it. Both
  // empty for the built-in models (and from senders that predate them).
  std::string model_sha256;
  std::string model_graph;
  // The loss the node trains with (core/loss.h): "cross_entropy" (also when empty, as from
  // older senders), "bce_with_logits", "mse" or "huber"; class weights for cross_entropy
  // (empty = 1 each); pos_weight for bce_with_logits (0 from older senders means 1).
  std::string loss;
  std::vector<float> class_weights;
  double pos_weight = 0.0;
  // Federated evaluation: the node evaluates global_model on its held-out data and answers
  // with a FitResult whose `evaluation` is set; `round` is the round that produced the
  // model. Never with secagg or with_prediction.
  bool evaluate_only = false;
  // Set: federated statistics. The node summarises its training data as asked and answers
  // with a FitResult whose `statistics` is set; global_model is empty. Never with
  // evaluate_only, secagg or with_prediction.
  std::optional<StatsRequest> statistics;
  // evaluate_only: also fine-tune global_model on the site's training data for
  // finetune_epochs and evaluate it ("finetuned_*" metrics), and train the federation's
  // first model (version 0) alone for local_only_epochs ("local_only_*"). 0 = not asked;
  // at most kMaxEvalEpochs; only with evaluate_only.
  uint32_t finetune_epochs = 0;
  uint32_t local_only_epochs = 0;
  // evaluate_only: global_model is the cross-evaluation candidate named here (a site's
  // local model; id rules) instead of the global model. Empty = the global model.
  std::string candidate;
  // evaluate_only with local_only_epochs: sites that allow it send their local-only model
  // (FitResult::local_model) for cross-evaluation.
  bool collect_local_models = false;
  // The federation's per-feature means (federated statistics), with which sites replace
  // missing cells ([data] missing = "impute_mean"). Finite; at most kMaxStatsFeatures;
  // empty when the aggregator has none.
  std::vector<double> impute_values;
  // The aggregator's transport accepts a chunk's data as its own ZeroMQ part (docs/wire.md,
  // "Chunk data parts"): the node may send its FitResult that way, without copying its
  // update into chunk frames. False from senders that predate it.
  bool chunk_data_parts = false;

  friend bool operator==(const FitTask&, const FitTask&) = default;
};

// Node -> aggregator: the trained update. `update` is the change the node made to the
// model it received: local weights minus the FitTask's (decoded) global model, encoded with
// the codec chain named in update.codec.
// A site's record-level DP-SGD spending (node/record_privacy.h): epsilon for delta after
// `steps` steps. Checked on decode: epsilon finite and >= 0, delta in (0, 1).
struct RecordPrivacyReport {
  double epsilon = 0.0;
  double delta = 0.0;
  uint64_t steps = 0;

  friend bool operator==(const RecordPrivacyReport&, const RecordPrivacyReport&) = default;
};

struct FitResult {
  uint64_t round = 0;  // must equal Header::round
  uint64_t num_examples = 0;
  double train_loss = 0.0;          // finite
  TensorPayload update;             // local - global; decodes to finite values
  uint64_t bytes_before_codec = 0;  // reported: 4 * element_count, the dense float32 size
  uint64_t bytes_after_codec = 0;   // must equal update.bytes.size()
  // True: `update` is the change minus the FitTask's prediction; the aggregator adds the
  // prediction back. Only in answer to a FitTask with_prediction.
  bool applied_prediction = false;
  // The answer to an evaluate_only FitTask: num_examples held-out examples, train_loss
  // their mean loss, `metrics` by name (finite; at most kMaxEvalMetrics, names of 1..64
  // printable characters), `update` empty (codec "none", no elements).
  bool evaluation = false;
  std::map<std::string, double> metrics;
  // The answer to a FitTask with statistics: num_examples the site's rows, `update` empty,
  // not an evaluation.
  std::optional<SiteStatistics> statistics;
  // An evaluation answering collect_local_models: `update` holds the site's local-only
  // model's weights (codec "none", finite), shared for cross-evaluation.
  bool local_model = false;
  // The site's Ed25519 signature (crypto/update_signature.h); empty = unsigned. 0 or 64
  // bytes.
  std::vector<uint8_t> signature;
  // The site's DP-SGD ledger after this training; empty without [privacy] dp-sgd. Not
  // covered by the signature (reported, not aggregated).
  std::optional<RecordPrivacyReport> record_privacy;

  friend bool operator==(const FitResult&, const FitResult&) = default;
};

struct Heartbeat {
  uint64_t sequence = 0;

  friend bool operator==(const Heartbeat&, const Heartbeat&) = default;
};

// Values match fedmesh.wire.RejectReason. A value unknown to this build is kept as is.
enum class RejectReason : uint32_t {
  kUnspecified = 0,
  kUnsupportedProtocol = 1,
  kUnknownFederation = 2,
  kNotEnrolled = 3,
  kWrongRound = 4,
  kLate = 5,
  kDuplicate = 6,
  kMalformed = 7,
  kNonFinite = 8,
  kWrongShape = 9,
  kOverLimit = 10,
  kOverloaded = 11,
  // From a node: it will not answer the task (its trainer failed, or the task does not fit
  // it); the round stops waiting for it.
  kTaskFailed = 12,
};

struct Reject {
  RejectReason reason = RejectReason::kUnspecified;
  std::string text;  // one sentence; at most max_text_bytes, no control characters
  uint64_t rejected_message_id = 0;

  friend bool operator==(const Reject&, const Reject&) = default;
};

// Gossip membership (gossip/membership.h, SWIM): the state of one member as a peer knows
// it. Values match fedmesh.wire.pb.MemberState.
enum class MemberState : uint32_t {
  kAlive = 1,
  kSuspect = 2,
  kDead = 3,
};

struct MemberUpdate {
  std::string id;        // site name (id rules)
  std::string endpoint;  // where its gossip socket listens, e.g. "tcp://127.0.0.1:7001" (id rules)
  std::array<uint8_t, 32> curve_public{};  // X25519 key (CurveZMQ)
  std::array<uint8_t, 32> sign_public{};   // Ed25519 key (model signatures)
  uint64_t incarnation = 0;  // only the member itself raises it, to refute a suspicion
  MemberState state = MemberState::kAlive;
  // The member's own Ed25519 signature over everything above but `state`
  // (gossip/signed_member.h): 64 bytes, or empty (unsigned, refused by every receiver).
  std::vector<uint8_t> signature;

  friend bool operator==(const MemberUpdate&, const MemberUpdate&) = default;
};

// Values match fedmesh.wire.pb.MembershipKind.
enum class MembershipKind : uint32_t {
  kPing = 1,     // are you alive? (probe_id)
  kAck = 2,      // yes: answers the Ping probe_id; `target` is who answered (relayed acks)
  kPingReq = 3,  // please ping `target` for me and relay its Ack (indirect probe)
  kJoin = 4,     // a member announces itself to a seed (updates[0] describes it)
  kSync = 5,     // the sender's whole view (answer to a Join, and periodic anti-entropy)
};

// SWIM membership traffic; `updates` are piggybacked member states (at most
// WireLimits::max_members).
struct Membership {
  MembershipKind kind = MembershipKind::kPing;
  uint64_t probe_id = 0;
  std::string target;  // kAck, kPingReq: a member id (id rules); empty otherwise
  std::vector<MemberUpdate> updates;

  friend bool operator==(const Membership&, const Membership&) = default;
};

// Values match fedmesh.wire.pb.GossipKind.
enum class GossipKind : uint32_t {
  kPush = 1,         // a model (or model share) for the receiver to mix in
  kExchange = 2,     // push-pull: mix this in and answer with kExchangeReply (your old model)
  kExchangeReply = 3,
  kPullRequest = 4,  // send me your current model (joining node); no payload
  kPullReply = 5,
  kSyncRequest = 6,  // CHOCO: my copy of your public model is out of step; send it whole
  kSync = 7,         // CHOCO: the sender's whole public copy (x-hat), uncompressed
};

// A gossip model message. Every one is signed by its sender (gossip/signed_model.h) over
// (federation, sender, sequence, kind, step, weight, payload codec, count and SHA-256); the
// receiver verifies against the sender's allowlisted Ed25519 key and drops replays.
struct GossipModel {
  GossipKind kind = GossipKind::kPush;
  uint64_t sequence = 0;  // strictly increasing per sender, across restarts
  uint64_t step = 0;      // sender's gossip step (local SGD steps for training runs)
  double weight = 1.0;    // push-sum weight share, in (0, max_push_weight]; others send 1
  TensorPayload model;    // element_count 0 (no payload) for kPullRequest
  std::vector<uint8_t> signature;  // 64 bytes of Ed25519; empty = unsigned (dropped)
  // The graph hash (core/graph) of the sender's model, 64 hex digits; empty for built-in
  // models. Signed with the rest, so a relay cannot relabel a model.
  std::string model_sha256;

  friend bool operator==(const GossipModel&, const GossipModel&) = default;
};

// ---- Secure aggregation messages, one per step of crypto/secagg/secagg_messages.h, which
// converts them (crypto/secagg/secagg_wire.h). The aggregator relays them all. Every one
// repeats its header's federation and round; a client's message names its sender, equal
// to Header::sender_id. Every id follows the id rules.

// Stage 0, node -> aggregator: its fresh keys for this round, signed by its identity.
struct SecAggAdvertiseKeys {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  SecAggKey channel_public_key{};
  SecAggKey masking_public_key{};
  SecAggSignature signature{};

  friend bool operator==(const SecAggAdvertiseKeys&, const SecAggAdvertiseKeys&) = default;
};

// A roster entry: one member's advertised keys (its federation and round are the roster's).
struct SecAggRosterMember {
  std::string client_id;
  SecAggKey channel_public_key{};
  SecAggKey masking_public_key{};
  SecAggSignature signature{};

  friend bool operator==(const SecAggRosterMember&, const SecAggRosterMember&) = default;
};

// Stage 0 closed, aggregator -> every member.
struct SecAggRoster {
  std::string federation_id;
  uint64_t round = 0;
  std::vector<SecAggRosterMember> members;  // at most WireLimits::max_secagg_clients
  std::array<uint8_t, kSecAggGraphSeedBytes> graph_seed{};

  friend bool operator==(const SecAggRoster&, const SecAggRoster&) = default;
};

// Two shares sealed by `sender` for `recipient`.
struct SecAggSealedShares {
  std::string sender;
  std::string recipient;
  std::vector<uint8_t> box;  // exactly kSecAggShareBoxBytes

  friend bool operator==(const SecAggSealedShares&, const SecAggSealedShares&) = default;
};

// Stage 1, node -> aggregator: one box per graph neighbour (at most kSecAggMaxNeighbours),
// each with sender == client_id.
struct SecAggShareKeys {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  std::vector<SecAggSealedShares> boxes;

  friend bool operator==(const SecAggShareKeys&, const SecAggShareKeys&) = default;
};

// Stage 1 closed, aggregator -> one node: the boxes sealed for it (at most
// kSecAggMaxNeighbours), each with recipient == this message's recipient.
struct SecAggForwardedShares {
  std::string federation_id;
  uint64_t round = 0;
  std::string recipient;
  std::vector<SecAggSealedShares> boxes;

  friend bool operator==(const SecAggForwardedShares&, const SecAggForwardedShares&) = default;
};

// Stage 2, node -> aggregator: the masked update, as a payload of codec "none" and dtype
// kUint32 (Uint32Payload / PayloadUint32s in wire_codec.h), so a large model travels in
// chunks like a FitResult update.
struct SecAggMaskedInput {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  TensorPayload masked;
  std::optional<RecordPrivacyReport> record_privacy;  // as FitResult::record_privacy

  friend bool operator==(const SecAggMaskedInput&, const SecAggMaskedInput&) = default;
};

// Stage 2 closed, aggregator -> every survivor. survivors and dropped together: at most
// WireLimits::max_secagg_clients.
struct SecAggUnmaskRequest {
  std::string federation_id;
  uint64_t round = 0;
  std::vector<std::string> survivors;
  std::vector<std::string> dropped;

  friend bool operator==(const SecAggUnmaskRequest&, const SecAggUnmaskRequest&) = default;
};

// Values match fedmesh.wire.pb.SecAggSecretKind.
enum class SecAggSecretKind : uint32_t {
  kSelfMaskSeed = 1,  // b_u, revealed for a survivor
  kMaskingKey = 2,    // s_sk_u, revealed for a dropped node
};

struct SecAggRevealedShare {
  std::string owner;
  SecAggSecretKind kind = SecAggSecretKind::kSelfMaskSeed;
  uint8_t x = 0;           // 1..255
  std::vector<uint8_t> y;  // exactly kSecAggShareBytes

  friend bool operator==(const SecAggRevealedShare&, const SecAggRevealedShare&) = default;
};

// Stage 3, node -> aggregator: at most kSecAggMaxNeighbours shares.
struct SecAggUnmaskShares {
  std::string federation_id;
  uint64_t round = 0;
  std::string client_id;
  std::vector<SecAggRevealedShare> shares;

  friend bool operator==(const SecAggUnmaskShares&, const SecAggUnmaskShares&) = default;
};

// Resuming an upload cut by a lost connection (docs/wire.md, "Resumed uploads"). Both
// are answered inside the transports (transport/zmq/) and never reach a round engine.
// Node -> aggregator: what do you hold of my message `message_id` (this sender's)?
struct TransferQuery {
  uint64_t message_id = 0;

  friend bool operator==(const TransferQuery&, const TransferQuery&) = default;
};

// Values match fedmesh.wire.TransferState.
enum class TransferState : uint32_t {
  kUnknown = 0,  // nothing of it pending: send the whole message again
  kPartial = 1,  // its header and chunks 0 .. next_chunk-1 arrived: send chunks from next_chunk
};

// Aggregator -> node: the answer to a TransferQuery. next_chunk is 0 unless kPartial.
struct TransferResume {
  uint64_t message_id = 0;
  TransferState state = TransferState::kUnknown;
  uint32_t next_chunk = 0;

  friend bool operator==(const TransferResume&, const TransferResume&) = default;
};

using Body =
    std::variant<Register, RegisterAck, FitTask, FitResult, Heartbeat, Reject, Membership,
                 GossipModel, SecAggAdvertiseKeys, SecAggRoster, SecAggShareKeys,
                 SecAggForwardedShares, SecAggMaskedInput, SecAggUnmaskRequest, SecAggUnmaskShares,
                 TransferQuery, TransferResume>;

// Values match fedmesh.wire.MessageType. Chunks are framing, not messages: they never
// reach the code above the codec.
enum class MessageType : uint32_t {
  kRegister = 1,
  kRegisterAck = 2,
  kFitTask = 3,
  kFitResult = 4,
  kHeartbeat = 5,
  kReject = 6,
  // 7 is Chunk (framing only)
  kMembership = 8,
  kGossipModel = 9,
  kSecAggAdvertiseKeys = 10,
  kSecAggRoster = 11,
  kSecAggShareKeys = 12,
  kSecAggForwardedShares = 13,
  kSecAggMaskedInput = 14,
  kSecAggUnmaskRequest = 15,
  kSecAggUnmaskShares = 16,
  kTransferQuery = 17,
  kTransferResume = 18,
};

struct Message {
  Header header;
  Body body;

  friend bool operator==(const Message&, const Message&) = default;
};

inline MessageType TypeOf(const Body& body) {
  // Body lists the types in enum order, skipping 7 (Chunk).
  const auto i = static_cast<uint32_t>(body.index()) + 1;
  return static_cast<MessageType>(i >= 7 ? i + 1 : i);
}

inline std::string_view MessageTypeName(MessageType type) {
  switch (type) {
    case MessageType::kRegister:
      return "Register";
    case MessageType::kRegisterAck:
      return "RegisterAck";
    case MessageType::kFitTask:
      return "FitTask";
    case MessageType::kFitResult:
      return "FitResult";
    case MessageType::kHeartbeat:
      return "Heartbeat";
    case MessageType::kReject:
      return "Reject";
    case MessageType::kMembership:
      return "Membership";
    case MessageType::kGossipModel:
      return "GossipModel";
    case MessageType::kSecAggAdvertiseKeys:
      return "SecAggAdvertiseKeys";
    case MessageType::kSecAggRoster:
      return "SecAggRoster";
    case MessageType::kSecAggShareKeys:
      return "SecAggShareKeys";
    case MessageType::kSecAggForwardedShares:
      return "SecAggForwardedShares";
    case MessageType::kSecAggMaskedInput:
      return "SecAggMaskedInput";
    case MessageType::kSecAggUnmaskRequest:
      return "SecAggUnmaskRequest";
    case MessageType::kSecAggUnmaskShares:
      return "SecAggUnmaskShares";
    case MessageType::kTransferQuery:
      return "TransferQuery";
    case MessageType::kTransferResume:
      return "TransferResume";
  }
  return "unknown";
}

}  // namespace fedmesh::wire
