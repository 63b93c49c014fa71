#pragma once
// The chat template parser: tokens to statements, as jinja2's parser reads them. Tags: if/elif/else, for
// (tuple targets, `if` filter, else, break/continue), set (inline, block, namespace attribute), macro, call,
// filter, with, raw (in the lexer) and transformers' generation tag. Expressions: literals, lists, dicts,
// tuples, attribute and item access, slices, calls with keyword arguments, filters, tests and every Jinja
// operator. An unknown tag, filter or test is an error here, as jinja2 reports it when it compiles.

#include "chat_template_ast.h"
#include "chat_template_lexer.h"

#include <vector>

namespace moe::chat {

// Throws moe::Error naming the line.
Body parse(const std::vector<Token>& tokens);

}  // namespace moe::chat
