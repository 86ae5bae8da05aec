// A group of sites named in configuration as "site-id@endpoint" (every member, this site
// included; a member's rank is its position), resolved against an allowlist directory of
// public keys: what a ZmqRingTransport needs, and this site's rank. Shared by all-reduce
// training, private set intersection and split training.
// Thread-safety: stateless.
#pragma once

#include <string>
#include <vector>

#include "collective/zmq_ring_transport.h"
#include "core/status.h"
#include "crypto/identity.h"

namespace fedmesh::collective {

struct ResolvedGroup {
  std::vector<RingMember> members;  // in rank order
  int my_rank = -1;
};

// InvalidArgument, starting with `what` (e.g. "[collective] group"), for a member that is
// not site-id@endpoint, a site listed twice, a member without a key in `allow_dir`, or
// when `me` is not a member or its key there is not me's.
Result<ResolvedGroup> ResolveGroup(const std::vector<std::string>& group, const std::string& allow_dir,
                                   const Identity& me, const std::string& what);

}  // namespace fedmesh::collective
