#include "collective/group_members.h"

#include <algorithm>
#include <set>

#include "crypto/key_files.h"

namespace fedmesh::collective {

Result<ResolvedGroup> ResolveGroup(const std::vector<std::string>& group, const std::string& allow_dir,
                                   const Identity& me, const std::string& what) {
  FM_ASSIGN_OR_RETURN(std::vector<PublicIdentity> keys, ReadAllowlist(allow_dir));
  ResolvedGroup g;
  std::set<std::string> seen;
  for (const std::string& m : group) {
    const size_t at = m.find('@');
    if (at == 0 || at == std::string::npos || at + 1 == m.size()) {
      return Status::InvalidArgument(what + ": member \"" + m + "\" is not site-id@endpoint, e.g. site-2@tcp://10.0.0.2:7200");
    }
    const std::string id = m.substr(0, at);
    if (!seen.insert(id).second) return Status::InvalidArgument(what + " lists " + id + " twice");
    auto key = std::find_if(keys.begin(), keys.end(), [&](const PublicIdentity& p) { return p.name == id; });
    if (key == keys.end()) {
      return Status::InvalidArgument(what + ": member " + id + " has no public key in " + allow_dir);
    }
    if (id == me.name()) g.my_rank = static_cast<int>(g.members.size());
    g.members.push_back({m.substr(at + 1), *key});
  }
  if (g.my_rank < 0) return Status::InvalidArgument(what + " does not list this site (" + me.name() + ")");
  if (g.members[g.my_rank].identity.curve_public != me.public_identity().curve_public) {
    return Status::InvalidArgument("the key in " + allow_dir + " for " + me.name() + " is not this site's key");
  }
  return g;
}

}  // namespace fedmesh::collective
