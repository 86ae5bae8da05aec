#include "sim/client_state_store.h"

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <span>
#include <system_error>
#include <utility>

namespace fedmesh {
namespace {

namespace fs = std::filesystem;

// SQLite integers are signed; the bit pattern keeps every uint64 id distinct.
int64_t RowKey(uint64_t client) { return static_cast<int64_t>(client); }

std::span<const uint8_t> AsBytes(const std::vector<float>& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float)};
}

// Rewinds a statement on every exit path, so a failed query never leaves it mid-run.
class ResetOnExit {
 public:
  explicit ResetOnExit(Statement& stmt) : stmt_(stmt) {}
  ~ResetOnExit() { stmt_.Reset(); }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  Statement& stmt_;
};

Result<std::string> MakeTempFile() {
  std::error_code ec;
  const fs::path dir = fs::temp_directory_path(ec);
  if (ec) {
    return Status::IOError("no temporary directory for the client state spill file: " +
                           ec.message());
  }
  // mkstemp creates the file atomically under a unique name: two simulators never share one.
  std::string tmpl = (dir / "fedmesh-client-state-XXXXXX").string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    return Status::IOError("cannot create a client state spill file in " + dir.string() + ": " +
                           std::strerror(errno) +
                           "; set TMPDIR or spill_path to a writable directory");
  }
  ::close(fd);  // SQLite opens an empty file as a new database
  return tmpl;
}

}  // namespace

Result<std::unique_ptr<ClientStateStore>> ClientStateStore::Create(
    ClientStateStoreOptions options) {
  std::string path = options.spill_path;
  if (path.empty()) {
    FM_ASSIGN_OR_RETURN(path, MakeTempFile());
  } else {
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
      return Status::InvalidArgument("client state spill_path " + path +
                                     " is a directory; give a file path inside it");
    }
    // Truncate: rows of an earlier run would be taken for this run's clients. A journal left
    // by a crashed writer would be rolled back into the new file, so it goes too.
    for (const std::string& p : {path, path + "-journal"}) {
      fs::remove(p, ec);
      if (ec) {
        return Status::IOError("cannot remove the old client state spill file " + p + ": " +
                               ec.message());
      }
    }
  }
  std::unique_ptr<ClientStateStore> store(
      new ClientStateStore(std::move(options), std::move(path)));
  // From here the store owns the file: a failed Open still deletes it in the destructor.
  FM_RETURN_IF_ERROR(store->Open());
  return store;
}

ClientStateStore::ClientStateStore(ClientStateStoreOptions options, std::string path)
    : options_(std::move(options)), path_(std::move(path)) {}

ClientStateStore::~ClientStateStore() {
  insert_.reset();
  select_.reset();
  delete_.reset();
  db_.reset();
  std::error_code ec;  // best effort: a destructor cannot report, and the file is scratch
  fs::remove(path_, ec);
}

Status ClientStateStore::Open() {
  DatabaseOptions db_options;
  db_options.wal = false;
  db_options.synchronous_full = false;
  FM_ASSIGN_OR_RETURN(db_, Database::Open(path_, db_options));
  // Scratch space, not durable state: a crash loses the run anyway, so no journal and no
  // fsync. Large pages cut the overflow-page chain of a 0.8 MB blob sixteen-fold; page_size
  // must be set before the table is created.
  FM_RETURN_IF_ERROR(db_->Exec(
      "PRAGMA journal_mode=OFF;"
      "PRAGMA synchronous=OFF;"
      "PRAGMA page_size=65536;"
      "CREATE TABLE client_state(client INTEGER PRIMARY KEY, velocity BLOB, residual BLOB,"
      " dgc BLOB)"));
  {
    FM_ASSIGN_OR_RETURN(Statement s, db_->Prepare("INSERT OR REPLACE INTO client_state"
                                                  "(client, velocity, residual, dgc)"
                                                  " VALUES(?, ?, ?, ?)"));
    insert_ = std::make_unique<Statement>(std::move(s));
  }
  {
    FM_ASSIGN_OR_RETURN(Statement s, db_->Prepare("SELECT velocity, residual, dgc"
                                                  " FROM client_state WHERE client = ?"));
    select_ = std::make_unique<Statement>(std::move(s));
  }
  {
    FM_ASSIGN_OR_RETURN(Statement s, db_->Prepare("DELETE FROM client_state WHERE client = ?"));
    delete_ = std::make_unique<Statement>(std::move(s));
  }
  return Status::OK();
}

Status ClientStateStore::WriteRow(uint64_t client, const ClientState& state) {
  ResetOnExit reset(*insert_);
  FM_RETURN_IF_ERROR(insert_->BindAll(RowKey(client), AsBytes(state.velocity),
                                      AsBytes(state.residual), AsBytes(state.dgc_velocity)));
  return insert_->Run();
}

Result<ClientState> ClientStateStore::ReadRow(uint64_t client) {
  ResetOnExit reset(*select_);
  FM_RETURN_IF_ERROR(select_->Bind(1, RowKey(client)));
  FM_ASSIGN_OR_RETURN(bool has_row, select_->Step());
  const std::string what = "client " + std::to_string(client) + " in the state spill file " + path_;
  const std::string fix =
      "; the file was changed outside the store. Put an empty state for the "
      "client to drop it";
  if (!has_row) return Status::Corruption("the spilled state of " + what + " is missing" + fix);

  ClientState state;
  std::vector<float>* fields[] = {&state.velocity, &state.residual, &state.dgc_velocity};
  const char* names[] = {"velocity", "residual", "dgc"};
  for (int col = 0; col < 3; ++col) {
    if (select_->ColumnIsNull(col)) {
      return Status::Corruption(std::string(names[col]) + " of " + what + " is NULL" + fix);
    }
    const std::span<const uint8_t> blob = select_->ColumnBlob(col);
    if (blob.size() % sizeof(float) != 0) {
      return Status::Corruption(std::string(names[col]) + " of " + what + " is " +
                                std::to_string(blob.size()) +
                                " bytes, not a whole number of float32 values" + fix);
    }
    fields[col]->resize(blob.size() / sizeof(float));
    if (!blob.empty()) std::memcpy(fields[col]->data(), blob.data(), blob.size());
  }
  return state;
}

Status ClientStateStore::DeleteRow(uint64_t client) {
  ResetOnExit reset(*delete_);
  FM_RETURN_IF_ERROR(delete_->Bind(1, RowKey(client)));
  return delete_->Run();
}

Status ClientStateStore::SpillOldest() {
  const uint64_t client = lru_.front();
  const auto it = memory_.find(client);
  FM_RETURN_IF_ERROR(WriteRow(client, it->second.state));
  spilled_.insert(client);
  bytes_in_memory_ -= it->second.state.bytes();
  lru_.pop_front();
  memory_.erase(it);
  return Status::OK();
}

void ClientStateStore::EraseFromMemory(uint64_t client) {
  const auto it = memory_.find(client);
  if (it == memory_.end()) return;
  bytes_in_memory_ -= it->second.state.bytes();
  lru_.erase(it->second.lru_pos);
  memory_.erase(it);
}

Status ClientStateStore::Put(uint64_t client, ClientState state) {
  if (state.empty()) {
    if (spilled_.contains(client)) {
      FM_RETURN_IF_ERROR(DeleteRow(client));
      spilled_.erase(client);
    }
    EraseFromMemory(client);
    return Status::OK();
  }
  const size_t bytes = state.bytes();
  if (bytes > options_.memory_budget_bytes) {
    // Written before the in-memory copy is dropped, so a failed write keeps the old state.
    FM_RETURN_IF_ERROR(WriteRow(client, state));
    spilled_.insert(client);
    EraseFromMemory(client);
    return Status::OK();
  }

  if (spilled_.contains(client)) {
    FM_RETURN_IF_ERROR(DeleteRow(client));
    spilled_.erase(client);
  }
  const auto it = memory_.find(client);
  if (it != memory_.end()) {
    bytes_in_memory_ -= it->second.state.bytes();
    it->second.state = std::move(state);
    lru_.splice(lru_.end(), lru_, it->second.lru_pos);  // now the most recently Put
  } else {
    lru_.push_back(client);
    memory_.emplace(client, Entry{std::prev(lru_.end()), std::move(state)});
  }
  bytes_in_memory_ += bytes;
  // The new state alone fits the budget, so this stops before reaching it.
  while (bytes_in_memory_ > options_.memory_budget_bytes) FM_RETURN_IF_ERROR(SpillOldest());
  return Status::OK();
}

Result<ClientState> ClientStateStore::Take(uint64_t client) {
  const auto it = memory_.find(client);
  if (it != memory_.end()) {
    bytes_in_memory_ -= it->second.state.bytes();
    ClientState state = std::move(it->second.state);
    lru_.erase(it->second.lru_pos);
    memory_.erase(it);
    return state;
  }
  if (!spilled_.contains(client)) return ClientState{};
  FM_ASSIGN_OR_RETURN(ClientState state, ReadRow(client));
  FM_RETURN_IF_ERROR(DeleteRow(client));
  spilled_.erase(client);
  return state;
}

}  // namespace fedmesh
