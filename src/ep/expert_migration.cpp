#include "ep/expert_migration.h"

#include <algorithm>
#include <cstring>

#include "moe/core/check.h"

namespace moe::ep {

namespace {

bool holds(const Placement& p, int rank, int expert) {
  const auto& held = p.rank_experts[rank];
  return std::find(held.begin(), held.end(), expert) != held.end();
}

void check_weights(const SwigluWeights& w, const ExpertShape& s, int expert) {
  const std::vector<int64_t> in = {s.intermediate, s.hidden}, out = {s.hidden, s.intermediate};
  for (const Tensor* t : {&w.gate, &w.up, &w.down})
    MOE_CHECK(t->dtype() == s.dtype && t->is_contiguous(),
              "migration: expert {} weights must be contiguous {}", expert, dtype_name(s.dtype));
  MOE_CHECK(w.gate.shape() == in && w.up.shape() == in && w.down.shape() == out,
            "migration: expert {} weights {} {} {}, expected gate and up [{}, {}], down [{}, {}]", expert,
            w.gate.shape_string(), w.up.shape_string(), w.down.shape_string(), s.intermediate, s.hidden,
            s.hidden, s.intermediate);
}

}  // namespace

std::vector<ExpertMove> plan_moves(const Placement& from, const Placement& to) {
  MOE_CHECK(from.n_experts == to.n_experts && from.n_ranks == to.n_ranks,
            "migration from {} experts on {} ranks to {} on {}: the sizes must agree", from.n_experts,
            from.n_ranks, to.n_experts, to.n_ranks);
  // NOTE: the ranks' lists are checked here rather than trusted: a placement put together by hand has not
  // been through finish(), and an expert on no rank would leave its tokens nowhere to go.
  for (const Placement* p : {&from, &to})
    MOE_CHECK(static_cast<int>(p->rank_experts.size()) == p->n_ranks,
              "migration: a placement lists {} ranks, but n_ranks is {}", p->rank_experts.size(), p->n_ranks);
  for (int32_t e = 0; e < to.n_experts; ++e) {
    const bool held = std::any_of(to.rank_experts.begin(), to.rank_experts.end(),
                                  [&](const std::vector<int32_t>& r) { return std::count(r.begin(), r.end(), e) > 0; });
    MOE_CHECK(held, "migration: the new placement holds expert {} on no rank: refused, nothing moved (give every "
              "expert a slot)", e);
    MOE_CHECK(static_cast<int>(from.replica_rank.size()) == from.n_experts && !from.replica_rank[e].empty(),
              "migration: the current placement holds expert {} on no rank (make it with make_placement)", e);
  }
  std::vector<ExpertMove> moves;
  for (int r = 0; r < to.n_ranks; ++r) {
    std::vector<int32_t> fresh;
    for (int32_t e : to.rank_experts[r]) {
      MOE_CHECK(e >= 0 && e < to.n_experts, "migration: the new placement gives rank {} expert {}, outside [0, {})",
                r, e, to.n_experts);
      if (!holds(from, r, e)) fresh.push_back(e);
    }
    std::sort(fresh.begin(), fresh.end());
    for (int32_t e : fresh) {
      const auto& holders = from.replica_rank[e];
      moves.push_back({.expert = e, .from_rank = holders[r % holders.size()], .to_rank = r});
    }
  }
  return moves;
}

Migration migrate_experts(Communicator& comm, const Placement& from, const Placement& to,
                          std::span<const SwigluWeights> current, const ExpertShape& shape) {
  const int R = comm.size(), me = comm.rank();
  check_placement(from, from.n_experts, R);
  check_placement(to, from.n_experts, R);
  const auto& mine = from.rank_experts[me];
  MOE_CHECK(current.size() == mine.size(), "migration: {} expert weights given for rank {}'s {} slots",
            current.size(), me, mine.size());
  for (size_t s = 0; s < mine.size(); ++s) check_weights(current[s], shape, mine[s]);
  const int64_t matrix = shape.hidden * shape.intermediate * static_cast<int64_t>(dtype_size(shape.dtype));
  const int64_t expert_bytes = 3 * matrix;  // gate | up | down

  // Moves in plan order: every rank packs its sends to each peer in that order and unpacks in it.
  const std::vector<ExpertMove> moves = plan_moves(from, to);
  std::vector<int64_t> send_counts(R, 0), recv_counts(R, 0);
  for (const ExpertMove& m : moves) {
    if (m.from_rank == me) send_counts[m.to_rank] += expert_bytes;
    if (m.to_rank == me) recv_counts[m.from_rank] += expert_bytes;
  }
  std::vector<int64_t> send_displs(R, 0), recv_displs(R, 0);
  for (int p = 1; p < R; ++p) {
    send_displs[p] = send_displs[p - 1] + send_counts[p - 1];
    recv_displs[p] = recv_displs[p - 1] + recv_counts[p - 1];
  }
  std::vector<uint8_t> send(send_displs[R - 1] + send_counts[R - 1]);
  std::vector<uint8_t> recv(recv_displs[R - 1] + recv_counts[R - 1]);
  std::vector<int64_t> cursor = send_displs;
  for (const ExpertMove& m : moves) {
    if (m.from_rank != me) continue;
    const size_t s = std::find(mine.begin(), mine.end(), m.expert) - mine.begin();
    uint8_t* dst = send.data() + cursor[m.to_rank];
    std::memcpy(dst, current[s].gate.data(), matrix);
    std::memcpy(dst + matrix, current[s].up.data(), matrix);
    std::memcpy(dst + 2 * matrix, current[s].down.data(), matrix);
    cursor[m.to_rank] += expert_bytes;
  }
  comm.alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs);

  // The new slots: kept experts share the current tensors, received ones get staging tensors of their own.
  Migration out;
  std::vector<int64_t> at = recv_displs;
  for (int32_t e : to.rank_experts[me]) {
    const auto kept = std::find(mine.begin(), mine.end(), e);
    if (kept != mine.end()) {
      out.slots.push_back(current[kept - mine.begin()]);
      continue;
    }
    const auto m = std::find_if(moves.begin(), moves.end(),
                                [&](const ExpertMove& x) { return x.to_rank == me && x.expert == e; });
    const uint8_t* src = recv.data() + at[m->from_rank];
    at[m->from_rank] += expert_bytes;
    SwigluWeights w{.gate = Tensor::empty(shape.dtype, {shape.intermediate, shape.hidden}),
                    .up = Tensor::empty(shape.dtype, {shape.intermediate, shape.hidden}),
                    .down = Tensor::empty(shape.dtype, {shape.hidden, shape.intermediate})};
    std::memcpy(w.gate.data(), src, matrix);
    std::memcpy(w.up.data(), src + matrix, matrix);
    std::memcpy(w.down.data(), src + 2 * matrix, matrix);
    out.slots.push_back(std::move(w));
  }
  for (int p = 0; p < R; ++p)
    if (p != me) out.bytes_sent += send_counts[p], out.bytes_received += recv_counts[p];
  return out;
}

bool agree_switch(Communicator& comm, bool ready) {
  int64_t not_ready[1] = {ready ? 0 : 1};
  comm.allreduce_sum(not_ready);
  return not_ready[0] == 0;
}

}  // namespace moe::ep
