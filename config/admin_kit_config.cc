#include "config/admin_kit_config.h"

#include "config/config_loader.h"

namespace fedmesh {

const ConfigSchema& AdminKitConfigSchema() {
  static const ConfigSchema* schema = [] {
    auto* s = new ConfigSchema;
    s->name = "fedmesh-admin";
    s->description =
        "An admin kit's admin.toml (fedmesh-admin --kit DIR): this admin's key and the "
        "aggregator's admin endpoint (docs/operations.md).";
    s->keys = {
        RequiredKey("admin", "name", ConfigType::kString,
                    "This admin's name (its key's name; the aggregator logs every action with it)"),
        StringKey("admin", "key", "admin.key", "This admin's key pair file (0600)").Path(),
        RequiredKey("admin", "endpoint", ConfigType::kString,
                    "The aggregator's admin endpoint, e.g. tcp://agg.example.org:5556"),
        StringKey("admin", "server_key", "aggregator.pub", "The aggregator's public key file").Path(),
        IntKey("admin", "timeout_ms", 10000, "How long to wait for the aggregator's answer")
            .Min(1)
            .Max(86400000),  // a day; read into an int
    };
    return s;
  }();
  return *schema;
}

Result<AdminKitConfig> LoadAdminKitConfig(const std::string& path) {
  FM_ASSIGN_OR_RETURN(ConfigValues v, LoadConfig(AdminKitConfigSchema(), path, {}));
  AdminKitConfig c;
  c.config_path = path;
  c.name = v.GetString("admin", "name");
  c.key_path = v.GetString("admin", "key");
  c.endpoint = v.GetString("admin", "endpoint");
  FM_RETURN_IF_ERROR(CheckEndpointKey(v, "admin", "endpoint", EndpointUse::kConnect));
  c.server_key = v.GetString("admin", "server_key");
  c.timeout_ms = static_cast<int>(v.GetInt("admin", "timeout_ms"));
  return c;
}

}  // namespace fedmesh
