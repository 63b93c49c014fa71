#pragma once
// The chat template lexer: Jinja source to tokens, with jinja2's whitespace control applied as transformers
// configures it (trim_blocks: the newline after a block or comment tag goes; lstrip_blocks: spaces and tabs
// from the start of a line up to a block or comment tag go; "-" strips all whitespace on its side, "+" keeps
// it). Line endings are normalised to "\n" and one trailing newline of the source is dropped, as jinja2 does.

#include <string>
#include <string_view>
#include <vector>

namespace moe::chat {

struct Token {
  enum class Kind { data, variable_begin, variable_end, block_begin, block_end, name, string, integer, floating,
                    op, eof };
  Kind kind;
  std::string text;  // data text, name, operator, or a string literal's decoded value; a number's digits
  int line;
};

// Throws moe::Error naming the line for an unclosed tag, comment or string.
std::vector<Token> lex(std::string_view source);

}  // namespace moe::chat
