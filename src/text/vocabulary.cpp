#include "vocabulary.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <utility>

#include "moe/core/check.h"

namespace moe::text {

Vocabulary::Vocabulary(JsonSource source, int64_t listed)
    : source_(std::move(source)), max_id_(std::min<int64_t>(listed - 1 + kMaxIdGap, INT32_MAX - 1)) {}

void Vocabulary::set(int32_t id, const std::string& token) {
  if (id < 0) source_.fail(fmt::format("token '{}' has negative id {}", token, id));
  if (id > max_id_)
    source_.fail(
        fmt::format("token '{}' has id {}, but the file lists only {} tokens (ids may leave gaps of at most "
                    "{} in all): a corrupt tokenizer.json",
                    token, id, max_id_ - kMaxIdGap + 1, kMaxIdGap));
  if (static_cast<size_t>(id) >= tokens_.size()) {
    tokens_.resize(id + 1);
    has_token_.resize(id + 1, false);
    is_special_.resize(id + 1, false);
  }
  tokens_[id] = token;
  has_token_[id] = true;
  ids_[token] = id;
}

int32_t Vocabulary::id_of(const std::string& token) const {
  auto it = ids_.find(token);
  return it == ids_.end() ? -1 : it->second;
}

const std::string& Vocabulary::token_of(int32_t id) const {
  MOE_CHECK(contains(id), "token id {} is not in the vocabulary of {} (ids 0..{})", id, source_.name,
            static_cast<int64_t>(tokens_.size()) - 1);
  return tokens_[id];
}

}  // namespace moe::text
