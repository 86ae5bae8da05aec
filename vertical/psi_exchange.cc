#include "vertical/psi_exchange.h"

#include <algorithm>
#include <string>
#include <vector>

namespace fedmesh::vertical {

Result<std::vector<psi::PsiResult>> RunPsiWithEach(collective::CollectiveTransport& transport,
                                                   const std::vector<int>& peers,
                                                   const std::vector<psi::PsiParty*>& parties,
                                                   const PsiExchangeOptions& options, PsiExchangeStats* stats) {
  PsiExchangeStats local;
  PsiExchangeStats& st = stats != nullptr ? *stats : local;
  uint64_t seq = 0;
  auto send = [&](int peer, std::vector<std::string>& messages) -> Status {
    for (std::string& m : messages) {
      if (options.observe) options.observe(true, m);
      st.bytes_sent += m.size();
      ++st.messages_sent;
      collective::Chunk c;
      c.kind = collective::OpKind::kMessage;
      c.op = seq++;
      c.bytes = collective::Payload(std::move(m));
      FM_RETURN_IF_ERROR(transport.Send(peer, std::move(c)));
    }
    messages.clear();
    return Status::OK();
  };
  for (size_t i = 0; i < peers.size(); ++i) {
    FM_ASSIGN_OR_RETURN(std::vector<std::string> first, parties[i]->Start());
    FM_RETURN_IF_ERROR(send(peers[i], first));
  }
  auto all_done = [&] {
    for (psi::PsiParty* p : parties)
      if (!p->done()) return false;
    return true;
  };
  std::vector<std::string> out;
  while (!all_done()) {
    FM_ASSIGN_OR_RETURN(auto got, transport.Receive(options.timeout_ms));
    if (!got) {
      std::string silent;
      for (size_t i = 0; i < peers.size(); ++i)
        if (!parties[i]->done()) silent += (silent.empty() ? "" : ", ") + std::to_string(peers[i]);
      return Status::DeadlineExceeded("psi: heard nothing from rank " + silent + " for " +
                                      std::to_string(options.timeout_ms) + " ms");
    }
    auto& [from, chunk] = *got;
    const auto it = std::find(peers.begin(), peers.end(), from);
    if (it == peers.end() || chunk.kind != collective::OpKind::kMessage) {
      return Status::InvalidArgument("psi: unexpected " + std::string(it == peers.end() ? "sender" : "chunk kind") +
                                     " (rank " + std::to_string(from) + ") during private set intersection");
    }
    const size_t i = static_cast<size_t>(it - peers.begin());
    if (options.observe) options.observe(false, chunk.bytes.view());
    st.bytes_received += chunk.bytes.size();
    ++st.messages_received;
    Status s = parties[i]->Receive(chunk.bytes.view(), &out);
    if (!s.ok()) return Status(s.code(), "from rank " + std::to_string(from) + ": " + s.message());
    FM_RETURN_IF_ERROR(send(from, out));
  }
  std::vector<psi::PsiResult> results;
  for (psi::PsiParty* p : parties) results.push_back(p->result());
  return results;
}

Result<psi::PsiResult> RunPsi(collective::CollectiveTransport& transport, int peer, psi::PsiParty& party,
                              const PsiExchangeOptions& options, PsiExchangeStats* stats) {
  FM_ASSIGN_OR_RETURN(std::vector<psi::PsiResult> r, RunPsiWithEach(transport, {peer}, {&party}, options, stats));
  return std::move(r[0]);
}

}  // namespace fedmesh::vertical
