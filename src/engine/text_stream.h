#pragma once
// A request's generated text as its tokens come: decoded with the tokenizer (special tokens skipped, ids
// past the tokenizer's vocabulary left out), watched for stop strings, and handed out in pieces that are
// final: the text so far minus the tail that could still become a stop string or is part of a character
// whose bytes have not all come. The pieces add up to text().

#include <cstdint>
#include <string>
#include <vector>

#include "moe/text/tokenizer.h"

namespace moe::engine {

class TextStream {
 public:
  // `tokenizer` must outlive the stream.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop);

  // Appends `token` to the text; true when the text now holds a stop string (the text then ends before
  // its first occurrence, and nothing more may be appended).
  bool append(int32_t token);
  // The text that became final since the last call; with `finished`, all that is left.
  std::string take(bool finished);
  const std::string& text() const { return text_; }

 private:
  const Tokenizer* tokenizer_;
  std::vector<std::string> stop_;
  size_t hold_ = 0;           // bytes of the text's tail held back: the longest stop string less one
  std::vector<int32_t> ids_;  // the tokens decoded so far
  std::string text_;
  size_t taken_ = 0;  // bytes of text_ handed out
  bool stopped_ = false;
};

}  // namespace moe::engine
