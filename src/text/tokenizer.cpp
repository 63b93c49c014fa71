// tokenizer.json: loading, then encode (added tokens -> normaliser -> pre-tokenizer -> BPE -> template) and
// decode (id -> token -> decoder chain), each step following the `tokenizers` library's semantics.
#include "moe/text/tokenizer.h"

#include <utf8proc.h>

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <variant>

#include "moe/core/check.h"
#include "unicode_regex.h"

namespace moe {

using text::UnicodeRegex;
using Json = nlohmann::json;

namespace {

// The regex of GPT-2's ByteLevel pre-tokenizer (use_regex = true).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kMetaspace = "\xE2\x96\x81";  // U+2581 "▁"

// GPT-2's reversible map from bytes to printable code points.
const std::vector<char32_t>& byte_to_char() {
  static const std::vector<char32_t> table = [] {
    std::vector<char32_t> t(256);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      t[b] = printable ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

const std::unordered_map<std::string, uint8_t>& char_to_byte() {
  static const std::unordered_map<std::string, uint8_t> table = [] {
    std::unordered_map<std::string, uint8_t> t;
    for (int b = 0; b < 256; ++b) {
      std::string s;
      text::append_utf8(s, byte_to_char()[b]);
      t[s] = static_cast<uint8_t>(b);
    }
    return t;
  }();
  return table;
}

void replace_all(std::string& text, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(text, pos, hit - pos);
    out.append(to);
  }
  out.append(text, pos);
  text = std::move(out);
}

// A Replace/Split pattern: {"String": "..."} or {"Regex": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<UnicodeRegex> regex;  // set for a Regex pattern

  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const {
    if (regex) return regex->find_all(text);
    std::vector<std::pair<size_t, size_t>> found;
    if (literal.empty()) return found;
    for (size_t hit, pos = 0; (hit = text.find(literal, pos)) != std::string_view::npos; pos = hit + literal.size())
      found.emplace_back(hit, hit + literal.size());
    return found;
  }
  std::string replace(std::string_view text, std::string_view content) const {
    std::string out;
    size_t pos = 0;
    for (auto [begin, end] : find_all(text)) {
      out.append(text.substr(pos, begin - pos));
      out.append(content);
      pos = end;
    }
    out.append(text.substr(pos));
    return out;
  }
};

// Canonical composition (NFC) of UTF-8 text.
std::string nfc(const std::string& text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  MOE_CHECK(n >= 0, "NFC normalisation failed: {} (is the text valid UTF-8?)", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

// Normalisers.
struct Prepend { std::string text; };
struct ReplaceText { Pattern pattern; std::string content; };
struct Nfc {};  // Unicode canonical composition (utf8proc), as Qwen2's files ask
using NormalizerStep = std::variant<Prepend, ReplaceText, Nfc>;

// Pre-tokenizers.
struct ByteLevelSplit { bool add_prefix_space; std::shared_ptr<UnicodeRegex> regex; };
struct SplitStep { Pattern pattern; SplitBehavior behavior; bool invert; };
struct MetaspaceSplit { std::string replacement; PrependScheme scheme; bool split; };
using PreTokenizerStep = std::variant<ByteLevelSplit, SplitStep, MetaspaceSplit>;

// Decoders.
struct ByteLevelDecode {};
struct ByteFallbackDecode {};
struct FuseDecode {};
struct StripDecode { std::string content; int start; int stop; };
struct MetaspaceDecode { std::string replacement; PrependScheme scheme; };
using DecoderStep = std::variant<ByteLevelDecode, ReplaceText, ByteFallbackDecode, FuseDecode, StripDecode, MetaspaceDecode>;

struct AddedToken {
  std::string content;
  int32_t id;
  bool special, lstrip, rstrip, single_word, normalized;
};

// A piece of text during pre-tokenisation; `at_start` says it begins at offset 0 of the input.
struct Piece {
  std::string text;
  bool at_start;
};

// The pieces of `text` cut by `matches`, as the library's split with the behaviour (empty pieces dropped).
std::vector<std::string> split_by(std::string_view text, const std::vector<std::pair<size_t, size_t>>& matches,
                                  SplitBehavior behavior, bool invert) {
  struct Span { size_t begin, end; bool is_match; };
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [begin, end] : matches) {
    if (begin != prev) spans.push_back({prev, begin, invert});
    spans.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});

  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) kept.push_back(s);
      break;
    case SplitBehavior::kIsolated: kept = spans; break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) kept.back().begin = it->begin;
        else kept.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) kept.back().end = s.end;
        else kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  std::vector<std::string> pieces;
  for (const Span& s : kept)
    if (s.end > s.begin) pieces.emplace_back(text.substr(s.begin, s.end - s.begin));
  return pieces;
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

// "<0xAB>" -> 0xAB.
std::optional<uint8_t> byte_token_value(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(token[3]), lo = hex(token[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

bool is_word_char(std::string_view text, size_t pos) {
  const auto c = static_cast<unsigned char>(text[pos]);
  return c >= 0x80 || std::isalnum(c) || c == '_';
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Ids may leave holes, but at most this many beyond the number of tokens the file lists: the id tables are
// dense, so a forged id of 2^31 must be refused, not allocated for.
constexpr int64_t kMaxIdGap = 1 << 16;

// An integer of JSON `v` in [lo, hi]; a float, a string or a value out of range is an error naming `what`.
int64_t json_int(const Json& v, int64_t lo, int64_t hi, const std::string& what) {
  MOE_CHECK(v.is_number_integer(), "{} must be an integer, got {}", what, v.dump());
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(hi)
                                               : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  MOE_CHECK(in_range, "{} is {}, outside [{}, {}]", what, v.dump(), lo, hi);
  return v.get<int64_t>();
}

}  // namespace

struct Tokenizer::Impl {
  std::string source;
  std::unordered_map<std::string, int32_t> token_ids;  // model vocabulary and added tokens
  std::vector<std::string> tokens;                     // [vocab_size]
  std::vector<bool> has_token;                         // [vocab_size]
  std::vector<bool> is_special;                        // [vocab_size]
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (left, right) -> (rank, merged id)
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  int32_t unk_id = -1;
  std::vector<int32_t> byte_ids;  // [256] id of <0xXX>, -1 when absent
  std::vector<AddedToken> raw_added, normalized_added;  // normalized_added hold normalised content
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;
  bool has_decoder = false;
  std::vector<int32_t> prefix_ids, suffix_ids;  // post-processor template around a single sequence
  int64_t max_id = 0;  // the largest id accepted: the tokens the file lists plus kMaxIdGap

  [[noreturn]] void fail(const std::string& what) const { MOE_FAIL("{}: {}", source, what); }

  const Json& need(const Json& j, const char* key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key)) fail(fmt::format("{} has no \"{}\"", where, key));
    return j.at(key);
  }

  Pattern parse_pattern(const Json& j, const std::string& where) const {
    Pattern p;
    if (j.contains("String")) p.literal = j.at("String").get<std::string>();
    else if (j.contains("Regex")) p.regex = std::make_shared<UnicodeRegex>(j.at("Regex").get<std::string>());
    else fail(fmt::format("{} pattern is neither String nor Regex", where));
    return p;
  }

  static PrependScheme parse_scheme(const Json& j) {
    if (j.contains("prepend_scheme")) {
      const auto s = j.at("prepend_scheme").get<std::string>();
      return s == "first" ? PrependScheme::kFirst : s == "never" ? PrependScheme::kNever : PrependScheme::kAlways;
    }
    return j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
  }

  void parse_normalizer(const Json& j) {
    if (j.is_null()) return;
    const auto type = need(j, "type", "normalizer").get<std::string>();
    if (type == "Sequence") {
      for (const Json& n : need(j, "normalizers", "normalizer Sequence")) parse_normalizer(n);
    } else if (type == "Prepend") {
      normalizer.push_back(Prepend{need(j, "prepend", "normalizer Prepend").get<std::string>()});
    } else if (type == "Replace") {
      normalizer.push_back(ReplaceText{parse_pattern(need(j, "pattern", "normalizer Replace"), "normalizer Replace"),
                                       need(j, "content", "normalizer Replace").get<std::string>()});
    } else if (type == "NFC") {
      normalizer.push_back(Nfc{});
    } else {
      fail(fmt::format("unsupported normalizer type '{}' (supported: Sequence, Prepend, Replace, NFC)", type));
    }
  }

  void parse_pre_tokenizer(const Json& j) {
    if (j.is_null()) return;
    const auto type = need(j, "type", "pre_tokenizer").get<std::string>();
    if (type == "Sequence") {
      for (const Json& p : need(j, "pretokenizers", "pre_tokenizer Sequence")) parse_pre_tokenizer(p);
    } else if (type == "ByteLevel") {
      std::shared_ptr<UnicodeRegex> regex;
      if (j.value("use_regex", true)) regex = std::make_shared<UnicodeRegex>(kGpt2Pattern);
      pre_tokenizer.push_back(ByteLevelSplit{j.value("add_prefix_space", false), regex});
    } else if (type == "Split") {
      const auto behavior = need(j, "behavior", "pre_tokenizer Split").get<std::string>();
      const std::vector<std::pair<const char*, SplitBehavior>> names = {
          {"Removed", SplitBehavior::kRemoved}, {"Isolated", SplitBehavior::kIsolated},
          {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
          {"MergedWithNext", SplitBehavior::kMergedWithNext}, {"Contiguous", SplitBehavior::kContiguous}};
      auto it = std::find_if(names.begin(), names.end(), [&](const auto& n) { return behavior == n.first; });
      if (it == names.end()) fail(fmt::format("unknown Split behavior '{}'", behavior));
      pre_tokenizer.push_back(SplitStep{parse_pattern(need(j, "pattern", "pre_tokenizer Split"), "pre_tokenizer Split"),
                                        it->second, j.value("invert", false)});
    } else if (type == "Metaspace") {
      pre_tokenizer.push_back(MetaspaceSplit{j.value("replacement", std::string(kMetaspace)), parse_scheme(j),
                                             j.value("split", true)});
    } else if (type == "Digits") {
      Pattern digits{.literal = "", .regex = std::make_shared<UnicodeRegex>(
                                        j.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)")};
      pre_tokenizer.push_back(SplitStep{digits, SplitBehavior::kIsolated, false});
    } else {
      fail(fmt::format("unsupported pre_tokenizer type '{}' (supported: Sequence, ByteLevel, Split, Metaspace, Digits)",
                       type));
    }
  }

  void parse_decoder(const Json& j) {
    if (j.is_null()) return;
    has_decoder = true;
    const auto type = need(j, "type", "decoder").get<std::string>();
    if (type == "Sequence") {
      for (const Json& d : need(j, "decoders", "decoder Sequence")) parse_decoder(d);
    } else if (type == "ByteLevel") {
      decoder.push_back(ByteLevelDecode{});
    } else if (type == "Replace") {
      decoder.push_back(ReplaceText{parse_pattern(need(j, "pattern", "decoder Replace"), "decoder Replace"),
                                    need(j, "content", "decoder Replace").get<std::string>()});
    } else if (type == "ByteFallback") {
      decoder.push_back(ByteFallbackDecode{});
    } else if (type == "Fuse") {
      decoder.push_back(FuseDecode{});
    } else if (type == "Strip") {
      auto count = [&](const char* key) {
      return j.contains(key) ? static_cast<int>(json_int(j.at(key), 0, 1 << 20, fmt::format("decoder Strip {}", key)))
                             : 0;
    };
    decoder.push_back(StripDecode{need(j, "content", "decoder Strip").get<std::string>(), count("start"), count("stop")});
    } else if (type == "Metaspace") {
      decoder.push_back(MetaspaceDecode{j.value("replacement", std::string(kMetaspace)), parse_scheme(j)});
    } else {
      fail(fmt::format("unsupported decoder type '{}' (supported: Sequence, ByteLevel, Replace, ByteFallback, Fuse, "
                       "Strip, Metaspace)",
                       type));
    }
  }

  int32_t id_of_special(const std::string& token) const {
    auto it = token_ids.find(token);
    if (it == token_ids.end()) fail(fmt::format("post_processor names token '{}' that is not in the vocabulary", token));
    return it->second;
  }

  void parse_post_processor(const Json& j) {
    if (j.is_null()) return;
    const auto type = need(j, "type", "post_processor").get<std::string>();
    if (type == "Sequence") {
      for (const Json& p : need(j, "processors", "post_processor Sequence")) parse_post_processor(p);
    } else if (type == "ByteLevel") {
      // Offsets only: adds no token.
    } else if (type == "TemplateProcessing") {
      bool seen_sequence = false;
      for (const Json& item : need(j, "single", "post_processor TemplateProcessing")) {
        if (item.contains("Sequence")) {
          seen_sequence = true;
        } else if (item.contains("SpecialToken")) {
          const auto name = item.at("SpecialToken").at("id").get<std::string>();
          std::vector<int32_t> ids;
          const Json& specials = j.value("special_tokens", Json::object());
          if (specials.contains(name)) {
            for (const Json& id : specials.at(name).at("ids")) {
              const auto value = static_cast<int32_t>(json_int(id, 0, max_id, fmt::format("special token '{}' id", name)));
              if (static_cast<size_t>(value) >= tokens.size() || !has_token[value])
                fail(fmt::format("post_processor special token '{}' has id {}, which is not in the vocabulary", name, value));
              ids.push_back(value);
            }
          } else {
            ids = {id_of_special(name)};
          }
          auto& target = seen_sequence ? suffix_ids : prefix_ids;
          target.insert(target.end(), ids.begin(), ids.end());
        }
      }
    } else {
      fail(fmt::format("unsupported post_processor type '{}' (supported: TemplateProcessing, ByteLevel, Sequence)", type));
    }
  }

  void set_token(int32_t id, const std::string& token) {
    if (id < 0) fail(fmt::format("token '{}' has negative id {}", token, id));
    if (id > max_id)
      fail(fmt::format("token '{}' has id {}, but the file lists only {} tokens (ids may leave gaps of at most {} in "
                       "all): a corrupt tokenizer.json",
                       token, id, max_id - kMaxIdGap + 1, kMaxIdGap));
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      has_token.resize(id + 1, false);
      is_special.resize(id + 1, false);
    }
    tokens[id] = token;
    has_token[id] = true;
    token_ids[token] = id;
  }

  void parse_model(const Json& j) {
    const auto type = need(j, "type", "model").get<std::string>();
    if (type != "BPE") fail(fmt::format("unsupported model type '{}' (supported: BPE)", type));
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"})
      if (j.contains(key) && !j.at(key).is_null()) fail(fmt::format("unsupported BPE option \"{}\"", key));
    for (const auto& [token, id] : need(j, "vocab", "model").items())
      set_token(static_cast<int32_t>(json_int(id, INT32_MIN, INT32_MAX, fmt::format("the id of token '{}'", token))), token);
    byte_fallback = j.value("byte_fallback", false);
    fuse_unk = j.value("fuse_unk", false);
    ignore_merges = j.value("ignore_merges", false);
    if (j.contains("unk_token") && !j.at("unk_token").is_null()) {
      const auto unk = j.at("unk_token").get<std::string>();
      auto it = token_ids.find(unk);
      if (it == token_ids.end()) fail(fmt::format("unk_token '{}' is not in the vocabulary", unk));
      unk_id = it->second;
    }
    byte_ids.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      auto it = token_ids.find(fmt::format("<0x{:02X}>", b));
      if (it != token_ids.end()) byte_ids[b] = it->second;
    }
    int32_t rank = 0;
    for (const Json& m : need(j, "merges", "model")) {
      std::string left, right;
      if (m.is_string()) {
        const auto s = m.get<std::string>();
        const size_t space = s.find(' ', 1);
        if (space == std::string::npos) fail(fmt::format("merge {} is not of the form \"left right\"", rank));
        left = s.substr(0, space);
        right = s.substr(space + 1);
      } else if (m.is_array() && m.size() == 2) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        fail(fmt::format("merge {} is neither \"left right\" nor [left, right]", rank));
      }
      auto l = token_ids.find(left), r = token_ids.find(right), merged = token_ids.find(left + right);
      if (l == token_ids.end() || r == token_ids.end() || merged == token_ids.end())
        fail(fmt::format("merge {} ('{}' '{}') refers to a token that is not in the vocabulary", rank, left, right));
      merges.emplace(pair_key(l->second, r->second), std::pair{rank, merged->second});
      ++rank;
    }
  }

  void parse_added_tokens(const Json& j) {
    if (j.is_null()) return;
    for (const Json& t : j) {
      AddedToken token{need(t, "content", "added token").get<std::string>(),
                       static_cast<int32_t>(json_int(need(t, "id", "added token"), INT32_MIN, INT32_MAX, "added token id")),
                       t.value("special", false), t.value("lstrip", false), t.value("rstrip", false),
                       t.value("single_word", false), t.value("normalized", false)};
      set_token(token.id, token.content);
      is_special[token.id] = token.special;
      if (token.content.empty()) continue;
      if (token.normalized) {
        token.content = normalize(token.content);
        normalized_added.push_back(token);
      } else {
        raw_added.push_back(token);
      }
    }
    // Longest first, so that the first match at a position is the longest (leftmost-longest).
    for (auto* list : {&raw_added, &normalized_added})
      std::stable_sort(list->begin(), list->end(),
                       [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }

  std::string normalize(std::string text) const {
    for (const NormalizerStep& step : normalizer) {
      if (const auto* p = std::get_if<Prepend>(&step)) {
        if (!text.empty()) text = p->text + text;
      } else if (const auto* r = std::get_if<ReplaceText>(&step)) {
        text = r->pattern.replace(text, r->content);
      } else if (std::holds_alternative<Nfc>(step)) {
        text = nfc(text);
      }
    }
    return text;
  }

  // Splits `text` on the added tokens of `list`; a segment is text (id -1) or an added token's id.
  struct Segment {
    std::string text;
    int32_t id;
    bool at_start;
  };
  std::vector<Segment> split_added(const std::string& text, bool at_start, const std::vector<AddedToken>& list) const {
    std::vector<Segment> out;
    size_t text_begin = 0;
    for (size_t pos = 0; pos < text.size();) {
      const AddedToken* hit = nullptr;
      for (const AddedToken& t : list) {
        if (text.compare(pos, t.content.size(), t.content) != 0) continue;
        const size_t end = pos + t.content.size();
        if (t.single_word && ((pos > 0 && is_word_char(text, pos - 1)) || (end < text.size() && is_word_char(text, end))))
          continue;
        hit = &t;
        break;
      }
      if (hit == nullptr) {
        pos += text::utf8_char_length(text[pos]);
        continue;
      }
      size_t begin = pos, end = pos + hit->content.size();
      if (hit->lstrip)
        while (begin > text_begin && is_space(text[begin - 1])) --begin;
      if (hit->rstrip)
        while (end < text.size() && is_space(text[end])) ++end;
      if (begin > text_begin) out.push_back({text.substr(text_begin, begin - text_begin), -1, at_start && text_begin == 0});
      out.push_back({"", hit->id, false});
      text_begin = pos = end;
    }
    if (text_begin < text.size()) out.push_back({text.substr(text_begin), -1, at_start && text_begin == 0});
    return out;
  }

  std::vector<Piece> pre_tokenize(Piece whole) const {
    std::vector<Piece> pieces = {std::move(whole)};
    for (const PreTokenizerStep& step : pre_tokenizer) {
      std::vector<Piece> next;
      for (Piece& piece : pieces) {
        if (const auto* b = std::get_if<ByteLevelSplit>(&step)) {
          std::string text = piece.text;
          if (b->add_prefix_space && !text.starts_with(' ')) text.insert(text.begin(), ' ');
          std::vector<std::string> parts = {text};
          if (b->regex) parts = split_by(text, b->regex->find_all(text), SplitBehavior::kIsolated, false);
          for (size_t i = 0; i < parts.size(); ++i) {
            std::string mapped;
            for (unsigned char c : parts[i]) text::append_utf8(mapped, byte_to_char()[c]);
            next.push_back({std::move(mapped), piece.at_start && i == 0});
          }
        } else if (const auto* s = std::get_if<SplitStep>(&step)) {
          auto parts = split_by(piece.text, s->pattern.find_all(piece.text), s->behavior, s->invert);
          for (size_t i = 0; i < parts.size(); ++i) next.push_back({std::move(parts[i]), piece.at_start && i == 0});
        } else if (const auto* m = std::get_if<MetaspaceSplit>(&step)) {
          std::string text = piece.text;
          replace_all(text, " ", m->replacement);
          const bool prepend = m->scheme == PrependScheme::kAlways || (m->scheme == PrependScheme::kFirst && piece.at_start);
          if (prepend && !text.starts_with(m->replacement)) text = m->replacement + text;
          std::vector<std::string> parts = {text};
          if (m->split) {
            Pattern p{.literal = m->replacement, .regex = nullptr};
            parts = split_by(text, p.find_all(text), SplitBehavior::kMergedWithNext, false);
          }
          for (size_t i = 0; i < parts.size(); ++i) next.push_back({std::move(parts[i]), piece.at_start && i == 0});
        }
      }
      pieces = std::move(next);
    }
    return pieces;
  }

  // BPE on one pre-token: characters (or their byte tokens) merged by rank, leftmost first among equals.
  void bpe(const std::string& word, std::vector<int32_t>& out) const {
    if (ignore_merges) {
      auto it = token_ids.find(word);
      if (it != token_ids.end()) {
        out.push_back(it->second);
        return;
      }
    }
    std::vector<int32_t> symbols;  // [n_symbols]
    bool previous_unk = false;
    for (size_t pos = 0; pos < word.size();) {
      const size_t length = std::min(text::utf8_char_length(word[pos]), word.size() - pos);
      const std::string ch = word.substr(pos, length);
      pos += length;
      if (auto it = token_ids.find(ch); it != token_ids.end()) {
        symbols.push_back(it->second);
        previous_unk = false;
        continue;
      }
      if (byte_fallback && std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_ids[static_cast<uint8_t>(c)] >= 0; })) {
        for (char c : ch) symbols.push_back(byte_ids[static_cast<uint8_t>(c)]);
        previous_unk = false;
        continue;
      }
      if (unk_id >= 0 && !(fuse_unk && previous_unk)) symbols.push_back(unk_id);
      previous_unk = unk_id >= 0;
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
      auto it = merges.find(pair_key(symbols[pos], symbols[next[pos]]));
      if (it != merges.end()) queue.push({it->second.first, pos, symbols[pos], symbols[next[pos]], it->second.second});
    };
    for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
    std::vector<bool> alive(n, true);
    while (!queue.empty()) {
      const Candidate c = queue.top();
      queue.pop();
      // Stale entries: a side was merged away or changed since the candidate was queued.
      if (!alive[c.pos] || symbols[c.pos] != c.left || next[c.pos] < 0 || symbols[next[c.pos]] != c.right) continue;
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

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const {
    MOE_CHECK(text::is_valid_utf8(text), "text to tokenize is not valid UTF-8");
    std::vector<int32_t> ids;
    if (add_special_tokens) ids = prefix_ids;
    for (const Segment& raw : split_added(std::string(text), true, raw_added)) {
      if (raw.id >= 0) {
        ids.push_back(raw.id);
        continue;
      }
      for (const Segment& seg : split_added(normalize(raw.text), raw.at_start, normalized_added)) {
        if (seg.id >= 0) {
          ids.push_back(seg.id);
          continue;
        }
        for (const Piece& piece : pre_tokenize({seg.text, seg.at_start})) bpe(piece.text, ids);
      }
    }
    if (add_special_tokens) ids.insert(ids.end(), suffix_ids.begin(), suffix_ids.end());
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::vector<std::string> pieces;
    for (int32_t id : ids) {
      const std::string& token = token_of(id);
      if (skip_special_tokens && is_special[id]) continue;
      pieces.push_back(token);
    }
    if (!has_decoder) {
      std::string joined;
      for (size_t i = 0; i < pieces.size(); ++i) joined += (i ? " " : "") + pieces[i];
      return joined;
    }
    for (const DecoderStep& step : decoder) pieces = apply(step, std::move(pieces));
    std::string text;
    for (const std::string& p : pieces) text += p;
    return text;
  }

  static std::vector<std::string> apply(const DecoderStep& step, std::vector<std::string> pieces) {
    if (std::holds_alternative<ByteLevelDecode>(step)) {
      std::string bytes;
      for (const std::string& p : pieces) {
        std::string decoded;
        bool all_mapped = true;
        for (size_t pos = 0; pos < p.size() && all_mapped;) {
          const size_t length = text::utf8_char_length(p[pos]);
          auto it = char_to_byte().find(p.substr(pos, length));
          if (it == char_to_byte().end()) all_mapped = false;
          else decoded += static_cast<char>(it->second);
          pos += length;
        }
        bytes += all_mapped ? decoded : p;
      }
      return {text::utf8_lossy(bytes)};
    }
    if (const auto* r = std::get_if<ReplaceText>(&step)) {
      for (std::string& p : pieces) p = r->pattern.replace(p, r->content);
      return pieces;
    }
    if (std::holds_alternative<ByteFallbackDecode>(step)) {
      std::vector<std::string> out;
      std::string bytes;
      auto flush = [&] {
        if (bytes.empty()) return;
        if (text::is_valid_utf8(bytes)) out.push_back(bytes);
        else
          for (size_t i = 0; i < bytes.size(); ++i) out.push_back("\xEF\xBF\xBD");  // one U+FFFD per byte
        bytes.clear();
      };
      for (std::string& p : pieces) {
        if (auto b = byte_token_value(p)) {
          bytes += static_cast<char>(*b);
        } else {
          flush();
          out.push_back(std::move(p));
        }
      }
      flush();
      return out;
    }
    if (std::holds_alternative<FuseDecode>(step)) {
      std::string fused;
      for (const std::string& p : pieces) fused += p;
      return {fused};
    }
    if (const auto* s = std::get_if<StripDecode>(&step)) {
      if (s->content.empty()) return pieces;  // nothing to strip (the library's content is one character)
      for (std::string& p : pieces) {
        size_t begin = 0, end = p.size();
        for (int i = 0; i < s->start && p.compare(begin, s->content.size(), s->content) == 0 && begin < end; ++i)
          begin += s->content.size();
        for (int i = 0; i < s->stop && end - begin >= s->content.size() &&
                        p.compare(end - s->content.size(), s->content.size(), s->content) == 0;
             ++i)
          end -= s->content.size();
        p = p.substr(begin, end - begin);
      }
      return pieces;
    }
    if (const auto* m = std::get_if<MetaspaceDecode>(&step)) {
      for (size_t i = 0; i < pieces.size(); ++i) {
        // NOTE: as the library does, every replacement in the first token is dropped when a prefix was added.
        replace_all(pieces[i], m->replacement, i == 0 && m->scheme != PrependScheme::kNever ? "" : " ");
      }
      return pieces;
    }
    return pieces;
  }

  const std::string& token_of(int32_t id) const {
    MOE_CHECK(id >= 0 && static_cast<size_t>(id) < tokens.size() && has_token[id],
              "token id {} is not in the vocabulary of {} (ids 0..{})", id, source,
              static_cast<int64_t>(tokens.size()) - 1);
    return tokens[id];
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MOE_CHECK(in.good(), "cannot open tokenizer file {}: check the path (a model directory holds tokenizer.json)",
            path.string());
  std::stringstream text;
  text << in.rdbuf();
  return from_json(text.str(), path.string());
}

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& source) {
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const Json::exception& e) {
    MOE_FAIL("{}: not valid JSON: {}", source, e.what());
  }
  try {
    // The id tables are dense: ids are bounded by the number of tokens listed (vocab plus added tokens).
    int64_t listed = 0;
    if (j.is_object() && j.contains("model") && j["model"].is_object() && j["model"].contains("vocab"))
      listed += static_cast<int64_t>(j["model"]["vocab"].size());
    if (j.is_object() && j.contains("added_tokens") && j["added_tokens"].is_array())
      listed += static_cast<int64_t>(j["added_tokens"].size());
    impl->max_id = std::min<int64_t>(listed - 1 + kMaxIdGap, INT32_MAX - 1);
    // Order matters: added tokens are normalised with the normaliser, and the post-processor names tokens.
    impl->parse_model(impl->need(j, "model", "tokenizer.json"));
    impl->parse_normalizer(j.value("normalizer", Json()));
    impl->parse_added_tokens(j.value("added_tokens", Json()));
    impl->parse_pre_tokenizer(j.value("pre_tokenizer", Json()));
    impl->parse_decoder(j.value("decoder", Json()));
    impl->parse_post_processor(j.value("post_processor", Json()));
  } catch (const Json::exception& e) {
    MOE_FAIL("{}: unexpected tokenizer.json structure: {}", source, e.what());
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(source)) throw;
    MOE_FAIL("{}: {}", source, e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->encode(text, add_special_tokens);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  return impl_->decode(ids, skip_special_tokens);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->tokens.size()); }

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->token_ids.find(std::string(token));
  return it == impl_->token_ids.end() ? -1 : it->second;
}

const std::string& Tokenizer::id_to_token(int32_t id) const { return impl_->token_of(id); }

}  // namespace moe
