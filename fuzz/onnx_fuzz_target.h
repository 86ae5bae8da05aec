// libFuzzer target for the ONNX reader and the graph executor (core/onnx/onnx_reader.h,
// core/graph/graph_model.h): the input is the bytes of an ONNX file. They are parsed with
// tight limits (1 MiB, 256 nodes, 2^20 elements per tensor); a graph that parses and
// loads, and has at most kOnnxMaxFlat parameters, is planned for kOnnxBatch samples, its
// inputs are filled with a fixed pattern (floats in [-1, 1], int64 inputs with the ids
// 0, 1, 2), and it runs Forward(training), Backward with ones as the output gradient, and
// Forward(eval). fuzz/onnx_fuzz.cc wraps the entry point for libFuzzer, and
// tests/core/onnx_fuzz_test.cc runs it inside core_tests over the fixtures of
// tests/fixtures/onnx and seeded mutations of them (MutateOnnx).
//
// Contract checked: ParseOnnx, GraphModel::Create, Plan and Forward either succeed or
// return InvalidArgument, Unimplemented, OutOfRange or NotFound (a clear error about the
// file); any other code (Internal, ...) is a violation, and the entry point traps on it.
// Memory errors and undefined behaviour are left to ASan and UBSan.
//
// Thread-safety: the entry points share one single-threaded CPU backend; call them from
// one thread at a time (libFuzzer and the tests do).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rng.h"

namespace fedmesh::fuzz {

// The batch size every accepted model is planned and run for.
inline constexpr int64_t kOnnxBatch = 2;
// Models with more parameters and state than this are parsed and created but not run.
inline constexpr size_t kOnnxMaxFlat = size_t{1} << 20;

// How far one input got. Every outcome but kViolation is a correct answer to the file.
enum class OnnxOutcome {
  kParseRejected,    // ParseOnnx returned an error
  kCreateRejected,   // GraphModel::Create did
  kTooLarge,         // created, but num_flat() > kOnnxMaxFlat: not run
  kPlanRejected,     // Plan(kOnnxBatch) failed
  kForwardRejected,  // a Forward failed (an embedding id out of range, ...)
  kRan,              // Forward(training), Backward and Forward(eval) all ran
  kViolation,        // an error with a code a bad file must not cause: OnnxViolationMessage()
};

const char* OnnxOutcomeName(OnnxOutcome o);

// Runs one input without trapping.
OnnxOutcome RunOnnxInput(const uint8_t* data, size_t size);
// What the last kViolation on this thread was about.
const std::string& OnnxViolationMessage();

// The libFuzzer entry point: RunOnnxInput, trapping (__builtin_trap) on kViolation.
int FuzzOnnxModel(const uint8_t* data, size_t size);

// A seeded mutation of an ONNX file, for the in-ctest run: one to three rounds of bit
// flips, edge bytes, truncation, inserted random bytes, a duplicated or deleted range, and
// varint edits (a byte set to a small length or tag), so that most results fail in the
// protobuf parser and the rest reach the graph checks with odd values. Same rng state,
// same result.
std::vector<uint8_t> MutateOnnx(std::span<const uint8_t> seed, Rng& rng);

}  // namespace fedmesh::fuzz
