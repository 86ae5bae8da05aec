// ClientStateStore: the per-client state fedmesh-sim keeps between the rounds a client is
// selected in (momentum buffers, error-feedback residuals). A run may simulate a million
// clients of which only a few hundred train per round, yet each that trained with a lossy
// codec keeps a residual the size of the model until it is picked again, possibly many
// rounds later; all of them in memory would not fit. The store keeps the most recently Put
// states in memory up to a byte budget and spills the rest to a scratch SQLite file
// (table client_state, one row per client, floats as raw bytes in native byte order: the
// file is read back only by the process that wrote it, and is deleted with the store).
// Thread-safety: one thread (the simulation loop) owns the store; no internal locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/status.h"
#include "storage/sqlite/database.h"

namespace fedmesh {

// The state one simulated client carries between the rounds it is selected in.
struct ClientState {
  std::vector<float> velocity;      // optimizer momentum buffer (may be empty)
  std::vector<float> residual;      // error-feedback residual (may be empty)
  std::vector<float> dgc_velocity;  // DGC momentum (may be empty)

  bool empty() const { return velocity.empty() && residual.empty() && dgc_velocity.empty(); }
  size_t bytes() const {
    return sizeof(float) * (velocity.size() + residual.size() + dgc_velocity.size());
  }
};

struct ClientStateStoreOptions {
  // States kept in memory, in bytes of float data (container overhead not counted); beyond
  // it the least recently Put states are written to the spill file. Default: 512 MiB.
  size_t memory_budget_bytes = size_t{512} << 20;
  // SQLite file for spilled states. Empty (default): a fresh temporary file in
  // std::filesystem::temp_directory_path(), deleted when the store is destroyed.
  // A given path is created (or truncated: any old contents are dropped) and deleted at
  // destruction too.
  std::string spill_path;
};

class ClientStateStore {
 public:
  // Creates the spill file. Errors: IOError when it cannot be created (missing or
  // read-only directory), InvalidArgument when spill_path names a directory.
  static Result<std::unique_ptr<ClientStateStore>> Create(ClientStateStoreOptions options);
  ~ClientStateStore();
  ClientStateStore(const ClientStateStore&) = delete;
  ClientStateStore& operator=(const ClientStateStore&) = delete;

  // Stores `state` for `client`, replacing any previous one. An empty state erases the
  // client's entry. May spill other (least recently Put) states to disk to stay within the
  // budget; a single state larger than the budget goes straight to disk.
  // On error nothing is lost: the new state is either stored or the old one is kept, and
  // a failed spill leaves the state it was writing in memory (over budget).
  Status Put(uint64_t client, ClientState state);

  // Removes and returns the client's state; an empty ClientState when there is none.
  // Reads from disk if it was spilled (and deletes it there). Corruption, naming the
  // client, when a spilled row does not decode; the row is kept (Put an empty state to
  // drop it).
  Result<ClientState> Take(uint64_t client);

  size_t size() const { return memory_.size() + spilled_.size(); }  // memory + disk
  size_t bytes_in_memory() const { return bytes_in_memory_; }
  size_t spilled() const { return spilled_.size(); }  // clients whose state is on disk now
  const std::string& spill_path() const { return path_; }

 private:
  struct Entry {
    std::list<uint64_t>::iterator lru_pos;
    ClientState state;
  };

  ClientStateStore(ClientStateStoreOptions options, std::string path);
  Status Open();
  Status WriteRow(uint64_t client, const ClientState& state);
  Result<ClientState> ReadRow(uint64_t client);
  Status DeleteRow(uint64_t client);
  // Writes the least recently Put in-memory state to disk and drops it from memory.
  Status SpillOldest();
  void EraseFromMemory(uint64_t client);

  const ClientStateStoreOptions options_;
  const std::string path_;  // the spill file, removed by the destructor

  // Member order matters: the statements must be finalized before the connection closes.
  std::unique_ptr<Database> db_;
  std::unique_ptr<Statement> insert_;  // INSERT OR REPLACE one row
  std::unique_ptr<Statement> select_;
  std::unique_ptr<Statement> delete_;

  std::list<uint64_t> lru_;  // in-memory clients, least recently Put first
  std::unordered_map<uint64_t, Entry> memory_;
  // Spilled clients, so size() is exact and a Take of a client without state costs no query.
  std::unordered_set<uint64_t> spilled_;
  size_t bytes_in_memory_ = 0;
};

}  // namespace fedmesh
