#pragma once
// A request's generated text as its tokens come: decoded with the tokenizer (special tokens skipped, ids
// past the tokenizer's vocabulary left out), watched for stop strings, and handed out in pieces that are
// final: the text so far minus the tail that could still become a stop string or is part of a character
// whose bytes have not all come. The pieces add up to text().
//
// Decoding is incremental (a step costs the same at the thousandth token as at the first): each step
// decodes only a window of the last tokens, from the last point where the text was complete. The window's
// new text is its decode minus the decode of its already-final prefix tokens, so that what depends on a
// token's place in the call (Metaspace's and Strip's leading space) cancels out. The text equals the decode
// of all the tokens at once, but for byte-fallback tokens that form invalid UTF-8: there a character complete
// so far stays as it was handed out, where the whole decode makes the byte run's every token a U+FFFD.

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
  // The window decoded each step is ids_[window_begin_, end); ids_[window_begin_, window_final_) are
  // tokens whose text is already in text_[0, final_bytes_).
  size_t window_begin_ = 0, window_final_ = 0;
  size_t final_bytes_ = 0;  // text_ past it: the decode of tokens that end inside a character
  std::string text_;
  size_t taken_ = 0;  // bytes of text_ handed out
  bool stopped_ = false;
};

}  // namespace moe::engine
