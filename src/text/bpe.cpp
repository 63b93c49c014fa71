#include "bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <queue>

#include "unicode_regex.h"

namespace moe::text {

uint64_t Bpe::pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

Bpe Bpe::parse(const Json& j, const JsonSource& source, Vocabulary& vocab) {
  const auto type = source.need(j, "type", "model").get<std::string>();
  if (type != "BPE") source.fail(fmt::format("unsupported model type '{}' (supported: BPE)", type));
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"})
    if (j.contains(key) && !j.at(key).is_null())
      source.fail(fmt::format("unsupported BPE option \"{}\"", key));
  for (const auto& [token, id] : source.need(j, "vocab", "model").items())
    vocab.set(
        static_cast<int32_t>(json_int(id, INT32_MIN, INT32_MAX, fmt::format("the id of token '{}'", token))),
        token);
  Bpe bpe;
  bpe.byte_fallback_ = j.value("byte_fallback", false);
  bpe.fuse_unk_ = j.value("fuse_unk", false);
  bpe.ignore_merges_ = j.value("ignore_merges", false);
  if (j.contains("unk_token") && !j.at("unk_token").is_null()) {
    const auto unk = j.at("unk_token").get<std::string>();
    bpe.unk_id_ = vocab.id_of(unk);
    if (bpe.unk_id_ < 0) source.fail(fmt::format("unk_token '{}' is not in the vocabulary", unk));
  }
  bpe.byte_ids_.assign(256, -1);
  for (int b = 0; b < 256; ++b) bpe.byte_ids_[b] = vocab.id_of(fmt::format("<0x{:02X}>", b));
  int32_t rank = 0;
  for (const Json& m : source.need(j, "merges", "model")) {
    std::string left, right;
    if (m.is_string()) {
      const auto s = m.get<std::string>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos)
        source.fail(fmt::format("merge {} is not of the form \"left right\"", rank));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      source.fail(fmt::format("merge {} is neither \"left right\" nor [left, right]", rank));
    }
    const int32_t l = vocab.id_of(left), r = vocab.id_of(right), merged = vocab.id_of(left + right);
    if (l < 0 || r < 0 || merged < 0)
      source.fail(fmt::format("merge {} ('{}' '{}') refers to a token that is not in the vocabulary", rank,
                              left, right));
    bpe.merges_.emplace(pair_key(l, r), std::pair{rank, merged});
    ++rank;
  }
  return bpe;
}

void Bpe::encode(const std::string& word, const Vocabulary& vocab, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const int32_t id = vocab.id_of(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<int32_t> symbols;  // [n_symbols]
  bool previous_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    const size_t length = std::min(utf8_char_length(word[pos]), word.size() - pos);
    const std::string ch = word.substr(pos, length);
    pos += length;
    if (const int32_t id = vocab.id_of(ch); id >= 0) {
      symbols.push_back(id);
      previous_unk = false;
      continue;
    }
    if (byte_fallback_ &&
        std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_ids_[static_cast<uint8_t>(c)] >= 0; })) {
      for (char c : ch) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      previous_unk = false;
      continue;
    }
    if (unk_id_ >= 0 && !(fuse_unk_ && previous_unk)) symbols.push_back(unk_id_);
    previous_unk = unk_id_ >= 0;
  }
  const size_t n = symbols.size();
  std::vector<int> next(n), prev(n);  // doubly linked list over the live symbols; -1 ends it
  for (size_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? static_cast<int>(i + 1) : -1;
    prev[i] = static_cast<int>(i) - 1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push = [&](int pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(pair_key(symbols[pos], symbols[next[pos]]));
    if (it != merges_.end())
      queue.push({it->second.first, pos, symbols[pos], symbols[next[pos]], it->second.second});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    // Stale entries: a side was merged away or changed since the candidate was queued.
    if (!alive[c.pos] || symbols[c.pos] != c.left || next[c.pos] < 0 || symbols[next[c.pos]] != c.right)
      continue;
    const int right = next[c.pos];
    symbols[c.pos] = c.merged;
    alive[right] = false;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out.push_back(symbols[i]);
}

}  // namespace moe::text
