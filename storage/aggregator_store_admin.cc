// AggregatorStore's admin tables (schema v8): the admin action log and the control state.
#include "storage/aggregator_store.h"

namespace fedmesh {

Status AggregatorStore::RecordAdminAction(const AdminActionRecord& a) {
  return db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement ins,
                        db_->Prepare("INSERT INTO admin_log (time, admin, role, action, argument, "
                                     "result) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
    FM_RETURN_IF_ERROR(ins.BindAll(a.time, a.admin, a.role, a.action, a.argument, a.result));
    return ins.Run();
  });
}

Result<std::vector<AdminActionRecord>> AggregatorStore::AdminActions(size_t limit) {
  std::vector<AdminActionRecord> out;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement q,
                        db_->Prepare("SELECT time, admin, role, action, argument, result FROM "
                                     "(SELECT * FROM admin_log ORDER BY id DESC LIMIT ?1) "
                                     "ORDER BY id"));
    FM_RETURN_IF_ERROR(q.BindAll(static_cast<int64_t>(limit)));
    for (;;) {
      FM_ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) break;
      out.push_back({q.ColumnDouble(0), std::string(q.ColumnText(1)), std::string(q.ColumnText(2)),
                     std::string(q.ColumnText(3)), std::string(q.ColumnText(4)),
                     std::string(q.ColumnText(5))});
    }
    return Status::OK();
  });
  if (!s.ok()) return s;
  return out;
}

Status AggregatorStore::SetControl(const std::string& key, const std::string& value) {
  return db_->WithTransaction([&]() -> Status {
    if (value.empty()) {
      FM_ASSIGN_OR_RETURN(Statement del, db_->Prepare("DELETE FROM control WHERE key = ?1"));
      FM_RETURN_IF_ERROR(del.BindAll(key));
      return del.Run();
    }
    FM_ASSIGN_OR_RETURN(Statement up,
                        db_->Prepare("INSERT INTO control (key, value) VALUES (?1, ?2) "
                                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value"));
    FM_RETURN_IF_ERROR(up.BindAll(key, value));
    return up.Run();
  });
}

Result<std::optional<std::string>> AggregatorStore::Control(const std::string& key) {
  std::optional<std::string> out;
  Status s = db_->WithTransaction([&]() -> Status {
    FM_ASSIGN_OR_RETURN(Statement q, db_->Prepare("SELECT value FROM control WHERE key = ?1"));
    FM_RETURN_IF_ERROR(q.BindAll(key));
    FM_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) out = std::string(q.ColumnText(0));
    return Status::OK();
  });
  if (!s.ok()) return s;
  return out;
}

}  // namespace fedmesh
