#include "vertical/psi_exchange.h"

#include <string>
#include <vector>

namespace fedmesh::vertical {

Result<psi::PsiResult> RunPsi(collective::CollectiveTransport& transport, int peer, psi::PsiParty& party,
                              const PsiExchangeOptions& options, PsiExchangeStats* stats) {
  PsiExchangeStats local;
  PsiExchangeStats& st = stats != nullptr ? *stats : local;
  uint64_t seq = 0;
  auto send = [&](std::vector<std::string>& messages) -> Status {
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
  FM_ASSIGN_OR_RETURN(std::vector<std::string> first, party.Start());
  FM_RETURN_IF_ERROR(send(first));
  std::vector<std::string> out;
  while (!party.done()) {
    FM_ASSIGN_OR_RETURN(auto got, transport.Receive(options.timeout_ms));
    if (!got) {
      return Status::DeadlineExceeded("psi: heard nothing from rank " + std::to_string(peer) + " for " +
                                      std::to_string(options.timeout_ms) + " ms");
    }
    auto& [from, chunk] = *got;
    if (from != peer || chunk.kind != collective::OpKind::kMessage) {
      return Status::InvalidArgument("psi: unexpected " + std::string(from != peer ? "sender" : "chunk kind") +
                                     " (rank " + std::to_string(from) + ") during private set intersection");
    }
    if (options.observe) options.observe(false, chunk.bytes.view());
    st.bytes_received += chunk.bytes.size();
    ++st.messages_received;
    Status s = party.Receive(chunk.bytes.view(), &out);
    if (!s.ok()) return Status(s.code(), "from rank " + std::to_string(peer) + ": " + s.message());
    FM_RETURN_IF_ERROR(send(out));
  }
  return party.result();
}

}  // namespace fedmesh::vertical
