// fedmesh-psi: aligns two parties' tables on their shared record ids with ECDH private set
// intersection (docs/vertical.md), without either learning the other's other ids:
//   fedmesh-psi --key KEY --allow DIR --group "a@tcp://HOST:PORT,b@tcp://HOST:PORT"
//               --listen tcp://*:PORT --data TABLE.csv --id-column id --out ALIGNED.csv
// Both parties run it at once; each writes its own rows of the intersection, in the one
// order both agreed (row k is the same record on both sides), with its header.
// Exit codes: 0 aligned, 1 the exchange failed (no answer, a protocol error, disagreement),
// 2 bad arguments, keys or data (naming the file, line and column).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "collective/group_members.h"
#include "collective/zmq_ring_transport.h"
#include "core/data/csv_table.h"
#include "crypto/key_files.h"
#include "crypto/psi/ecdh_psi.h"
#include "vertical/psi_exchange.h"

namespace {

namespace fs = std::filesystem;

// The PSI library names its options by their struct fields; this binary's user knows the flags.
std::string FlagNames(std::string what) {
  for (const auto& [field, flag] :
       {std::pair<std::string, std::string>{"PsiOptions.max_ids", "--max-ids"},
        {"PsiOptions.order_seed", "--order-seed"}})
    for (size_t at; (at = what.find(field)) != std::string::npos;)
      what.replace(at, field.size(), flag);
  return what;
}

int Fail(int code, const std::string& what) {
  std::fprintf(stderr, "fedmesh-psi: %s\n", FlagNames(what).c_str());
  return code;
}

// --out is written only after the exchange, when the peer has its result already: a
// path that cannot be written, or one that would overwrite --data, is refused before
// anything is sent. Empty when --out will do.
std::string CheckOut(const std::string& out, const std::string& data) {
  std::error_code ec;
  if (out == data || fs::equivalent(out, data, ec))
    return "--out " + out + " is --data " + data +
           ": writing the intersection would overwrite the input table; give another file";
  if (fs::is_directory(out, ec)) return "--out " + out + " is a directory; give a file name in it";
  const fs::path dir =
      fs::path(out).parent_path().empty() ? fs::path(".") : fs::path(out).parent_path();
  if (!fs::is_directory(dir, ec))
    return "--out " + out + ": folder " + dir.string() + " does not exist";
  // The rows go to --out.tmp in that folder, then are renamed over --out.
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return "--out " + out + ": folder " + dir.string() + " is not writable";
  if (fs::exists(out, ec) && ::access(out.c_str(), W_OK) != 0)
    return "--out " + out + " is not writable";
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "fedmesh-psi: private set intersection of two parties' record ids (ECDH over ristretto255, "
      "CurveZMQ or AES-256-GCM sealed links between allowlisted sites); writes this party's rows of the intersection in the "
      "order both agreed.\nExit codes: 0 aligned, 1 the exchange failed, 2 bad arguments, keys or data."};
  std::string key, allow, listen, data, id_column, out, security = "curve";
  std::vector<std::string> group;
  char delimiter = ',';
  uint64_t order_seed = 0, max_ids = fedmesh::psi::PsiOptions{}.max_ids;
  int timeout_ms = fedmesh::vertical::PsiExchangeOptions{}.timeout_ms;
  app.add_option("--key", key, "This site's key file (fedmesh-keys gen)")->required();
  app.add_option("--allow", allow, "Directory of both parties' public keys (*.pub)")->required();
  app.add_option("--group", group, "Both parties as site-id@endpoint, this one included")
      ->required()->delimiter(',')->expected(2);
  app.add_option("--listen", listen, "This party's bind endpoint, e.g. tcp://*:7300")->required();
  app.add_option("--data", data, "This party's table (CSV with a header)")->required();
  app.add_option("--id-column", id_column, "The column holding the record ids")->required();
  app.add_option("--out", out, "Where to write the aligned rows (CSV)")->required();
  app.add_option("--delimiter", delimiter, "Field separator of --data (default ',')");
  // Both are unsigned (the seed is 64 bits mixed into the order's hash): CLI11 would take
  // "-1" as 2^64-1 without a word.
  const CLI::Validator unsigned_number(
      [](std::string& v) {
        return !v.empty() && v[0] == '-' ? "must be 0 or more, not " + v : std::string();
      },
      "UINT");
  app.add_option("--order-seed", order_seed,
                 "Mixed into the agreed order; both parties give the same (default 0)")
      ->check(unsigned_number);
  app.add_option("--max-ids", max_ids, "Most ids either party may hold (default 100000000)")
      ->check(unsigned_number);
  app.add_option("--security", security,
                 "How the link is encrypted: curve (CurveZMQ) or aes-256-gcm (sealed links); both parties give "
                 "the same (default curve)")
      ->check(CLI::IsMember({"curve", "aes-256-gcm"}));
  app.add_option("--timeout-ms", timeout_ms, "Give up after this long without a message from the peer (default 120000)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (std::string bad = CheckOut(out, data); !bad.empty()) return Fail(2, bad);

  auto me = fedmesh::ReadIdentity(key);
  if (!me.ok()) return Fail(2, "--key: " + me.status().message());
  auto g = fedmesh::collective::ResolveGroup(group, allow, *me, "--group");
  if (!g.ok()) return Fail(2, g.status().message());
  if (g->members.size() != 2) return Fail(2, "--group: PSI is between two parties; list exactly two");
  auto table = fedmesh::ReadCsvTable(data, delimiter);
  if (!table.ok()) return Fail(2, "--data: " + table.status().message());
  auto ids = fedmesh::CsvColumn(*table, id_column, /*unique=*/true);
  if (!ids.ok()) return Fail(2, "--id-column: " + ids.status().message());

  if (ids->size() > max_ids)
    return Fail(2, "--max-ids: " + data + " holds " + std::to_string(ids->size()) +
                       " ids, over the limit of " + std::to_string(max_ids) + "; raise --max-ids");
  fedmesh::psi::PsiOptions po;
  po.max_ids = max_ids;
  po.order_seed = order_seed;
  auto party = fedmesh::psi::PsiParty::Create(*ids, po);
  if (!party.ok()) return Fail(2, party.status().message());
  fedmesh::collective::ZmqRingTransportOptions to;
  to.max_chunk_bytes = fedmesh::psi::kPsiHeaderSize + uint64_t{po.batch} * fedmesh::psi::kPointSize;
  to.linger_ms = 10000;  // the last confirm must reach the peer after this process is done
  to.security = fedmesh::collective::ParseRingSecurity(security).value();  // checked by --security's IsMember
  to.log = [](const std::string& line) { std::fprintf(stderr, "fedmesh-psi: %s\n", line.c_str()); };
  auto transport = fedmesh::collective::ZmqRingTransport::Create(*me, g->members, listen, to);
  if (!transport.ok()) return Fail(2, "--listen: " + transport.status().message());

  const auto start = std::chrono::steady_clock::now();
  fedmesh::vertical::PsiExchangeOptions xo;
  xo.timeout_ms = timeout_ms;
  fedmesh::vertical::PsiExchangeStats stats;
  const int peer = 1 - g->my_rank;
  auto result = fedmesh::vertical::RunPsi(**transport, peer, **party, xo, &stats);
  if (!result.ok()) {
    (*transport)->SetLinger(0);
    return Fail(1, result.status().message());
  }
  fedmesh::Status w = fedmesh::WriteCsvRows(*table, result->rows, out);
  if (!w.ok()) return Fail(1, "--out: " + w.message());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "fedmesh-psi: %llu ids here, %llu at %s, %zu in common; wrote %s (digest %.16s, %.2f s, "
      "%llu bytes sent, %llu received)\n",
      static_cast<unsigned long long>(result->my_count), static_cast<unsigned long long>(result->peer_count),
      g->members[peer].identity.name.c_str(), result->rows.size(), out.c_str(), result->digest.c_str(), seconds,
      static_cast<unsigned long long>(stats.bytes_sent), static_cast<unsigned long long>(stats.bytes_received));
  return 0;
}
