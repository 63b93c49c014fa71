#include "text_stream.h"

#include <algorithm>

#include "moe/core/check.h"

namespace moe::engine {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD: what a cut-off UTF-8 sequence decodes to

// The largest n <= limit such that text[0, n) does not end inside a UTF-8 character.
size_t char_boundary(const std::string& text, size_t limit) {
  size_t n = limit;
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return n;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : tokenizer_(&tokenizer), stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  for (const std::string& s : stop_) hold_ = std::max(hold_, s.size() - 1);
}

bool TextStream::append(int32_t token) {
  MOE_CHECK(!stopped_, "the text already ended at a stop string");
  if (token >= 0 && token < tokenizer_->vocab_size()) ids_.push_back(token);
  const size_t before = text_.size();
  // NOTE: decoded whole each time: a byte-level token may complete a character that earlier tokens began.
  text_ = tokenizer_->decode(ids_, /*skip_special_tokens=*/true);
  // A stop string that appeared now ends within the new bytes (or a trailing U+FFFD they replaced), so it
  // starts after before - hold_ - 3.
  const size_t back = hold_ + kReplacement.size();
  const size_t from = before > back ? before - back : 0;
  size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, text_.find(s, from));
  if (cut == std::string::npos) return false;
  text_.resize(cut);
  stopped_ = true;
  return true;
}

std::string TextStream::take(bool finished) {
  size_t end = text_.size();
  if (!finished && !stopped_) {
    // A trailing U+FFFD may be a character whose remaining bytes are still to come.
    if (std::string_view(text_).ends_with(kReplacement)) end -= kReplacement.size();
    end = end > hold_ ? end - hold_ : 0;
    end = char_boundary(text_, end);
  }
  if (end <= taken_) return {};
  std::string piece = text_.substr(taken_, end - taken_);
  taken_ = end;
  return piece;
}

}  // namespace moe::engine
