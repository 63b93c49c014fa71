#include "text_stream.h"

#include <algorithm>
#include <span>
#include <string_view>

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
  // NOTE: text_[0, final_bytes_) never changes; a stop string that appears now ends past it, so it starts
  // at most hold_ bytes before it.
  const size_t from = final_bytes_ > hold_ ? final_bytes_ - hold_ : 0;
  if (token >= 0 && token < tokenizer_->vocab_size()) {
    ids_.push_back(token);
    const std::span<const int32_t> ids(ids_);
    const std::string prefix = tokenizer_->decode(ids.subspan(window_begin_, window_final_ - window_begin_),
                                                  /*skip_special_tokens=*/true);
    const std::string window = tokenizer_->decode(ids.subspan(window_begin_), /*skip_special_tokens=*/true);
    text_.resize(final_bytes_);
    if (window.starts_with(prefix)) {
      text_.append(window, prefix.size());
    } else {
      // NOTE: byte-fallback decoding turns a whole run of byte tokens into U+FFFD when the run is not valid
      // UTF-8, complete characters of the run included; those were handed out already, so the new tokens
      // are decoded on their own (a decode of all the tokens at once differs here, on invalid bytes only).
      text_ += tokenizer_->decode(ids.subspan(window_final_), /*skip_special_tokens=*/true);
    }
    // A trailing U+FFFD may be a character whose remaining bytes are still to come: the window then grows
    // until they do (a byte-level or byte-fallback token may complete a character that earlier ones began).
    if (!std::string_view(window).ends_with(kReplacement)) {
      window_begin_ = window_final_;
      window_final_ = ids_.size();
      final_bytes_ = text_.size();
    }
  }
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
    end = final_bytes_;  // the rest ends inside a character
    end = end > hold_ ? end - hold_ : 0;
    end = char_boundary(text_, end);
  }
  if (end <= taken_) return {};
  std::string piece = text_.substr(taken_, end - taken_);
  taken_ = end;
  return piece;
}

}  // namespace moe::engine
